"""Where a read-once run's receives should run: the alternatives to the driver's threads.

    .venv/bin/python tests/benchmarks/bench_receive.py [--messages 20000] [--repeat 2]
        [--threads 1,2,4] [--processes 2,5] [--chunks 5000,2500] [--delay 5]

A read-once run (``run.read: once``) receives its source in the driver: one
:class:`syphon.servicebus.locked.LockedQueue` per backlog queue, the queues side by side
in threads of one Python process (:class:`syphon.job.read.once.ReadOnce`), then hands the
bytes to Spark, whose tasks parse them. On loopback that read is slower than the peeks
Spark's tasks make side by side (README, "Reading once"). This script measures, on the
backlog of ``bench_run.py`` (10 queues, 1 KB bodies, both namespaces in a child process)
and each alternative on the same messages in one invocation:

1. **receive only**, the queues' receives as syphon makes them (each queue asked for
   exactly what it holds, as a run that counted its queues does): ``threads-10``, every
   queue in a thread of this process; ``threads-N``, the queues taken N at a time in
   this process (syphon reads 4 at a time: ``syphon.job.read.once._READ_THREADS``);
   ``processes-N``, the queues split over N processes started for it, each receiving its
   share a thread a queue (a receiving process beside the driver; their CPU includes
   their start). Printed: the wall time of the receives, the CPU seconds of the
   receiving processes and of the local Service Bus. ``--delay``: a one-way delay (ms)
   through a proxy in front of the secondary (parking goes direct);
2. **receive and hand over**, in-process and warm (a Spark session of 2 cores already
   started): ``one handoff``, syphon's (every message received, then one
   ``createDataFrame`` and the tasks' parse, kept); ``overlapped-K``, a handoff and its
   parse started in the background for every K messages received, so that Spark's tasks
   parse while the driver still receives, the parts' union at the end.

Every run gives back what it received (abandoned: the backlog queues have no delivery
limit), so each alternative reads the same messages.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

import bench_run  # noqa: E402

from syphon.servicebus.access import Access  # noqa: E402
from syphon.servicebus.locked import LockedQueue  # noqa: E402

PATHS = [f"{bench_run.PRIMARY}/x-servicebus-transfer/{q}" for q in range(bench_run.QUEUES)]


def access(ns: dict[str, Any]) -> Access:
    return Access("s", "secondary", "localhost", connection_string=ns["conn"], ca_bundle=ns["ca"])


def cpu_of(pid: int) -> float:
    """CPU seconds (user and system) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """CPU seconds of this process and of its children that ended."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def receive(
    ns: dict[str, Any], paths: list[str], each: int, out: Any, threads: int | None = None
) -> None:
    """Receives ``each`` messages from every queue of ``paths`` (the queues side by side
    in ``threads`` threads, None: one a queue), then gives them back; puts (seconds the
    receives took, bytes) on ``out``."""
    queues = [LockedQueue(access(ns), p).__enter__() for p in paths]

    def one(queue: LockedQueue) -> int:
        return sum(len(m) for _, m in queue.receive(each, 2.0))

    clock = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads or len(queues)) as pool:
        got = list(pool.map(one, queues))
    spent = time.perf_counter() - clock
    for q in queues:
        q.__exit__(None, None, None)  # gives back what it holds
    out.put((spent, sum(got)))


def receive_row(ns: dict[str, Any], server: int, each: int, processes: int) -> str:
    """One receive-only alternative: 0 processes is syphon's (a thread a queue, in this
    process), a negative number that many threads in this process."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    served, mine = cpu_of(server), own_cpu()
    if processes <= 0:
        receive(ns, PATHS, each, out, -processes or None)
        results = [out.get()]
        name = f"threads-{-processes or len(PATHS)}"
    else:
        groups = [PATHS[i::processes] for i in range(processes)]
        started = [ctx.Process(target=receive, args=(ns, g, each, out)) for g in groups]
        for p in started:
            p.start()
        results = [out.get() for _ in started]
        for p in started:
            p.join()
        name = f"processes-{processes}"
    spent = max(s for s, _ in results)
    return (
        f"  {name:14s} receives {spent:5.2f} s  {sum(b for _, b in results) / 1e6:5.1f} MB  "
        f"CPU: receivers {own_cpu() - mine:5.2f} s, local Service Bus "
        f"{cpu_of(server) - served:5.2f} s"
    )


def handoff_row(spark: Any, ns: dict[str, Any], each: int, chunk: int | None) -> str:
    """One receive-and-hand-over alternative (in-process, warm): ``chunk`` None is
    syphon's one handoff."""
    from syphon.job.context import keep
    from syphon.job.read.once import ReadOnce
    from syphon.job.read.snapshot import QueueRange

    counts = dict.fromkeys(PATHS, each)
    with ReadOnce(access(ns), PATHS, counts) as once:
        ranges = [QueueRange(p) for p in PATHS]
        clock = time.perf_counter()
        if chunk is None:
            rows = keep(once.frame(spark, ranges)).count()
            name = "one handoff"
        else:
            rows = overlapped(spark, once, ranges, chunk).count()
            name = f"overlapped-{chunk}"
        spent = time.perf_counter() - clock
    return f"  {name:16s} {rows} rows kept in {spent:5.2f} s (warm, in-process)"


def overlapped(spark: Any, once: Any, ranges: list[Any], chunk: int) -> Any:
    """The messages of ``ranges``, each ``chunk`` received handed to Spark and parsed
    (kept) in the background while the rest is received; their union."""
    import pyarrow as pa  # type: ignore[import-untyped]

    from syphon.core.render import arrow_schema, spark_schema
    from syphon.core.schema import SNAPSHOT
    from syphon.job.context import keep
    from syphon.job.read.handoff import _Parse

    received = pa.schema([("backlog_queue", pa.string()), ("encoded", pa.binary())])
    schema = spark_schema(SNAPSHOT)
    parse = _Parse(arrow_schema(SNAPSHOT))

    def hand(queues: list[str], encoded: list[bytes]) -> Any:
        table = pa.Table.from_batches([pa.record_batch([queues, encoded], schema=received)])
        return keep(spark.createDataFrame(table).mapInArrow(parse, schema))

    with ThreadPoolExecutor(max_workers=1) as pool:
        parts, queues, encoded = [], [], []
        for queue, page in once.pages(ranges):
            queues += [queue] * len(page)
            encoded += page
            if len(encoded) >= chunk:
                parts.append(pool.submit(hand, queues, encoded))
                queues, encoded = [], []
        if encoded:
            parts.append(pool.submit(hand, queues, encoded))
        frames = [p.result() for p in parts]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return union


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--processes", default="2,5")
    parser.add_argument("--threads", default="1,2,4", help="fewer threads than queues")
    parser.add_argument("--delay", type=float, default=0.0, help="one-way ms, a proxy")
    parser.add_argument("--chunks", default="5000,2500")
    args = parser.parse_args()
    each = args.messages // bench_run.QUEUES
    processes = [
        0,
        *(-int(t) for t in args.threads.split(",") if t),
        *(int(p) for p in args.processes.split(",") if p),
    ]
    chunks: list[int | None] = [None, *(int(c) for c in args.chunks.split(",") if c)]
    with bench_run.serving([args.delay]) as info:
        ns = info["at"][args.delay]["secondary"]
        bench_run.park(info["at"][0.0]["secondary"]["conn"], each * bench_run.QUEUES)
        print(f"{each * bench_run.QUEUES} messages of {bench_run.BODY_BYTES} B in 10 queues")
        print("receive only (the queues side by side):")
        for _ in range(args.repeat):
            for n in processes:
                print(receive_row(ns, info["pid"], each, n), flush=True)
        from syphon.app.spark import build_spark_session
        from syphon.core.config import SparkConfig

        spark = build_spark_session(SparkConfig(master="local[2]"))
        spark.range(1).count()
        print("receive and hand over to Spark (warm, in-process):")
        for _ in range(args.repeat):
            for chunk in chunks:
                print(handoff_row(spark, ns, each, chunk), flush=True)


if __name__ == "__main__":
    main()
