"""The services of a command, built once at the entry point (the CLI, the notebook, the
demo) and handed to the job as one :class:`~syphon.job.context.RunContext`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from syphon.app.on_demand import SparkOnDemand
from syphon.app.pyworkers import start_python_workers
from syphon.app.report import write_run_report
from syphon.app.spark import build_spark_session, local_master
from syphon.app.storage import resolve_location
from syphon.core.config import SyphonConfig
from syphon.core.sessions import SessionFit
from syphon.job.context import RunContext
from syphon.job.ledger import RunResult
from syphon.job.request import RunRequest, run_request
from syphon.job.run import loop as job_run
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

    def session(fit: SessionFit) -> SparkSession:
        if spark_factory is not None:  # a session made elsewhere: nothing to fit
            return spark_factory()
        built = build_spark_session(config.spark, dbutils_get, fit)
        if local_master(config.spark):
            start_python_workers(built)  # while the run reads (see syphon.app.pyworkers)
        return built

    spark = SparkOnDemand(session)
    return RunContext(config, namespaces, open_store(config.audit, spark, location), spark)


def run_with_report(ctx: RunContext, request: RunRequest | None = None) -> RunResult:
    """``syphon run`` of ``request`` (None: everything of the config's default source)
    or, with ``request.resume``, ``syphon replay`` of its run; then the run's report."""
    result = job_run.run(ctx, request or run_request(ctx))
    result.report = write_run_report(ctx, result)
    return result
