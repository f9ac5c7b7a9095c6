"""The lock of a version leg (``./dev.sh test``): ``requirements.lock`` with the packages
of the leg's own lock (``requirements-spark4.0.lock``: PySpark 4.0) in place of its own,
every line hashed as before. ``python tests/versions/leg_lock.py LEG_LOCK`` writes it to
standard output."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(text: str) -> list[tuple[str, list[str]]]:
    """A lock's requirements, each (canonical name, its lines: the pin, its hashes and
    its comments), in order; what comes before the first is dropped."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _REQUIREMENT.match(line)
        if match:
            out.append((_canonical(match.group(1)), [line]))
        elif out and line.startswith(" "):
            out[-1][1].append(line)
    return out


def merged(base: str, leg: str) -> str:
    """``base`` with the requirements ``leg`` pins taken from ``leg``."""
    mine = entries(leg)
    replaced = {name for name, _ in mine}
    kept = [lines for name, lines in entries(base) if name not in replaced]
    chosen = [*kept, *(lines for _, lines in mine)]
    return "\n".join(line for lines in chosen for line in lines) + "\n"


if __name__ == "__main__":
    base = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    sys.stdout.write(merged(base, Path(sys.argv[1]).read_text(encoding="utf-8")))
