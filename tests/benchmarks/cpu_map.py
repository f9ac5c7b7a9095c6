"""The suite's CPU map: what each test file costs in CPU-seconds, its processes included.

``SYPHON_TEST_CPU_MAP=FILE ./dev.sh test -p benchmarks.cpu_map`` (or ``.ci/run`` with the
variable set and the plugin named in ``PYTEST_ADDOPTS``): every test worker becomes the
child subreaper of what it starts (see :mod:`proctree`), and around each test it reads
the CPU of its own process, of its reaped descendants (``RUSAGE_CHILDREN``) and of the
descendants still alive (their ``/proc`` totals: the worker's Spark JVM, a Connect
server, a local Service Bus). Each worker appends one line per test to FILE:
``nodeid <tab> wall seconds <tab> CPU seconds <tab> of which the worker's own`` (its
Python: the test, the local Service Bus, the SDK) ``<tab> of which live JVMs'`` (the
worker's session, a Connect server; a ``syphon`` command's JVM that has exited by the
test's end is in the CPU total only). ``python tests/benchmarks/cpu_map.py
FILE`` sums them per file, costliest first.

A process that outlives its test (a session's JVM, a shared server) is charged, each
test, what it spent while that test ran: with several workers at once a shared
process's CPU goes to whichever test ran beside it, so the map is for finding where
the CPU goes, not for comparing two runs (``.ci/run``'s busy CPU-seconds do that).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

_TICK = os.sysconf("SC_CLK_TCK")
#: each process seen: its command name (/proc/PID/stat), to tell the JVMs apart
_NAMES: dict[int, str] = {}


def _descendants_cpu(root: int) -> dict[int, float]:
    """CPU seconds of each live descendant of ``root``, by pid."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICK
        _NAMES[pid] = text[text.index("(") + 1 : text.rindex(")")]
    found: dict[int, float] = {}
    for pid in cpu:
        up = parents.get(pid)
        while up is not None and up not in (root, 0, 1):
            up = parents.get(up)
        if up == root:
            found[pid] = cpu[pid]
    return found


def _own() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _own_and_reaped() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("SYPHON_TEST_CPU_MAP"):
        sys.path.insert(0, str(Path(__file__).parent))
        from proctree import become_subreaper

        become_subreaper()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    out = os.environ.get("SYPHON_TEST_CPU_MAP")
    if not out:
        yield
        return
    me = os.getpid()
    alive = _descendants_cpu(me)
    own0, start, began = _own(), _own_and_reaped(), time.monotonic()
    yield
    wall = time.monotonic() - began
    after = _descendants_cpu(me)
    own = _own() - own0
    spent = _own_and_reaped() - start
    # live ones: what they spent since (a new one: all of it); one gone since was reaped
    # (its whole CPU is in RUSAGE_CHILDREN: only what it had before is taken back)
    spent += sum(c - alive.get(pid, 0.0) for pid, c in after.items())
    spent -= sum(c for pid, c in alive.items() if pid not in after)
    java = sum(c - alive.get(pid, 0.0) for pid, c in after.items() if _NAMES.get(pid) == "java")
    with open(out, "a") as f:
        f.write(f"{item.nodeid}\t{wall:.2f}\t{spent:.2f}\t{own:.2f}\t{java:.2f}\n")


def main(path: str, top: int = 40) -> None:
    wall: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    own = java = 0.0
    tests: list[tuple[float, float, str]] = []
    for line in Path(path).read_text().splitlines():
        nodeid, w, c, *split = line.split("\t")
        name = nodeid.split("::", 1)[0]
        wall[name] += float(w)
        cpu[name] += float(c)
        if len(split) == 2:
            own, java = own + float(split[0]), java + float(split[1])
        tests.append((float(c), float(w), nodeid))
    print(f"total: {sum(cpu.values()):.0f} CPU-s, {sum(wall.values()):.0f} s of test time")
    print(f"  of which the workers' own Python {own:.0f} CPU-s, live JVMs {java:.0f} CPU-s")
    print("files, costliest first (CPU-s, wall s):")
    for name in sorted(cpu, key=cpu.__getitem__, reverse=True)[:top]:
        print(f"  {cpu[name]:7.1f} {wall[name]:7.1f}  {name}")
    print("tests, costliest first (CPU-s, wall s):")
    for c, w, nodeid in sorted(tests, reverse=True)[:top]:
        print(f"  {c:7.1f} {w:7.1f}  {nodeid}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
