"""The tests' JVMs: quick to start, slow to run (fine for small data).

- C1 only and the serial GC: about 3 s less per start.
- No code generation, no adaptive execution: tiny data (:data:`SMALL_DATA_CONF`).
- A class-data-sharing archive of the classes a Spark session loads, when one exists
  (``./dev.sh test`` makes it once per environment with ``python tests/support/jvm.py``): about
  6 s less per start. A missing or stale archive only costs the time back; the JVM
  says nothing.

A real run keeps the full JIT: the reconcile of a million messages took 123 s with the
C1-only flags and 61 s without (tests/benchmarks/bench_reconcile.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: Where ``./dev.sh test`` keeps the archive (inside the environment it belongs to).
ARCHIVE = Path(os.environ.get("SYPHON_TEST_CDS") or Path(sys.prefix) / "spark-classes.jsa")

#: C1 only and the serial GC: for every JVM a test starts, executors of a cluster too.
QUICK = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_options() -> str:
    """The tests' ``spark.driver.extraJavaOptions``."""
    if ARCHIVE.is_file():
        return f"{QUICK} -Xshare:auto -XX:SharedArchiveFile={ARCHIVE} {_QUIET}"
    return QUICK


#: Spark settings for tiny data: no code generation (Janino compiling each query costs
#: more than interpreting a few rows), no adaptive re-planning. About 20% less JVM CPU.
#: (Without code generation the catalog's ``listTables`` cannot decode its rows: tests
#: use ``SHOW TABLES``.) No broadcast joins: a broadcast is a Spark job of its own, and
#: in a long-lived session shuffling a few rows costs less (eight warm runs of the outage
#: scenario each way in one session, medians: 9 jobs and 1.08 JVM CPU-s a run against 11
#: and 1.18). A small run's own cold session keeps them: there the two ways measured
#: within noise (tests/benchmarks/README.md, "The fixed cost").
SMALL_DATA_CONF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.autoBroadcastJoinThreshold": "-1",
}

#: ``SYPHON_TEST_EVENTS=DIR ./dev.sh test``: every local session of the tests (the
#: workers' and the ``syphon`` commands') writes Spark's event log into DIR, for
#: ``tests/benchmarks/spark_jobs_of.py --by-line DIR``: which lines of syphon cost the
#: suite its Spark jobs.
if os.environ.get("SYPHON_TEST_EVENTS"):
    SMALL_DATA_CONF.update(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": os.environ["SYPHON_TEST_EVENTS"],
            "spark.eventLog.compress": "false",
        }
    )

#: The heap of the test workers' own sessions, which live as long as the suite (a few
#: hundred runs each): a young generation of 320 MB, and the heap committed from the
#: start, instead of the serial collector's third of a heap that starts at a 64th of the
#: machine's memory. A session's JVM over twelve warm runs of the outage scenario, two
#: sessions each way, one after the other: 22.2 and 22.1 CPU-s against 23.4 and 23.8
#: without (fewer young collections, each copying about as much).
LONG_LIVED = "-Xms900m -Xmn320m"

#: The tests' Spark settings for local sessions.
TEST_SPARK_CONF = {"spark.driver.extraJavaOptions": java_options(), **SMALL_DATA_CONF}


def make_archive() -> None:
    """Runs a small Spark session that loads what the tests' sessions load (a shuffle,
    a pandas UDF, a Parquet write) and archives its classes at exit."""
    import tempfile

    from syphon.app.spark import build_spark_session
    from syphon.core.config import SparkConfig

    partial = ARCHIVE.with_suffix(".partial")
    options = f"{QUICK} -XX:ArchiveClassesAtExit={partial} {_QUIET}"
    spark = build_spark_session(
        SparkConfig(master="local[2]", conf={"spark.driver.extraJavaOptions": options})
    )
    df = spark.range(1000).selectExpr("id % 7 as k", "id as v")
    grouped = df.groupBy("k").count().mapInPandas(lambda frames: frames, "k long, count long")
    with tempfile.TemporaryDirectory() as folder:
        grouped.write.parquet(f"{folder}/out")
        spark.read.parquet(f"{folder}/out").collect()
    jvm = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    spark.stop()
    jvm.stdin.close()  # the JVM ends when its input does, and writes the archive then
    jvm.wait(timeout=120)
    partial.replace(ARCHIVE)


if __name__ == "__main__":  # python tests/support/jvm.py: (re)make the archive
    make_archive()
