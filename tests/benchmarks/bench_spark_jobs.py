"""What Spark itself costs a run shaped like syphon's, before any work of syphon's own.

Each row is a cold process measured with its whole process tree (``proctree.py``), in
one invocation, each started with syphon's own session (``build_spark_session``, fitted
to ``--messages`` as a run of that size is, with the class archive a scheduled run
finds):

- the floor: the session and one trivial action (what ``bench_run.py`` calls the
  floor);
- the skeleton: the floor, then one ``mapInArrow`` job that starts the Python workers
  and passes ``--messages`` rows of ~1 KB through them (the snapshot's shape, checkpointed),
  then ``--jobs`` small jobs with a shuffle each over those rows (a small run has about
  21, its report included).

The skeleton against the floor is the part of syphon's fixed cost that is Spark's
machinery (the Python workers' start, each job's first time in a fresh JVM) rather
than syphon's work (the Service Bus, the audit's commits, the report).

Usage: bench_spark_jobs.py [--messages 5000] [--jobs 25] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from proctree import TreeUsage, become_subreaper, run_measured

CHILD = """
import sys, time
from syphon.app.spark import build_spark_session
from syphon.core.sessions import SessionFit
from syphon.core.config import SparkConfig
messages, jobs = int(sys.argv[1]), int(sys.argv[2])
spark = build_spark_session(SparkConfig(master="local[2]"), fit=SessionFit(messages))
assert spark.range(1).count() == 1
if jobs >= 0:
    from pyspark.sql import functions as F

    def through(batches):
        yield from batches

    rows = (spark.range(messages, numPartitions=2)
            .withColumn("key", F.col("id") % 50)
            .withColumn("body", F.expr("repeat('x', 1024)")))
    rows = rows.mapInArrow(through, rows.schema).localCheckpoint(eager=True)
    for i in range(jobs):
        rows.groupBy((F.col("key") + i).alias("g")).agg(F.count("*"), F.max("body")).collect()
"""


def measure(messages: int, jobs: int) -> TreeUsage:
    """One cold process: the floor (``jobs`` -1) or the skeleton with ``jobs`` jobs."""
    usage = run_measured([sys.executable, "-c", CHILD, str(messages), str(jobs)])
    if usage.returncode:
        raise RuntimeError(f"the child failed: {usage.stderr[-2000:]}")
    return usage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--jobs", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    become_subreaper()
    measure(args.messages, -1)  # the environment's class archive, if it has none yet
    rows: dict[str, list[TreeUsage]] = {"floor": [], "skeleton": []}
    for _ in range(args.repeat):  # in turn, so that both see the same machine
        rows["floor"].append(measure(args.messages, -1))
        rows["skeleton"].append(measure(args.messages, args.jobs))
    print(
        f"cold processes, median of {args.repeat}; {args.messages:,} rows of ~1 KB, "
        f"{args.jobs} shuffle jobs after the Python workers' job"
    )
    print(f"{'':10} {'wall s':>7} {'CPU s':>7} {'peak GB':>8}")
    medians = {}
    for name, runs in rows.items():
        wall = statistics.median(r.wall for r in runs)
        cpu = statistics.median(r.cpu for r in runs)
        peak = statistics.median(r.peak_pss for r in runs) / 1e9
        medians[name] = (wall, cpu)
        print(f"{name:10} {wall:7.1f} {cpu:7.1f} {peak:8.2f}")
    (fw, fc), (sw, sc) = medians["floor"], medians["skeleton"]
    print(f"skeleton against the floor: wall {sw / fw:.2f}x, CPU {sc / fc:.2f}x")


if __name__ == "__main__":
    main()
