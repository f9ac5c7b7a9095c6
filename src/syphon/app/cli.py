"""The ``syphon`` command. It parses arguments, sets up logging, builds the services once
and calls the library; every error becomes one line, a ``fix:`` line when there is one,
and an exit code (:mod:`syphon.job.failures`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import NoReturn

import yaml

from syphon.app.cliargs import build_parser, discard_of, repair_of, selection_of, until
from syphon.app.services import build_context, run_with_report
from syphon.app.text import format_run, format_status, format_summary
from syphon.core.config import SyphonConfig
from syphon.core.configfile import load_config
from syphon.core.errors import SyphonError, action_of
from syphon.core.selection import SelectionError
from syphon.core.sessions import close_client
from syphon.job.context import RunContext
from syphon.job.failures import explain
from syphon.job.plan.planning import plan
from syphon.job.request import Asked, RunRequest, new_run_id, run_request
from syphon.job.run.status import status
from syphon.job.sources import RunSource, run_source
from syphon.obs import progress
from syphon.obs.logs import configure_logging, run_context
from syphon.servicebus.access import Access
from syphon.servicebus.secrets import databricks_secrets

log = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``syphon`` command and returns its exit code."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level or "INFO", args.log_format or "text")
    # stage and task counts on the terminal; nothing when stderr is a file or a pipe
    progress.install(sys.stderr)
    try:
        return _dispatch(args)
    except Exception as exc:  # one line, a fix line, an exit code: never a traceback
        failure = explain(exc)
        if isinstance(exc, SyphonError):
            message = str(exc)
        else:
            why = f": {failure.why}" if failure.why else ""
            message = f"failed ({failure.detail}{why})"
        print(f"syphon {args.command}: {message}", file=sys.stderr)
        print(f"fix: {failure.fix or action_of(failure.code)}", file=sys.stderr)
        log.debug("syphon %s failed", args.command, exc_info=exc)
        return int(failure.code)
    finally:
        progress.uninstall()


def _dispatch(args: argparse.Namespace) -> int:
    run_id = getattr(args, "run_id", None) or new_run_id(datetime.now(timezone.utc))
    # every record, the config's included, names the run
    with run_context(run_id), contextlib.ExitStack() as ending:
        # a malformed selection is refused before anything is read or started
        selection = selection_of(args) if args.command in ("plan", "run", "discard") else None
        repair = repair_of(args)  # and so is a repair that cannot be
        if getattr(args, "max_waves", None) is not None and args.max_waves < 1:
            raise SelectionError(f"--max-waves: at least 1 (got {args.max_waves})")
        stop_at = until(getattr(args, "until", None), datetime.now(timezone.utc))
        discard = (
            discard_of(args, selection) if args.command in ("plan", "run", "discard") else None
        )
        config = _config(args)
        if args.command == "config":
            print(yaml.safe_dump(config.as_dict(), sort_keys=False), end="")
            return 0
        ctx = build_context(config, dbutils_get=databricks_secrets())
        # a Spark Connect client's channel is closed before the interpreter's exit tears
        # its threads down (and its own exit hook makes no last call to the server)
        ending.callback(lambda: close_client(ctx.spark.started))
        if args.command == "provision":
            return _provision(ctx, args.count)
        source = run_source(ctx, args.source)
        if args.command == "status":
            return _status(ctx, args.runs, source)
        asked = Asked(
            selection=selection,
            allow_resend=tuple(getattr(args, "allow_resend", ())),
            discard=discard,
            repair=repair,
            max_waves=getattr(args, "max_waves", None),
            until=stop_at,
            job_run_id=getattr(args, "job_run_id", None) or None,
            new_message_ids=bool(getattr(args, "new_message_ids", False)),
            take_deferred=bool(getattr(args, "take_deferred", False)),
        )
        request = run_request(ctx, run_id, source, asked, resume=args.command == "replay")
        if args.command == "plan":
            return _plan(ctx, request)
        result = run_with_report(ctx, request)
    print(format_run(result))
    print(f"audit: {ctx.store.where}")
    return int(result.exit_code)


def _config(args: argparse.Namespace) -> SyphonConfig:
    """The config, and logging as it asks where the command line did not say."""
    config = load_config(args.config)
    fmt = args.log_format or config.logging.format
    level = args.log_level or config.logging.level
    configure_logging(level, fmt, sdk_level=config.logging.sdk_level)
    if fmt == "json":  # JSON lines are for machines: no progress between them
        progress.uninstall()
    return config


def _status(ctx: RunContext, runs: int, source: RunSource) -> int:
    try:
        report = status(ctx, source, last_runs=runs)
    except Exception as exc:
        _raise_as(exc, ctx, source.access)
    print(format_status(report))
    return 0


def _plan(ctx: RunContext, request: RunRequest) -> int:
    try:
        result = plan(ctx, request)
    except Exception as exc:
        _raise_as(exc, ctx, request.source.access)
    print(format_summary(result))
    print(f"audit: {ctx.store.where}")
    return 0


def _provision(ctx: RunContext, count: int | None) -> int:
    from syphon.servicebus.provision import provision_backlog

    wanted = count if count is not None else ctx.config.backlog.queue_count
    warnings = 0
    try:
        with ctx.namespaces.backlog_namespace().admin_client() as admin:
            for primary in ctx.config.primaries:
                result = provision_backlog(admin, primary.namespace, count=wanted)
                print(result.summary())
                for path in result.created:
                    print(f"  created {path}")
                for line in result.warnings:
                    print(f"  warning: {line}")
                warnings += len(result.warnings)
    except Exception as exc:
        _raise_as(exc, ctx)
    print(f"done: {warnings} warning(s)")
    return 0


def _raise_as(exc: Exception, ctx: RunContext, namespace: Access | None = None) -> NoReturn:
    """Re-raises ``exc`` as a syphon error explained for ``namespace`` (None: the
    secondary); one of syphon's own as it is (its words say what failed and where)."""
    if isinstance(exc, SyphonError):
        raise exc
    failure = explain(exc, namespace or ctx.namespaces.secondary)
    why = f": {failure.why}" if failure.why else ""
    error = SyphonError(f"failed ({failure.detail}{why})", fix=failure.fix)
    error.exit_code = failure.code
    raise error from None
