"""The services of a command, built once at the entry point (the CLI, the notebook, the
demo) and handed to the job as one :class:`~syphon.job.context.RunContext`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from syphon.app.report import write_run_report
from syphon.app.spark import build_spark_session
from syphon.app.storage import resolve_location
from syphon.core.config import SyphonConfig
from syphon.core.discard import Discard
from syphon.core.selection import Selection
from syphon.job import run as job_run
from syphon.job.context import RunContext, SparkOnDemand
from syphon.job.ledger import RunResult
from syphon.job.sources import RunSource
from syphon.servicebus.access import resolve_namespaces
from syphon.servicebus.secrets import DbutilsGet
from syphon.store.backend import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def build_context(
    config: SyphonConfig,
    *,
    spark_factory: Callable[[], SparkSession] | None = None,
    dbutils_get: DbutilsGet | None = None,
    environ: Mapping[str, str] | None = None,
) -> RunContext:
    """Reads every secret once (failing before anything starts), chooses the audit store,
    and prepares the Spark session to start on first use.

    Raises:
        SecretError: a secret is unset, or a connection string is malformed (the audit
            storage's secrets too).
    """
    namespaces = resolve_namespaces(config, dbutils_get, environ)
    location = resolve_location(config.audit, dbutils_get, environ)

    def session() -> SparkSession:
        return build_spark_session(config.spark, dbutils_get, spark.expected_messages)

    spark = SparkOnDemand(spark_factory or session)
    return RunContext(config, namespaces, open_store(config.audit, spark, location), spark)


def run_with_report(ctx: RunContext, run_id: str | None = None, resume: bool = False,
                    selection: Selection | None = None, source: RunSource | None = None,
                    allow_resend: tuple[str, ...] = (),
                    discard: Discard | None = None) -> RunResult:  # fmt: skip
    """``syphon run`` on what ``selection`` takes (or, with ``resume``, ``syphon replay``
    of ``run_id``: its plan says what it takes), then the run's report."""
    if resume:
        assert run_id is not None
        result = job_run.resume(ctx, run_id, source)
    else:
        result = job_run.run(ctx, run_id, selection, source, allow_resend, discard)
    result.report = write_run_report(ctx, result)
    return result
