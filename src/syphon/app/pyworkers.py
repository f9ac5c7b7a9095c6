"""A local session's Python workers, started while the run does its first driver-side work.

Spark starts a session's Python daemon (:mod:`syphon.app.worker_daemon`, which imports
pandas, pyarrow and the SDK once: about 0.7 CPU-s) when the first Python task runs. In a
run that is its read's handoff to Spark, and the run waits for it. Started by a job of
one tiny task in a thread of its own as soon as the session is up, the daemon imports on
one core while the driver lists the primaries and receives the first wave on the other,
and the handoff's tasks find it ready (``tests/benchmarks/README.md``, "The fixed cost",
has the figures).

Only for ``local`` masters that syphon built: their tasks are this machine's processes,
so one task warms the daemon every task uses. A cluster's executors each start their
own, and a platform's session (Databricks, Spark Connect) keeps its workers between
runs. Spark keys a daemon by its environment, which is the same for every Python task
of a session (:data:`syphon.app.spark.COMMON_CONF`): the run's tasks use this one
(``tests/job/test_python_workers.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The job group of the warm-up's job, and its description (Spark's job list, the event log).
GROUP = "syphon-python-workers"
DESCRIPTION = "syphon session: starting the Python workers"


def start_python_workers(spark: SparkSession) -> threading.Thread:
    """Runs one Python task of ``spark`` in a daemon thread, so that its Python daemon
    starts now; returns the thread. A failure is logged, never raised: the run's own
    first Python task starts the daemon then."""
    thread = threading.Thread(
        target=_warm, args=(spark,), name="syphon-python-workers", daemon=True
    )
    thread.start()
    return thread


def _warm(spark: SparkSession) -> None:
    # a job of the session's context, not a query: a cold JVM plans a query (a
    # DataFrame's analysis, optimisation and code) for about a second before its task
    # starts, which the daemon's start, and the run's first Python task, waited for
    try:
        context = spark.sparkContext
        context.setJobGroup(GROUP, DESCRIPTION)
        context.parallelize([0], 1).mapPartitions(_same).collect()
    except Exception as exc:  # the session stopped under it, or a task failed
        log.debug("the Python workers did not start ahead of the run: %s", exc)


def _same(items: Iterable[int]) -> Iterator[int]:
    """What the warm-up's task runs: its items as they come."""
    yield from items
