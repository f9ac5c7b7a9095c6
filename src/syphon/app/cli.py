"""The ``syphon`` command. It parses arguments, sets up logging and calls the library."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import yaml

from syphon import __version__
from syphon.core.config import SyphonConfig, load_config, resolve_secret
from syphon.core.errors import SecretError, SyphonError
from syphon.obs import progress
from syphon.obs.logs import LOG_FORMATS, configure_logging, run_context

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``syphon`` command."""
    parser = argparse.ArgumentParser(
        prog="syphon",
        description="Bring Azure Service Bus messages home from paired-namespace backlog queues.",
    )
    parser.add_argument("--version", action="version", version=f"syphon {__version__}")
    parser.add_argument(
        "--log-level", default=None, help="DEBUG, INFO, WARNING or ERROR (default: from config)"
    )
    parser.add_argument(
        "--log-format",
        default=None,
        choices=LOG_FORMATS,
        help="text, or json: one object per line with the run id (default: from config)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    check = sub.add_parser(
        "config", help="validate a config and print it (secret references only, never values)"
    )
    _add_config_option(check)

    plan = sub.add_parser(
        "plan",
        help="snapshot, reconcile and audit the backlog: record a verdict for every message; "
        "send nothing, remove nothing",
    )
    _add_config_option(plan)
    plan.add_argument("--run-id", default=None, help="the run id (default: time and random)")

    provision = sub.add_parser(
        "provision",
        help="create the missing backlog queues of every configured primary in the secondary "
        "namespace; report extra and differing ones (never changes or deletes)",
    )
    _add_config_option(provision)
    provision.add_argument(
        "--count", type=int, default=None, help="backlog queue count (default: backlog.queue_count)"
    )

    run = sub.add_parser(
        "run",
        help="plan, replay to the primaries, settle the backlog (exit 0 done, 1 failed, "
        "2 bad config, 3 credentials refused, 4 no Java, 5 work left for a later run, "
        "6 another run holds the lease, 7 namespace unreachable, 8 missing destination)",
    )
    _add_config_option(run)
    run.add_argument("--run-id", default=None, help="the run id (default: time and random)")

    replay = sub.add_parser(
        "replay", help="resume the replay and settle of a planned run (same exit codes as run)"
    )
    _add_config_option(replay)
    replay.add_argument("--run-id", required=True, help="the planned run to resume")

    status = sub.add_parser("status", help="backlog depth per queue and the last runs")
    _add_config_option(status)
    status.add_argument("--runs", type=int, default=10, help="how many runs to show (default 10)")

    return parser


def _add_config_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--config",
        default=None,
        help="YAML config file (default: $SYPHON_CONFIG, else the embedded conf/local.yaml)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``syphon`` command and returns its exit code."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level or "INFO", args.log_format or "text")
    # stage and task counts on the terminal; nothing when stderr is a file or a pipe
    progress.install(sys.stderr)
    try:
        return _dispatch(args)
    except SyphonError as exc:
        print(f"syphon {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        progress.uninstall()


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "config":
        config = _config(args)
        print(yaml.safe_dump(config.as_dict(), sort_keys=False), end="")
        return 0
    if args.command == "provision":
        return _provision(args)
    if args.command == "plan":
        return _plan(args)
    if args.command in ("run", "replay"):
        return _run(args)
    if args.command == "status":
        return _status(args)
    raise AssertionError(f"unhandled command {args.command}")  # argparse allows no other


def databricks_secrets() -> Callable[[str, str], str] | None:
    """``dbutils.secrets.get`` when running on a Databricks cluster (the runtime sets
    ``DATABRICKS_RUNTIME_VERSION``), for ``{scope, key}`` secret references; else None.
    Not testable off Databricks: the tests cover the None path only."""
    if not os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return None

    def get(scope: str, key: str) -> str:
        from pyspark.dbutils import DBUtils  # type: ignore[import-not-found]
        from pyspark.sql import SparkSession

        return str(DBUtils(SparkSession.builder.getOrCreate()).secrets.get(scope, key))

    return get


def _config(args: argparse.Namespace) -> SyphonConfig:
    """The config, and logging as it asks where the command line did not say."""
    config = load_config(args.config)
    fmt = args.log_format or config.logging.format
    configure_logging(args.log_level or config.logging.level, fmt)
    if fmt == "json":  # JSON lines are for machines: no progress between them
        progress.uninstall()
    return config


def _checked_config(args: argparse.Namespace) -> SyphonConfig:
    config = _config(args)
    keys = [("secondary", config.secondary)]
    keys += [(f"primaries.{i}", p) for i, p in enumerate(config.primaries)]
    for key, namespace in keys:  # fail before Spark starts, naming the key
        refs = [(f"{key}.connection_string", namespace.connection_string),
                (f"{key}.credential.client_secret",
                 namespace.credential.client_secret if namespace.credential else None)]  # fmt: skip
        for name, ref in refs:
            if ref is not None and ref.env is not None:
                try:
                    resolve_secret(ref)
                except SecretError as exc:
                    raise SecretError(f"{config.source}: {name}: {exc}") from None
    return config


def _run(args: argparse.Namespace) -> int:
    from syphon.app.spark import build_spark_session
    from syphon.job.plan import new_run_id
    from syphon.job.run import format_run, replay_run, run

    run_id = args.run_id or new_run_id(datetime.now(timezone.utc))
    with run_context(run_id):  # every record, the config's included, names the run
        config = _checked_config(args)
        if args.command == "run":
            result = run(config, lambda: build_spark_session(config.spark), run_id=run_id,
                         dbutils_get=databricks_secrets())  # fmt: skip
        else:
            result = replay_run(build_spark_session(config.spark), config, run_id,
                                dbutils_get=databricks_secrets())  # fmt: skip
    print(format_run(result))
    print(f"audit: {config.audit.where}")
    return result.exit_code


def _status(args: argparse.Namespace) -> int:
    from azure.core.exceptions import AzureError

    from syphon.job.run import format_status, status

    config = _config(args)
    if config.audit.engine == "spark":  # the ledger is a catalog table: read by Spark
        from syphon.app.spark import build_spark_session

        build_spark_session(config.spark)
    try:
        report = status(config, last_runs=args.runs, dbutils_get=databricks_secrets())
    except AzureError as exc:
        raise SyphonError(f"Service Bus failed: {type(exc).__name__}") from None
    print(format_status(report))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from azure.core.exceptions import AzureError

    from syphon.app.spark import build_spark_session
    from syphon.job.plan import format_summary, new_run_id, run_plan

    run_id = args.run_id or new_run_id(datetime.now(timezone.utc))
    try:
        with run_context(run_id):
            config = _checked_config(args)
            spark = build_spark_session(config.spark)
            result = run_plan(spark, config, run_id=run_id, dbutils_get=databricks_secrets())
    except AzureError as exc:
        raise SyphonError(f"Service Bus failed: {type(exc).__name__}") from None
    print(format_summary(result))
    print(f"audit: {config.audit.where}")
    return 0


def _provision(args: argparse.Namespace) -> int:
    from azure.core.exceptions import AzureError

    from syphon.servicebus.access import admin_client
    from syphon.servicebus.provision import provision_backlog

    config = _config(args)
    count = args.count if args.count is not None else config.backlog.queue_count
    admin = admin_client(config.secondary, databricks_secrets())
    warnings = 0
    try:
        with admin:
            for primary in config.primaries:
                result = provision_backlog(admin, primary.namespace, count=count)
                print(result.summary())
                for path in result.created:
                    print(f"  created {path}")
                for line in result.warnings:
                    print(f"  warning: {line}")
                warnings += len(result.warnings)
    except AzureError as exc:
        raise SyphonError(
            f"the management API of {config.secondary.namespace} failed: "
            f"{type(exc).__name__}: {exc.message if hasattr(exc, 'message') else exc}"
        ) from None
    print(f"done: {warnings} warning(s)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
