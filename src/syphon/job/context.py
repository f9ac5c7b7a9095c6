"""What every stage is handed: the config, the namespaces (secrets already read), the
audit store and the Spark session on demand — built once by the entry point
(:func:`syphon.app.services.build_context`), swapped for fakes in tests."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from syphon.core.config import MESSAGES_PER_TASK_DEFAULT, SyphonConfig
from syphon.core.sessions import (
    INTERPRETED_CONF,
    SessionFit,
    default_parallelism,
    is_connect,
    release_memory,
)
from syphon.obs import progress
from syphon.servicebus.access import Namespaces
from syphon.store.audit import AuditStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
        (:func:`syphon.core.sessions.release_memory`); nothing when it never started, or
        when the run's waves are smaller than :data:`RELEASE_FROM_BYTES`."""
        small = self._wave_bytes is not None and self._wave_bytes < RELEASE_FROM_BYTES
        session = self.started
        if session is not None and not small:
            release_memory(session)


@dataclass(frozen=True)
class RunContext:
    """The services of one command.

    Attributes:
        config: the checked configuration.
        namespaces: every namespace's access, its secret read once.
        store: the audit store the config chose.
        spark: the Spark session, started on first use.
    """

    config: SyphonConfig
    namespaces: Namespaces
    store: AuditStore
    spark: SparkOnDemand
    #: what the command decided once and remembers (:func:`syphon.job.where.in_driver`)
    decisions: dict[str, str] = field(default_factory=dict, compare=False, repr=False)


#: Messages per shuffle partition when syphon sizes a run's shuffles itself.
MESSAGES_PER_SHUFFLE_PARTITION = 5_000
_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
_SPARK_DEFAULT = "200"
#: Where a session keeps the number of shuffle partitions syphon gave it: the next run in
#: the same session (a notebook's, a cluster's next job) sizes its shuffles again instead
#: of taking syphon's earlier value for the operator's choice.
FITTED_SHUFFLE_PARTITIONS = "spark.syphon.shufflePartitions.fitted"


def fit_shuffle_partitions(
    spark: SparkSession, messages: int, spark_conf: Mapping[str, object]
) -> int | None:
    """Sizes a run's shuffles to its backlog: one partition per
    :data:`MESSAGES_PER_SHUFFLE_PARTITION` messages, at least one (Spark's fixed 200 runs
    200 tasks per stage for a backlog of six messages). A small backlog takes one
    partition whatever the cores: each task of a stage costs Spark its scheduling, the
    task's deserialization and, in a Python stage, a worker's round of it, far more than
    a few thousand messages cost to reconcile.

    Left alone when the operator chose a value: in ``spark_conf`` (the config's
    ``spark.conf``) or in the session (anything but Spark's default or the value syphon
    gave it, :data:`FITTED_SHUFFLE_PARTITIONS`). Returns the value set, or None."""
    if _SHUFFLE_PARTITIONS in spark_conf:
        return None
    current = spark.conf.get(_SHUFFLE_PARTITIONS, _SPARK_DEFAULT)
    if current not in (_SPARK_DEFAULT, spark.conf.get(FITTED_SHUFFLE_PARTITIONS, None)):
        return None
    partitions = max(1, -(-messages // MESSAGES_PER_SHUFFLE_PARTITION))
    spark.conf.set(_SHUFFLE_PARTITIONS, str(partitions))
    # a platform may refuse a key it does not know (Databricks serverless): the next run
    # in that session then takes this value for the operator's and keeps it
    with contextlib.suppress(Exception):
        spark.conf.set(FITTED_SHUFFLE_PARTITIONS, str(partitions))
    return partitions


#: Spark's own values of :data:`~syphon.core.sessions.INTERPRETED_CONF`'s settings.
COMPILED_CONF: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.codegen.factoryMode": "FALLBACK",
}

#: Where a session keeps the code generation syphon set last (``true``, ``false``), so
#: that the next wave knows the setting for its own.
FITTED_CODEGEN = "spark.syphon.codegen.fitted"

_WHOLE_STAGE = "spark.sql.codegen.wholeStage"


def fit_code_generation(
    spark: SparkSession, interpreted: bool, spark_conf: Mapping[str, object]
) -> bool:
    """Plans the session's next queries without code generation (``interpreted``) or
    with it, as Spark does by default. A run in waves plans its small first wave
    interpreted and the rest compiled: a cold JVM spends about a second and a half
    compiling the first wave's reconcile, which is on the way to the run's first message
    home, and the second wave compiles it once for the rest of the run (the code of a
    query of the same shape is compiled once per session).

    Left alone when the operator chose (in ``spark_conf``, the config's ``spark.conf``,
    or in the session: anything but Spark's default or the value syphon gave it; a quick
    start's session plans every query interpreted, see
    :data:`~syphon.core.sessions.INTERPRETED_MESSAGES`), and on a Spark Connect session,
    whose server is no cold JVM of the run's. Returns whether it set them."""
    if is_connect(spark) or set(INTERPRETED_CONF) & set(spark_conf):
        return False
    current = spark.conf.get(_WHOLE_STAGE, COMPILED_CONF[_WHOLE_STAGE])
    if current not in (COMPILED_CONF[_WHOLE_STAGE], spark.conf.get(FITTED_CODEGEN, None)):
        return False
    settings = INTERPRETED_CONF if interpreted else COMPILED_CONF
    for key, value in settings.items():
        spark.conf.set(key, value)
    spark.conf.set(FITTED_CODEGEN, settings[_WHOLE_STAGE])
    return True


def service_tasks(
    spark: SparkSession, messages: int | None, per_task: int = MESSAGES_PER_TASK_DEFAULT
) -> int:
    """How many Spark tasks a stage that talks to Service Bus (the snapshot, the replay,
    the settle) spreads ``messages`` over: one per ``per_task`` (``run.messages_per_task``,
    see :data:`syphon.core.config.MESSAGES_PER_TASK_DEFAULT`), at least one, at most the
    session's default parallelism (its cores); the cores when the count is unknown
    (None). A Spark Connect session's cores are not known to its client: its
    ``spark.default.parallelism``, else a default
    (:func:`syphon.core.sessions.default_parallelism`)."""
    return tasks_for(messages, per_task, default_parallelism(spark))


def tasks_for(messages: int | None, per_task: int, cores: int) -> int:
    """:func:`service_tasks` for a session of ``cores`` default parallelism."""
    cores = max(1, cores)
    if messages is None:
        return cores
    return max(1, min(cores, -(-messages // max(1, per_task))))


def keep(frame: DataFrame, on_disk: bool = False) -> DataFrame:
    """``frame`` computed now and kept by Spark (a local checkpoint: every later use reads
    these rows, nothing is computed or read from Service Bus again): on the executors'
    local disk (``on_disk``: a run in waves) or in memory. A run in waves holds the wave
    it settles and the one it reads meanwhile, each with its snapshot and plan: in memory
    they made its peak grow with the waves' size (the README's "Reading once" has the
    figures, from bench_waves.py). A run of one wave keeps them in memory. (A stage's
    results, one small row per message, are collected into the driver instead: see
    :func:`syphon.job.run.stages.send`.)"""
    from pyspark import StorageLevel

    return frame.localCheckpoint(
        eager=True, storageLevel=StorageLevel.DISK_ONLY if on_disk else None
    )
