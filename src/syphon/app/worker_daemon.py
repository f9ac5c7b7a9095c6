"""PySpark's Python daemon for local sessions, importing the installed PySpark.

Spark starts the daemon that forks its Python workers with ``PYTHONPATH`` led by the
PySpark sources zipped inside the installation (``<SPARK_HOME>/python/lib/pyspark.zip``
and py4j's zip). Python caches no bytecode for modules imported from a zip, so the daemon,
and every worker it forks, compiled PySpark's modules from source: about 0.4 CPU-s each
(``import pyspark.daemon`` took 0.5 CPU-s from the zip, 0.1 from the installed package).

When those zips are the ones inside the pip-installed PySpark this interpreter imports
anyway (a local session's ``SPARK_HOME``), both hold the same files: the daemon moves the
zips behind the installed packages, then runs PySpark's own daemon unchanged. Anything
else (a cluster's Spark, zips of another installation) keeps the path as Spark set it.

Local sessions name this module in ``spark.python.daemon.module``
(:data:`syphon.app.spark.LOCAL_CONF`); Spark runs it as ``python -m`` with the worker
module as its argument, as it runs ``pyspark.daemon``.
"""

from __future__ import annotations

import os
import runpy
import sys
from importlib.machinery import PathFinder
from pathlib import Path

#: What Spark puts at the head of a Python worker's path, under ``<SPARK_HOME>/python/lib``.
_ZIP_PREFIXES = ("pyspark.zip", "py4j-")


def installed_first(path: list[str]) -> list[str]:
    """``path`` with the zips of the installed PySpark moved to its end; unchanged when
    its zips belong to another installation, or when PySpark is not installed."""
    zips = [entry for entry in path if _is_spark_zip(entry)]
    if not zips:
        return path
    rest = [entry for entry in path if entry not in zips]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or spec.origin is None:
        return path
    home = Path(spec.origin).parent
    if any(Path(entry).parent != home / "python" / "lib" for entry in zips):
        return path
    return rest + zips


def _is_spark_zip(entry: str) -> bool:
    name = Path(entry).name
    return entry.endswith(".zip") and name.startswith(_ZIP_PREFIXES)


#: What syphon's Python tasks import (its Arrow and pandas stages, the SDK, PySpark's
#: worker and the syphon modules whose functions the tasks run), imported once by the
#: daemon before it forks: a forked worker starts with them (about 0.4 CPU-s a worker
#: otherwise), which counts for each task where a task gets a worker of its own
#: (syphon.app.spark.WAVE_WORKER_CONF). None starts a Python thread; two native libraries
#: would, on import, but for :data:`ONE_THREAD` (tests/unit/test_worker_daemon.py).
PRELOADED = (
    "pandas",
    "pyarrow",
    "azure.servicebus",
    "pyspark.worker",
    "syphon.app.pyworkers",
    "syphon.job.plan.batches",
    "syphon.job.read.handoff",
    "syphon.job.repair",
    "syphon.job.replay.send",
    "syphon.job.settle.passes",
    "syphon.job.read.snapshot",
    "syphon.job.where",
    "syphon.store.delta",
)


#: The environment that keeps the daemon at one thread until it forks (each set only
#: where the environment does not say otherwise): a process that forks while another
#: thread runs may leave the child a lock that thread had taken (Python 3.12 warns of it).
#: numpy's OpenBLAS starts a pool of threads as it loads, and Arrow's bundled jemalloc a
#: background thread; syphon's tasks use neither (no linear algebra; Arrow's default
#: pool here is mimalloc, which starts none), and the forked workers inherit the same.
ONE_THREAD = {
    "OPENBLAS_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}


def prepare() -> None:
    """The daemon's state before PySpark's daemon runs and forks its workers: the path
    (:func:`installed_first`), :data:`ONE_THREAD`, and :data:`PRELOADED` imported."""
    sys.path[:] = installed_first(sys.path)
    for name, value in ONE_THREAD.items():
        os.environ.setdefault(name, value)
    for name in PRELOADED:
        try:
            __import__(name)
        except ImportError:  # the task that needs it says so, as without the daemon
            continue


def main() -> None:
    prepare()
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
