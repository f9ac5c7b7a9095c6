"""The two kinds of Spark session a job is handed: a classic one (spark-submit, dedicated
clusters, local mode), with a SparkContext and a JVM in this process, and a Spark Connect
one (Databricks serverless and standard access mode, ``SPARK_REMOTE``), a client that
serves the DataFrame API only: no ``sparkContext``, no JVM gateway, no RDDs. syphon's run
path uses what both serve; what only a classic session has (its cores, its status
tracker, its JVM) is asked for through :func:`is_connect` first."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionFit:
    """What a run tells the session factory before its session starts, for a local
    session to fit itself to (:func:`syphon.app.spark.build_spark_session`).

    Attributes:
        expected_messages: how many messages a wave of the run reads at most (None:
            unknown).
        waves: whether the run drains its source in several waves.
        wave_bytes: about how many bytes a wave's messages take (None: unknown).
        azure_ad: whether any namespace the run reads or sends to signs in with Azure AD
            (a Python worker of its own per task would fetch a token of its own).
    """

    expected_messages: int | None = None
    waves: bool = False
    wave_bytes: int | None = None
    azure_ad: bool = False


#: A quick start of a run that expects at most this many messages plans its queries
#: without code generation (:func:`syphon.app.spark.build_spark_session`), and so does a
#: run's first wave of at most this many (:func:`syphon.job.context.fit_code_generation`):
#: compiling each query's code costs about a second of a cold JVM, and interpreting it
#: costs about 0.25 CPU-ms per message more.
INTERPRETED_MESSAGES = 10_000

#: The query settings that plan without code generation.
INTERPRETED_CONF: dict[str, str] = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

#: The task count a Spark Connect session's stages take when its configuration does not
#: say (``spark.default.parallelism``): a client cannot see the cluster's cores.
CONNECT_DEFAULT_PARALLELISM = 8


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (by its class: nothing is asked of
    the server)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def close_client(spark: Any) -> None:
    """Closes a Spark Connect session's channel to its server, as a command ends: the
    server keeps the session until it times out, and this process makes no further call
    (PySpark's own exit hook would make one, and wait on a server that is gone). A
    classic session (or None) is left alone: its JVM ends with the process. A channel
    that does not close cleanly is left to the exit."""
    if spark is None or not is_connect(spark):
        return
    try:
        spark.client.close()
    except Exception as exc:  # the command's outcome stands: nothing more to do here
        log.debug("the Spark Connect channel did not close cleanly: %s", type(exc).__name__)


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


#: The oldest Spark syphon runs on: it uses DataFrame.toArrow, Python data sources and the
#: Arrow task APIs of Spark 4 (Databricks Runtime 17.3 LTS, serverless environment 4).
OLDEST_SPARK = (4, 0)


def require_spark(version: str) -> None:
    """Refuses a Spark older than :data:`OLDEST_SPARK` (``version``: PySpark's, such as
    ``3.5.7`` or ``4.0.5``), before any session starts.

    Raises:
        SparkSetupError: an older Spark, with the runtime to use.
    """
    from syphon.core.errors import SparkSetupError

    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    if len(parts) == 2 and tuple(parts) < OLDEST_SPARK:
        raise SparkSetupError(
            f"PySpark {version} is installed; syphon needs Spark 4.0 or later",
            fix="run on Databricks Runtime 17.3 LTS or later (Spark 4.0), serverless "
            "environment 4 or later, or pip install 'syphon[local]' (PySpark 4.2.0)",
        )
