"""CPU and memory of a command and of every process it starts (the JVM, Python workers).

A benchmark that measures ``syphon run`` the way a schedule runs it starts it as a
process; its CPU is then spread over a tree: the Python driver, the JVM that
``pyspark`` starts, and the Python workers the JVM forks. :func:`run_measured` counts
all of it:

- CPU: the benchmark's process becomes a *child subreaper* (Linux ``prctl``), so that a
  descendant whose parent exits without waiting for it (the JVM, when the driver ends)
  is handed to it and reaped by it; every process of the tree is then reaped by its
  parent or by the benchmark, and the kernel adds each one's CPU to its reaper's
  children's usage. The difference of ``getrusage(RUSAGE_CHILDREN)`` before and after
  is the tree's CPU, exactly.
- Memory: the tree's proportional set size (PSS: a page shared by several processes
  counts a share in each, so the sum is what the tree holds), sampled every
  :data:`SAMPLE_SECONDS`; the peak of the sums.
- Which kind of process spent what: the samples' CPU per process, grouped into the
  driver (the command itself), the JVM and the Python workers (a lower bound: a process
  that lives less than a sample is missed).

Linux only (``/proc``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE_SECONDS = 0.1
_PR_SET_CHILD_SUBREAPER = 36
_TICK = os.sysconf("SC_CLK_TCK")


def become_subreaper() -> None:
    """Makes this process the reaper of its orphaned descendants (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


@dataclass
class TreeUsage:
    """What a command's process tree used.

    Attributes:
        wall: seconds from start to the last process's end.
        cpu: CPU seconds (user and system) of every process of the tree.
        peak_pss: the largest sum of the tree's PSS seen (bytes).
        by_kind: sampled CPU seconds per kind of process (``driver``, ``jvm``,
            ``workers``, ``other``).
        peak_by_kind: per kind, the largest sum of its processes' PSS seen (bytes).
        returncode: the command's exit code.
        stdout, stderr: its output.
    """

    wall: float
    cpu: float
    peak_pss: int
    by_kind: dict[str, float] = field(default_factory=dict)
    returncode: int = 0
    stdout: str = ""
    stderr: str = ""
    peak_by_kind: dict[str, int] = field(default_factory=dict)


def _stat(pid: int) -> tuple[int, float, str] | None:
    """(parent pid, CPU seconds, command name) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK, name


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _descendants(root: int) -> dict[int, tuple[float, str, int]]:
    """Every live process below ``root`` (and root): pid -> (CPU s, name, parent)."""
    table: dict[int, tuple[int, float, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                table[int(entry)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, tuple[float, str, int]] = {}
    todo = [root] if root in table else []
    while todo:
        pid = todo.pop()
        ppid, cpu, name = table[pid]
        out[pid] = (cpu, name, ppid)
        todo.extend(children.get(pid, []))
    return out


def _kind(pid: int, name: str, root: int) -> str:
    if pid == root:
        return "driver"
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "workers"
    return "other"


def run_measured(
    argv: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 3600
) -> TreeUsage:
    """Runs ``argv`` and measures its whole process tree (see the module docstring).
    The caller must have called :func:`become_subreaper` once, and must not reap its
    other children meanwhile."""
    seen: dict[int, tuple[float, str, int]] = {}
    peak = 0
    peak_kinds: dict[str, int] = {}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    clock = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out: dict[str, str] = {}

    def read(name: str, stream: object) -> None:
        out[name] = stream.read()  # type: ignore[attr-defined]

    readers = [
        threading.Thread(target=read, args=(n, s), daemon=True)
        for n, s in (("stdout", proc.stdout), ("stderr", proc.stderr))
    ]
    for reader in readers:
        reader.start()
    while True:
        tree = _descendants(proc.pid)
        seen.update(tree)
        sizes = {pid: _pss(pid) for pid in tree}
        peak = max(peak, sum(sizes.values()))
        kinds: dict[str, int] = {}
        for pid, size in sizes.items():
            kind = _kind(pid, tree[pid][1], proc.pid)
            kinds[kind] = kinds.get(kind, 0) + size
        for kind, size in kinds.items():
            peak_kinds[kind] = max(peak_kinds.get(kind, 0), size)
        if proc.poll() is not None:
            break
        if time.monotonic() - clock > timeout:
            proc.kill()
        time.sleep(SAMPLE_SECONDS)
    # the rest of the tree: orphans handed to this process, reaped as they end
    left = {pid for pid in seen if pid != proc.pid}
    while left:
        for pid in sorted(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by its own parent, or not ours
                done = pid if not Path(f"/proc/{pid}").exists() else 0
            if done:
                left.discard(pid)
        if left:
            seen.update({p: v for p, v in _descendants(os.getpid()).items() if p in left})
            if time.monotonic() - clock > timeout:
                break
            time.sleep(SAMPLE_SECONDS)
    wall = time.monotonic() - clock
    for reader in readers:
        reader.join(timeout=10)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    by_kind: dict[str, float] = {}
    for pid, (spent, name, _) in seen.items():
        kind = _kind(pid, name, proc.pid)
        by_kind[kind] = by_kind.get(kind, 0.0) + spent
    return TreeUsage(
        wall,
        cpu,
        peak,
        by_kind,
        proc.returncode or 0,
        out.get("stdout", ""),
        out.get("stderr", ""),
        peak_kinds,
    )
