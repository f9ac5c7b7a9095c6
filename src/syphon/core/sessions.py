"""The two kinds of Spark session a job is handed: a classic one (spark-submit, dedicated
clusters, local mode), with a SparkContext and a JVM in this process, and a Spark Connect
one (Databricks serverless and standard access mode, ``SPARK_REMOTE``), a client that
serves the DataFrame API only: no ``sparkContext``, no ``_jvm``, no RDDs. syphon's run
path uses what both serve; what only a classic session has (its cores, its status
tracker, its JVM) is asked for through :func:`is_connect` first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SessionFit:
    """What a run tells the session factory before its session starts, for a local
    session to fit itself to (:func:`syphon.app.spark.build_spark_session`).

    Attributes:
        expected_messages: how many messages a wave of the run reads at most (None:
            unknown).
        waves: whether the run drains its source in several waves.
    """

    expected_messages: int | None = None
    waves: bool = False


#: The task count a Spark Connect session's stages take when its configuration does not
#: say (``spark.default.parallelism``): a client cannot see the cluster's cores.
CONNECT_DEFAULT_PARALLELISM = 8


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (by its class: nothing is asked of
    the server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def default_parallelism(spark: Any) -> int:
    """The session's default parallelism: a classic session's (its cores, or what
    ``spark.default.parallelism`` set), a Connect session's ``spark.default.parallelism``
    when the server tells it, else :data:`CONNECT_DEFAULT_PARALLELISM`."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    try:
        told = spark.conf.get("spark.default.parallelism", None)
    except Exception:  # a platform may refuse to tell (serverless): the default
        told = None
    try:
        return max(1, int(told)) if told else CONNECT_DEFAULT_PARALLELISM
    except ValueError:
        return CONNECT_DEFAULT_PARALLELISM
