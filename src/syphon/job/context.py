"""What every stage is handed: the config, the namespaces (secrets already read), the
audit store and the Spark session on demand — built once by the entry point
(:func:`syphon.app.services.build_context`), swapped for fakes in tests."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from syphon.core.config import MESSAGES_PER_TASK_DEFAULT, SyphonConfig
from syphon.core.sessions import INTERPRETED_CONF, SessionFit, default_parallelism, is_connect
from syphon.servicebus.access import Namespaces
from syphon.store.audit import AuditStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


class SparkHandle(Protocol):
    """The run's Spark session as the job reaches it (:class:`syphon.app.on_demand.SparkOnDemand`
    wires it): started on the first call, or in the background from :meth:`start_soon`."""

    def __call__(self) -> SparkSession:
        """The session, started now or waited for."""
        ...

    def fit(self, fit: SessionFit) -> None:
        """What the run expects, for the session's start."""
        ...

    def start_soon(self) -> None:
        """Starts the session in the background."""
        ...

    @property
    def started(self) -> SparkSession | None:
        """The session if it was started, else None."""
        ...

    def release(self) -> None:
        """Gives back what earlier waves kept (between waves)."""
        ...

    def give_back(self) -> None:
        """Hands the pages a read freed back to the system."""
        ...


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
    spark: SparkHandle
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
