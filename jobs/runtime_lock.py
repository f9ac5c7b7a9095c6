"""Writes ``requirements-runtime.lock``: the part of ``requirements.lock`` that a cluster's
packed environment needs — syphon's core dependencies and what they pull in, with the
same versions and hashes — and nothing from the extras (no PySpark: the cluster brings
its own, and spark-submit puts its ``pyspark.zip`` on the workers' path).

    python jobs/runtime_lock.py [--check]

The closure is read from the lock's own ``# via`` annotations, so no environment needs
to be installed. ``--check`` exits 1 when the file on disk differs (a test runs it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
RUNTIME = ROOT / "requirements-runtime.lock"
HEADER = """\
# The runtime part of requirements.lock (syphon's core dependencies, no extras, no
# PySpark), written by `python jobs/runtime_lock.py` (./dev.sh lock runs it).
# Install it into the environment that jobs/pack_env.sh packs for spark-submit.
"""


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def core_dependencies(pyproject: Path = ROOT / "pyproject.toml") -> set[str]:
    """The names of the ``[project] dependencies`` (no extras)."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    return {
        _name(re.split(r"[\s\[<>=!~;]", dep, maxsplit=1)[0])
        for dep in data["project"]["dependencies"]
    }


def blocks(lock_text: str) -> list[tuple[str, str, set[str]]]:
    """Each pinned requirement of a pip-compile lock: (name, its text, its parents)."""
    out: list[tuple[str, str, set[str]]] = []
    for chunk in re.split(r"\n(?=[A-Za-z0-9])", lock_text):
        first = chunk.split("\n", 1)[0]
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", first)
        if not match:
            continue
        via = re.findall(r"^[ \t]*#[ \t]+(?:via[ \t]+)?([A-Za-z0-9][^ \t\n]*)", chunk, re.M)
        parents = {_name(p) for p in via if p != "via"}
        out.append((_name(match.group(1)), chunk.rstrip("\n"), parents))
    return out


def runtime_lock(lock_text: str, core: set[str]) -> str:
    pinned = blocks(lock_text)
    missing = core - {name for name, _, _ in pinned}
    if missing:
        raise SystemExit(f"requirements.lock lacks {sorted(missing)}: run ./dev.sh lock")
    keep = set(core)
    changed = True
    while changed:  # a package is needed when something needed requires it
        changed = False
        for name, _, parents in pinned:
            if name not in keep and parents & keep:
                keep.add(name)
                changed = True
    return HEADER + "\n".join(text for name, text, _ in pinned if name in keep) + "\n"


def main(argv: list[str]) -> int:
    text = runtime_lock(LOCK.read_text(encoding="utf-8"), core_dependencies())
    if "--check" in argv:
        if not RUNTIME.exists() or RUNTIME.read_text(encoding="utf-8") != text:
            print(f"{RUNTIME.name} is stale: run python jobs/runtime_lock.py", file=sys.stderr)
            return 1
        return 0
    RUNTIME.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
