"""A run's Spark session, started on demand (in the background while the run does what
needs no Spark), and what it gives back between a run's waves: the JVM's and Python's
collections, and the C allocator's freed pages. The job reaches it through
:class:`syphon.job.context.SparkHandle`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from syphon.core.sessions import SessionFit, is_connect
from syphon.obs import progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


#: The waves (their messages' bytes, as :meth:`SparkOnDemand.fit` was told) from which a
#: run gives memory back between them. A full collection costs the JVM and Python a
#: fraction of a second of CPU (0.2 s in a test worker's JVM); after a wave of a few
#: megabytes it gives back nothing the next wave would not reuse.
RELEASE_FROM_BYTES = 16 * 2**20


class SparkOnDemand:
    """Starts the Spark session the first time it is called, then returns it; or in the
    background from :meth:`start_soon`, the first call then waiting for it. A run that
    needs no Spark (an empty one) never calls it. Every session it starts is watched by
    the progress reporter (:func:`syphon.obs.progress.watch`).

    Args:
        factory: makes the session, given the run's :class:`SessionFit` (what
            :meth:`fit` was told, or nothing).
    """

    def __init__(self, factory: Callable[[SessionFit], SparkSession]) -> None:
        self._factory = factory
        self._start: Future[SparkSession] | None = None
        self._claim = threading.Lock()
        self._fit = SessionFit()
        self._wave_bytes: int | None = None

    def fit(self, fit: SessionFit) -> None:
        """Tells the factory what the run expects (the discovery's counts, its waves),
        for when the session starts; a session already started (or starting) keeps what
        it was started with (its JVM's settings are fixed at its start)."""
        self._wave_bytes = fit.wave_bytes
        if self._start is not None:
            log.debug("the session started before the run knew its size: not fitted")
            return
        self._fit = fit

    def start_soon(self) -> None:
        """Starts the session in a thread of its own (nothing when it is started or
        starting): the caller goes on with what needs no Spark meanwhile (a cold start
        is seconds of the JVM's), and the first call waits for it; an error of the start
        is raised by every call."""
        start = self._claimed()
        if start is not None:
            # PySpark's packages import each other: imported by two threads at once, one
            # may get a module the other has half made (``cannot import name ... from
            # partially initialized module 'pyspark.sql'``), so the run's thread imports
            # them before the start's thread does
            import pyspark.sql.functions  # noqa: F401

            threading.Thread(
                target=self._build, args=(start,), name="syphon-spark-start", daemon=True
            ).start()

    def __call__(self) -> SparkSession:
        start = self._claimed()
        if start is not None:
            self._build(start)
        assert self._start is not None
        return self._start.result()

    @property
    def started(self) -> SparkSession | None:
        """The session if it was started (waiting for a start under way), else None."""
        if self._start is None:
            return None
        with contextlib.suppress(Exception):  # it did not start: the caller's call said so
            return self._start.result()
        return None

    def _claimed(self) -> Future[SparkSession] | None:
        """The start to make, when none was made yet; None: one was."""
        with self._claim:
            if self._start is not None:
                return None
            self._start = Future()
            return self._start

    def _build(self, start: Future[SparkSession]) -> None:
        try:
            session = self._factory(self._fit)
            progress.watch(session)
        except BaseException as exc:  # the caller's call raises it
            start.set_exception(exc)
            return
        start.set_result(session)

    def release(self) -> None:
        """Lets the session's process give back what earlier waves kept
        (:func:`release_memory`); nothing when it never started, or
        when the run's waves are smaller than :data:`RELEASE_FROM_BYTES`."""
        small = self._wave_bytes is not None and self._wave_bytes < RELEASE_FROM_BYTES
        session = self.started
        if session is not None and not small:
            release_memory(session)

    def give_back(self) -> None:
        """Has the C allocator hand what a read freed back to the system
        (:func:`return_freed_memory`)."""
        return_freed_memory()


def release_memory(spark: Any) -> None:
    """Lets a session's process give back what a run no longer references (between a
    run's waves): Spark drops an RDD's blocks when the JVM collects its handle, and a
    run in waves keeps its heap close to what it holds (``syphon.app.spark``'s
    ``WAVE_JAVA_OPTIONS``), so left to itself the JVM collects only when the heap fills.
    A full collection (a fraction of a second) after Python's own lets it give the last
    wave's memory back. A Spark Connect server releases what a client's plans no longer
    name by itself: only Python's collection runs."""
    import gc

    gc.collect()  # the Python proxies, whose release lets the JVM collect the frames
    if spark is None or is_connect(spark):
        return
    jvm = spark.sparkContext._jvm
    if jvm is not None:
        jvm.System.gc()


def return_freed_memory() -> None:
    """Has the C allocator hand freed pages back to the system: a read's threads allocate
    in arenas of their own, which keep what was freed (a wave's bytes) for the next wave
    otherwise. Nothing where the C library is not glibc (the process's own symbols: no
    library is looked up)."""
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
