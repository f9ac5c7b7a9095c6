"""The Spark 4.0 leg's environment (``./dev.sh test``): the project's environment with
the leg's own pins in front of it, instead of a second copy of everything.

``.venv-spark4.0`` is a venv without packages of its own but the leg's
(``requirements-spark4.0.lock``: PySpark 4.0) and syphon's editable install; a ``.pth``
file adds ``.venv``'s site-packages after its own, so that ``import pyspark`` (and
``importlib.metadata``) find the leg's PySpark first and everything else where the main
run finds it: the same releases, installed once. A full second install of the lock cost
the leg's set-up more than its tests.

- ``python tests/versions/overlay.py link BASE_SITE``, run by the leg's interpreter:
  writes the ``.pth`` into its site-packages.
- ``python tests/versions/overlay.py check``, the same: every requirement of the leg's
  packages is met by what that interpreter imports (PySpark 4.0's py4j, pandas,
  pyarrow, numpy and grpcio by the lock's releases); the leg is not run otherwise.
"""

from __future__ import annotations

import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

ROOT = Path(__file__).parents[2]
LEG_LOCK = ROOT / "requirements-spark4.0.lock"
PTH = "_syphon_base.pth"


def pth_line(base_site: Path) -> str:
    """The ``.pth`` line that adds ``base_site`` (its own ``.pth`` files too) after the
    leg's site-packages."""
    return f"import site; site.addsitedir({str(base_site)!r})\n"


def pinned(lock_text: str) -> list[str]:
    """The names a lock pins (``name==version`` lines)."""
    lines = lock_text.splitlines()
    return [line.split("==", 1)[0] for line in lines if "==" in line and line[:1].isalnum()]


def unmet(names: list[str], extras: tuple[str, ...] = ("sql", "connect")) -> list[str]:
    """The requirements of ``names`` (with the extras syphon uses) that the importable
    packages do not meet, each said as ``wanted: found``."""
    from packaging.requirements import Requirement  # .venv's, through the link

    out = []
    for name in names:
        for text in distribution(name).requires or []:
            req = Requirement(text)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                continue
            try:
                found = version(req.name)
            except PackageNotFoundError:
                out.append(f"{req}: not installed")
                continue
            if not req.specifier.contains(found, prereleases=True):
                out.append(f"{req}: {found}")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["link"]:
        site = Path(sysconfig.get_paths()["purelib"])
        (site / PTH).write_text(pth_line(Path(argv[1]).resolve()), encoding="utf-8")
        return 0
    if argv[:1] == ["check"]:
        text = LEG_LOCK.read_text(encoding="utf-8")
        names = pinned(text)
        wrong = [f"{n} {version(n)} imported" for n in names if f"{n}=={version(n)}" not in text]
        problems = wrong + unmet(names)
        for line in problems:
            print(f"the leg's environment: {line}", file=sys.stderr)
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
