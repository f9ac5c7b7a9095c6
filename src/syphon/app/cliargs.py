"""The ``syphon`` command's arguments: its parser (every command and option, with the
help and the exit-code table ``--help`` shows) and what the options that need more than
parsing become (a selection, a discard, the ``--until`` time), checked before anything
is read."""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timedelta
from pathlib import Path

from syphon import __version__
from syphon.core.config import LOG_LEVELS
from syphon.core.discard import (
    DEFAULT_DUPLICATES_REASON,
    DUPLICATES,
    SELECTED,
    Discard,
    DiscardError,
)
from syphon.core.errors import EXIT_CODES
from syphon.core.repair import Repair
from syphon.core.selection import Selection, SelectionError, parse_time, selection_from_text
from syphon.obs.logs import LOG_FORMATS


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``syphon`` command."""
    parser = argparse.ArgumentParser(
        prog="syphon",
        description="Bring Azure Service Bus messages home from paired-namespace backlog queues.",
    )
    parser.add_argument("--version", action="version", version=f"syphon {__version__}")
    parser.add_argument(
        "--log-level",
        default=None,
        type=str.upper,
        choices=LOG_LEVELS,
        help="DEBUG (the SDK's logs too), INFO, WARNING or ERROR (default: from config)",
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

    planned = sub.add_parser(
        "plan",
        help="snapshot, reconcile and audit the backlog: record a verdict for every message; "
        "send nothing, remove nothing",
    )
    _add_config_option(planned)
    planned.add_argument("--run-id", default=None, help="the run id (default: time and random)")
    _add_job_run_option(planned)
    _add_source_option(planned)
    _add_selection_options(planned)
    _add_discard_options(planned, dry_run=True)
    _add_repair_options(planned, dry_run=True)

    provision = sub.add_parser(
        "provision",
        help="create the missing backlog queues of every configured primary in the secondary "
        "namespace; report extra and differing ones (never changes or deletes)",
    )
    _add_config_option(provision)
    provision.add_argument(
        "--count", type=int, default=None, help="backlog queue count (default: backlog.queue_count)"
    )

    codes = ", ".join(f"{d.code.value} {d.code.name.lower().replace('_', ' ')}" for d in EXIT_CODES)
    ran = sub.add_parser(
        "run",
        help=f"plan, replay to the primaries, settle the backlog (exit codes: {codes})",
        epilog=f"exit codes: {codes} (what each means and what to do: the README)",
    )
    _add_config_option(ran)
    ran.add_argument("--run-id", default=None, help="the run id (default: time and random)")
    _add_job_run_option(ran)
    _add_source_option(ran)
    _add_selection_options(ran)
    _add_discard_options(ran)
    _add_repair_options(ran)
    _add_wave_options(ran)

    discard = sub.add_parser(
        "discard",
        help="remove the selected messages of a source without sending them, each recorded "
        "in the audit as discarded with your reason (the dry run: plan --discard)",
        epilog=f"exit codes as run: {codes}",
    )
    _add_config_option(discard)
    discard.add_argument("--run-id", default=None, help="the run id (default: time and random)")
    _add_job_run_option(discard)
    _add_source_option(discard)
    _add_selection_options(discard, resend=False)
    discard.add_argument(
        "--reason",
        required=True,
        metavar="TEXT",
        help="why they are discarded (kept in the audit; required)",
    )

    replay = sub.add_parser(
        "replay", help="resume the replay and settle of a planned run (same exit codes as run)"
    )
    _add_config_option(replay)
    replay.add_argument("--run-id", required=True, help="the planned run to resume")
    _add_job_run_option(replay)
    _add_source_option(replay)

    shown = sub.add_parser("status", help="a source's depth per queue and its last runs")
    _add_config_option(shown)
    _add_source_option(shown)
    shown.add_argument("--runs", type=int, default=10, help="how many runs to show (default 10)")
    return parser


def _add_source_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--source",
        default=None,
        metavar="NAME",
        help="the configured source to drain (default: backlog, or the only "
        "one; see sources in the config)",
    )


def _add_wave_options(cmd: argparse.ArgumentParser) -> None:
    group = cmd.add_argument_group(
        "waves",
        "a run drains its source in waves of at most run.wave_messages messages, oldest "
        "first; these stop it cleanly at a wave's end (status partial: the next run "
        "takes the rest)",
    )
    group.add_argument(
        "--max-waves", type=int, default=None, metavar="N", help="take at most N waves"
    )
    group.add_argument(
        "--until",
        default=None,
        metavar="TIME",
        help="take no wave after TIME: an ISO 8601 time (no zone: UTC) or "
        "a duration from now (+90m, +2h, +45s)",
    )


def until(text: str | None, now: datetime) -> datetime | None:
    """``--until``: an ISO 8601 time, or ``+N`` seconds, minutes or hours from ``now``.

    Raises:
        SelectionError: neither.
    """
    if text is None:
        return None
    match = re.fullmatch(r"\+(\d+)([smh])", text.strip())
    if match:
        unit = {"s": 1, "m": 60, "h": 3600}[match.group(2)]
        return now + timedelta(seconds=int(match.group(1)) * unit)
    return parse_time(text, "--until")


def _add_selection_options(cmd: argparse.ArgumentParser, resend: bool = True) -> None:
    group = cmd.add_argument_group(
        "selection",
        "take only some messages (every condition given must hold); the rest are recorded "
        "as unselected and stay where they are. With plan: the dry run of a run with the "
        "same selection",
    )
    group.add_argument(
        "--destination",
        action="append",
        default=[],
        metavar="ENTITY",
        help="messages for this entity (repeatable)",
    )
    group.add_argument(
        "--message-id",
        action="append",
        default=[],
        metavar="ID",
        help="messages with this MessageId (repeatable)",
    )
    group.add_argument(
        "--message-ids-file",
        default=None,
        metavar="FILE",
        help="messages whose MessageId is a line of FILE",
    )
    group.add_argument(
        "--enqueued-from",
        default=None,
        metavar="TIME",
        help="first enqueued at or after TIME (ISO 8601, UTC unless a zone is given)",
    )
    group.add_argument(
        "--enqueued-until", default=None, metavar="TIME", help="first enqueued before TIME"
    )
    group.add_argument(
        "--dead-letter-reason",
        action="append",
        default=[],
        metavar="REASON",
        help="dead-lettered messages with this DeadLetterReason (repeatable)",
    )
    if resend:  # sending again is for plan and run; a discard sends nothing
        cmd.add_argument(
            "--allow-resend",
            action="append",
            default=[],
            metavar="ID",
            help="send this MessageId again although an earlier run replayed it "
            "(repeatable; the audit records the reason resend_allowed)",
        )
        cmd.add_argument(
            "--new-message-ids",
            action="store_true",
            help="send a re-driven dead letter that its destination's duplicate detection "
            "would drop under a new MessageId derived from its own (the same on every "
            "rerun; the original is kept in the property syphon-original-message-id and "
            "in the audit) instead of leaving it until the window passes",
        )
        cmd.add_argument(
            "--take-deferred",
            action="store_true",
            help="a run that reads once receives the deferred messages it finds by their "
            "sequence numbers and takes them with their keys, in order (by default their "
            "keys wait, and the run says they are deferred)",
        )
    group.add_argument(
        "--where",
        default=None,
        metavar="SQL",
        help="a Spark SQL predicate over the snapshot's columns and "
        "properties['name'] (see the README)",
    )


def _add_discard_options(cmd: argparse.ArgumentParser, dry_run: bool = False) -> None:
    group = cmd.add_argument_group(
        "discard",
        "remove messages without sending them, each recorded as discarded with a reason"
        + (" (here: the dry run; nothing is removed)" if dry_run else ""),
    )
    group.add_argument(
        "--discard-duplicates",
        action="store_true",
        help="discard what the run judges a duplicate: exact copies of a "
        "message it sends or an earlier run delivered (in a dead-letter "
        "queue they stay otherwise)",
    )
    if dry_run:
        group.add_argument(
            "--discard",
            action="store_true",
            help="discard every selected message: the dry run of syphon "
            "discard (needs a selection and --reason)",
        )
    group.add_argument(
        "--reason",
        default=None,
        metavar="TEXT",
        help="why they are discarded (kept in the audit; default for "
        f"--discard-duplicates: {DEFAULT_DUPLICATES_REASON!r})",
    )


def _add_repair_options(cmd: argparse.ArgumentParser, dry_run: bool = False) -> None:
    group = cmd.add_argument_group(
        "repair",
        "change what is sent: each --set is a Spark SQL expression over the snapshot's "
        "columns and properties['name'], as --where sees them (null for a message: "
        "its property stays as it is); the session id, partition key and MessageId "
        "cannot be changed"
        + (" (here: the dry run; the summary counts what each change alters)" if dry_run else ""),
    )
    group.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME[:TYPE]=SQL",
        help="set an application property (or subject, to, reply_to, content_type, "
        "correlation_id, time_to_live, scheduled_enqueue_time) to the expression's "
        "value; TYPE (long, int, string, ...) where the expression's is ambiguous "
        "(repeatable)",
    )
    group.add_argument(
        "--unset",
        action="append",
        default=[],
        metavar="NAME",
        help="remove an application property or one of those system properties (repeatable)",
    )


def repair_of(args: argparse.Namespace) -> Repair | None:
    """The command's repair, or None when it asks for none.

    Raises:
        RepairError: a change that cannot be (see :mod:`syphon.core.repair`).
    """
    return Repair.from_options(getattr(args, "set", []), getattr(args, "unset", []))


def discard_of(args: argparse.Namespace, selection: Selection | None) -> Discard | None:
    """The command's discard, or None when it discards nothing.

    Raises:
        DiscardError: a reason without a discard, a discard without what it needs.
    """
    reason = getattr(args, "reason", None)
    if args.command == "discard" or getattr(args, "discard", False):
        if getattr(args, "discard_duplicates", False):
            raise DiscardError(
                "--discard takes the selected messages; --discard-duplicates "
                "the duplicates: give one of them"
            )
        if selection is None:
            raise DiscardError(
                "a discard needs a selection (--where, --message-id, --destination, ...): it "
                "never takes a whole source by default"
            )
        if reason is None:
            raise DiscardError("--discard needs --reason: say why these messages are discarded")
        return Discard(SELECTED, reason)
    if getattr(args, "discard_duplicates", False):
        return Discard(DUPLICATES, DEFAULT_DUPLICATES_REASON if reason is None else reason)
    if reason is not None:
        raise DiscardError("--reason goes with --discard-duplicates (or syphon discard)")
    return None


def selection_of(args: argparse.Namespace) -> Selection | None:
    """The command's selection, or None when it gives none.

    Raises:
        SelectionError: a time or the MessageId file cannot be read.
    """
    ids = list(args.message_id)
    if args.message_ids_file is not None:
        try:
            text = Path(args.message_ids_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise SelectionError(
                f"--message-ids-file {args.message_ids_file}: {exc.strerror or exc}"
            ) from None
        ids += [line.strip() for line in text.splitlines() if line.strip()]
    if args.message_ids_file is not None and not ids:
        raise SelectionError(f"--message-ids-file {args.message_ids_file}: no MessageId in it")
    return selection_from_text(
        destinations=args.destination,
        message_ids=ids,
        enqueued_from=args.enqueued_from,
        enqueued_until=args.enqueued_until,
        dead_letter_reasons=args.dead_letter_reason,
        where=args.where,
    )


def _add_job_run_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--job-run-id",
        default=None,
        help="the platform's job run that runs the command (Databricks: {{job.run_id}}), "
        "recorded on the run's ledger rows and its plan's audit rows; empty: none",
    )


def _add_config_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--config",
        default=None,
        help="YAML config file (default: $SYPHON_CONFIG, else the embedded conf/local.yaml)",
    )
