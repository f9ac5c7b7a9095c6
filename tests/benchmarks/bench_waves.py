"""A large backlog drained in waves against the same backlog in one wave, cold, as
processes (issue 38's targets).

    .venv/bin/python tests/benchmarks/bench_waves.py [--messages 200000] [--small 20000]
        [--wave-messages 40000[,20000...]] [--poll 1.0] [--runs small,waves,one wave]
        [--against DIR] [--read peek|once] [--against-read peek|once]

The backlog is bench_run.py's (1 KB bodies over 10 backlog queues, 50 destinations, keys
and sessions spread over the queues), parked afresh for each run, each run with an
audit of its own. Three ``syphon run`` processes, one after another, each measured with
its whole process tree (proctree.py):

1. ``--small`` messages with the default config (one wave at that size): the memory
   the targets compare with;
2. ``--messages`` messages in waves of ``run.wave_messages`` (``--wave-messages``; a
   run for each size when it lists several, to size waves within one invocation);
3. the same backlog in one wave (``run.wave_messages: 0``).

While a run goes, the primary's depth (every destination queue's message count, one
management listing) is read every ``--poll`` seconds: the time from the process's start
to the first message on a primary (at most a poll and a listing late), and messages home
over time (printed every tenth of the run). After each run the destinations are drained
and order violations counted per key; the earliest enqueue time among the messages
drained, less the process's launch (both by this machine's clock: the local Service Bus
stamps a message as it enqueues it), is the first message home to the millisecond.
Printed: wall, CPU, peak memory (PSS of the tree), first message home (polled, and
enqueued), the curve,
waves and violations, and per message sent what the ledger counts: messages peeked,
settle receives and abandons, estimated credits (``--against DIR``: each run again with
that tree's syphon, its ``src/`` first on the path, right after); then the targets:
first message home within 15 s, peak memory with waves at most 1.2x the small run's,
total wall with waves at most 1.1x one wave. ``--read once`` runs every run with
``run.read: once`` (the source received once under lock, beside the driver);
``--against-read`` sets the ``--against`` runs' (``--against`` this tree's own folder:
both reads of one tree side by side). ``--logs DIR`` keeps each run's log (its stderr,
secrets masked as always) in ``DIR``, named by the run and the tree.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from azure.servicebus.management import ServiceBusAdministrationClient

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_run.py, proctree.py

import bench_run
from bench_run import (
    SPARK_CONF,
    SYPHON,
    SYPHON_PREFIX,
    drain_checked,
    first_run,
    ledger,
    park,
    serving,
    write_config,
)
from proctree import TreeUsage, become_subreaper, run_measured


@dataclass
class WaveRun:
    """One measured ``syphon run``."""

    name: str
    messages: int
    usage: TreeUsage
    home: list[tuple[float, int]] = field(default_factory=list)
    received: int = 0
    violations: int = 0
    waves: int = 0
    status: str = ""
    #: seconds from the launch to the earliest enqueue time at the primary (None: none)
    enqueued: float | None = None

    @property
    def first_home(self) -> float | None:
        """When the depth poll first saw a message on a primary (at most a poll late)."""
        return next((t for t, n in self.home if n > 0), None)

    def first(self) -> str:
        """The first message home, as the poll saw it and as the primary enqueued it."""
        if self.first_home is None and self.enqueued is None:
            return "never"
        polled = "never" if self.first_home is None else f"{self.first_home:.1f} s"
        exact = "?" if self.enqueued is None else f"{self.enqueued:.1f} s"
        return f"{polled} (enqueued at {exact})"


def depth(admin: ServiceBusAdministrationClient) -> int:
    """Messages on the primary's destinations now (one listing)."""
    return sum(
        q.total_message_count or 0
        for q in admin.list_queues_runtime_properties()
        if q.name.startswith("dest-")
    )


#: Where each run's log is kept (``--logs``; empty: not kept).
LOGS: list[Path] = []


def run_one(
    name: str,
    direct: dict[str, Any],
    root: Path,
    total: int,
    wave_messages: int,
    poll: float,
    against: Path | None = None,
    read: str = "peek",
) -> WaveRun:
    """Parks ``total`` messages, then one cold ``syphon run`` with ``run.wave_messages``
    set (of the tree ``against``, when given), the primary's depth polled meanwhile."""
    park(direct["secondary"]["conn"], total)
    run_id = f"bench-waves-{total}-{uuid.uuid4().hex[:6]}"
    (root / run_id).mkdir()
    conf = write_config(root / run_id, direct)
    with conf.open("a", encoding="utf-8") as f:
        f.write(f"run:\n  wave_messages: {wave_messages}\n  read: {read}\n")
    admin = ServiceBusAdministrationClient.from_connection_string(
        direct["primary"]["admin_conn"], connection_verify=direct["primary"]["ca"]
    )
    home: list[tuple[float, int]] = []
    stop = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):  # best effort: a gap in the curve
                home.append((time.monotonic() - started, depth(admin)))
            stop.wait(poll)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        env = None if against is None else {**os.environ, "PYTHONPATH": str(against / "src")}
        launched = time.time()
        usage = run_measured(
            [*SYPHON_PREFIX, str(SYPHON), "run", "--config", str(conf), "--run-id", run_id], env
        )
    finally:
        stop.set()
        watcher.join()
    for folder in LOGS:
        tree = "this" if against is None else against.name
        (folder / f"{name.replace(' ', '-')}-{total}-{tree}.log").write_text(usage.stderr)
    if usage.returncode not in (0, 5):
        raise RuntimeError(f"syphon run exited {usage.returncode}: {usage.stderr[-3000:]}")
    received, bad, first = drain_checked(direct["primary"]["conn"])
    records = [r for r in ledger(conf) if r.run_id == run_id]
    waves = len([r for r in records if r.status == "planned"])
    final = [r for r in records if r.finished_at is not None][-1]
    spent = ", ".join(f"{k} {v:.1f}" for k, v in sorted(final.timings.as_map().items()))
    print(f"  {name}: the ledger's seconds by stage (all waves): {spent}", flush=True)
    o = final.operations
    per = max(o.replay_messages_sent or 0, 1)
    print(
        f"  {name}: per message sent: peeked {(o.snapshot_messages_peeked or 0) / per:.3f}, "
        f"received by the read {(o.snapshot_messages_received or 0) / per:.3f}, "
        f"settle receives {(o.settle_receives or 0) / per:.3f}, abandons "
        f"{(o.settle_abandons or 0) / per:.3f}, credits {o.credits_estimated / per:.3f} "
        f"({o.credits_estimated:,} for {o.replay_messages_sent or 0:,} sent)",
        flush=True,
    )
    if final.status != "done":
        print(f"  {name}: {final.status}: {final.detail}")
        print(f"  {name}: settle rows left, by queue and detail: {left_rows(conf, run_id)}")
    planned = [r for r in records if r.status == "planned"]
    if len(planned) > 1:
        each = ", ".join(
            f"{r.timings.reconcile or 0:.1f}/{r.timings.audit or 0:.1f}" for r in planned
        )
        print(f"  {name}: reconcile/audit seconds by wave: {each}", flush=True)
    enqueued = None if first is None else first - launched
    return WaveRun(name, total, usage, home, received, bad, waves, final.status, enqueued)


def left_rows(conf: Path, run_id: str) -> dict[tuple[str, str], int]:
    """A run's settle rows ``left``, counted by backlog queue and detail (what a wave's
    settle gave back without it being the wave's has no row)."""
    from syphon.core.configfile import load_config
    from syphon.store.delta import read_table

    rows = read_table(Path(load_config(conf).audit.path) / "audit").to_pylist()
    out: dict[tuple[str, str], int] = {}
    for r in rows:
        if r["run_id"] == run_id and r["stage"] == "settle" and r["outcome"] == "left":
            key = (r["backlog_queue"].rsplit("/", 1)[-1], str(r["detail"]))
            out[key] = out.get(key, 0) + 1
    return out


def curve(run: WaveRun) -> str:
    """Messages home at each tenth of the run's wall time."""
    points = []
    for tenth in range(1, 11):
        at = run.usage.wall * tenth / 10
        seen = [n for t, n in run.home if t <= at]
        points.append(f"{at:.0f}s:{seen[-1] if seen else 0}")
    return " ".join(points)


def by_kind(run: WaveRun) -> str:
    """The run's peak by kind of process, in GB."""
    return ", ".join(f"{k} {v / 1e9:.2f}" for k, v in sorted(run.usage.peak_by_kind.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument(
        "--wave-messages",
        default="40000",
        help="the waves' size; several, comma-separated: a run each",
    )
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="DIR",
        help="also run each of the runs with another tree's syphon (its src/), after this one",
    )
    parser.add_argument(
        "--read",
        choices=("peek", "once"),
        default="peek",
        help="run.read of every run (default peek)",
    )
    parser.add_argument(
        "--against-read",
        choices=("peek", "once"),
        default=None,
        help="run.read of the --against runs (default: --read); with --against set to this "
        "tree, both reads side by side",
    )
    parser.add_argument(
        "--runs", default="small,waves,one wave", help="which of the three runs (comma-separated)"
    )
    parser.add_argument(
        "--body-bytes",
        type=int,
        default=bench_run.BODY_BYTES,
        help="each parked message's body (default 1 KB)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra spark.conf setting of syphon's config",
    )
    parser.add_argument("--logs", type=Path, help="keep each run's log in this folder")
    args = parser.parse_args()
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        LOGS.append(args.logs)
    SPARK_CONF.update(dict(kv.split("=", 1) for kv in args.spark_conf))
    bench_run.BODY_BYTES = args.body_bytes
    wanted = {n.strip() for n in args.runs.split(",")}
    become_subreaper()
    with serving([]) as info:
        direct = info["at"][0.0]
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            first_run(direct, info["pid"], root)
            sizes = [int(n) for n in args.wave_messages.split(",")]
            plan = [("small", args.small, sizes[0])]
            plan += [
                (f"waves of {n:,}" if len(sizes) > 1 else "waves", args.messages, n) for n in sizes
            ]
            plan.append(("one wave", args.messages, 0))
            runs = []
            for name, total, size in plan:
                if name.split(" of ")[0] not in wanted:
                    continue
                run = run_one(name, direct, root, total, size, args.poll, read=args.read)
                runs.append(run)
                if args.against is not None:
                    other = run_one(
                        f"{name}@against",
                        direct,
                        root,
                        total,
                        size,
                        args.poll,
                        args.against,
                        args.against_read or args.read,
                    )
                    print(
                        f"{other.name}: wall {other.usage.wall:.1f} s, CPU "
                        f"{other.usage.cpu:.1f} s, peak {other.usage.peak_pss / 1e9:.2f} GB, "
                        f"first message home {other.first()}, "
                        f"{other.waves} waves, {other.status}, delivered {other.received:,}, "
                        f"order violations {other.violations}",
                        flush=True,
                    )
                    print(f"  peak by kind of process (GB): {by_kind(other)}", flush=True)
                u = run.usage
                print(
                    f"{name}: {total:,} messages, wall {u.wall:.1f} s, CPU {u.cpu:.1f} s, "
                    f"peak {u.peak_pss / 1e9:.2f} GB, first message home {run.first()}, "
                    f"{run.waves} waves, {run.status}, delivered {run.received:,}, "
                    f"order violations {run.violations}",
                    flush=True,
                )
                print(f"  home over time: {curve(run)}", flush=True)
                print(f"  peak by kind of process (GB): {by_kind(run)}", flush=True)
            if len(runs) < len(plan):
                partial_targets(runs, args.messages, args.small)
                return
            small, *in_waves, one = runs
            print(f"every run read its source with run.read: {args.read}")
            for waves in in_waves:
                targets(waves, small, one, args.messages, args.small)


def partial_targets(runs: list[WaveRun], messages: int, few: int) -> None:
    """The memory target, when the small run and a run in waves ran without the run in
    one wave (``--runs small,waves``)."""
    small = next((r for r in runs if r.name == "small"), None)
    for waves in (r for r in runs if r.name.startswith("waves")):
        print(f"target of {waves.name}: first message home {waves.first()} (target <= 15 s)")
        if small is not None:
            ratio = waves.usage.peak_pss / small.usage.peak_pss
            print(
                f"target of {waves.name}: peak memory, {messages:,} in waves against "
                f"{few:,}: {ratio:.2f}x (target <= 1.2x; printed, not asserted)"
            )


def targets(waves: WaveRun, small: WaveRun, one: WaveRun, messages: int, few: int) -> None:
    """The issue's three targets for one run in waves, against the small run and the one
    in one wave of the same invocation."""
    print(f"targets of {waves.name} (printed, not asserted):")
    print(f"  first message home with waves: {waves.first()} (target <= 15 s)")
    ratio = waves.usage.peak_pss / small.usage.peak_pss
    print(f"  peak memory, {messages:,} in waves against {few:,}: {ratio:.2f}x (target <= 1.2x)")
    print(
        f"  total wall, waves against one wave: {waves.usage.wall / one.usage.wall:.2f}x "
        f"(target <= 1.1x); CPU {waves.usage.cpu / one.usage.cpu:.2f}x"
    )


if __name__ == "__main__":
    main()
