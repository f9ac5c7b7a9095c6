"""The errors syphon raises, and the one table of exit codes.

Every error syphon raises on purpose is a :class:`SyphonError`; its class says the exit
code, and ``fix`` (when set) is one line telling the operator what to do. Errors that
come from elsewhere (the SDK, Spark, the file system) are turned into one of these by
:func:`syphon.job.failures.explain`, the only place that maps errors to exit codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ExitCode(IntEnum):
    """The exit codes of ``syphon run`` and ``syphon replay`` (the other commands use 0,
    1, 2 and the codes of the errors they meet)."""

    DONE = 0
    FAILED = 1
    CONFIG = 2
    DENIED = 3
    NO_SPARK = 4
    PARTIAL = 5
    BUSY = 6
    UNREACHABLE = 7
    MISSING_DESTINATION = 8
    AUDIT_UNAVAILABLE = 9


@dataclass(frozen=True)
class ExitCodeDoc:
    """What an exit code means and what the operator does about it."""

    code: ExitCode
    meaning: str
    action: str


#: The table the README and ``syphon run --help`` show (a test keeps them equal).
EXIT_CODES: tuple[ExitCodeDoc, ...] = (
    ExitCodeDoc(ExitCode.DONE, "done, or nothing to do", "-"),
    ExitCodeDoc(
        ExitCode.FAILED,
        "the run failed (the ledger row says the error class; the line says it too, with "
        "what failed and where: syphon's own words, or the error's first line, secrets "
        "masked, and the place in syphon it was met)",
        "rerun; the next run finishes what is in doubt",
    ),
    ExitCodeDoc(
        ExitCode.CONFIG,
        "a config key is missing or bad, a secret reference cannot be resolved or holds a "
        "malformed connection string, or a literal secret is in the config (checked before "
        "anything starts; the line names the file, the key and what it must be); or a "
        "selection option is malformed or its `--where` does not apply",
        "fix the key, the option or set the variable",
    ),
    ExitCodeDoc(
        ExitCode.DENIED,
        "a namespace refused the credentials, or azure-identity got no token (checked "
        "for every namespace a run reads or sends to before Spark starts)",
        "check the key name and key (the secondary needs Manage and Listen rights, a primary "
        "Send, and Manage to read its destinations' settings, a dead-letter source's "
        "primary and a drained namespace Listen too); with Azure AD, that the "
        "identity is found on this machine and holds Azure Service Bus Data Owner",
    ),
    ExitCodeDoc(
        ExitCode.NO_SPARK,
        "no Java, no PySpark, or Spark cannot start",
        "install a JRE 17 (`apt-get install -y default-jre-headless`) or set `JAVA_HOME`",
    ),
    ExitCodeDoc(
        ExitCode.PARTIAL,
        "work was left for a later run (a skipped destination, a failed send, a message "
        "not received, a queue of the source that cannot be read, a message locked by "
        "another receiver or deferred by a consumer, a dead letter within its "
        "destination's duplicate detection window, a dead letter newly waiting for the "
        "operator; late arrivals and messages gone before the run looked do not count)",
        "see the outcomes and the `fix:` line; rerun when the destination is back or the "
        "window has passed; `--take-deferred`, `--new-message-ids`; discard or resend "
        "what waits for you",
    ),
    ExitCodeDoc(
        ExitCode.BUSY,
        "another run holds the lease",
        "wait for it; after a crash, its lease expires `run.lease_seconds` (default 120) "
        "after its last renewal (the line says when)",
    ),
    ExitCodeDoc(
        ExitCode.UNREACHABLE,
        "a namespace cannot be reached (the line names it and its host)",
        "check its Endpoint (or `fully_qualified_namespace`, `management_endpoint`), DNS, "
        "network, firewall",
    ),
    ExitCodeDoc(
        ExitCode.MISSING_DESTINATION,
        "a destination does not exist on its primary (the line names each one: messages "
        "for a destination the primary's listing lacks are dead-lettered in the backlog "
        "with reason `destination_unknown`; those for one a send did not find, when the "
        "listing was unavailable, stay in the backlog). Wins over 5.",
        "create the entity (resubmit dead-lettered messages from the backlog queue's "
        "dead-letter queue), or correct the senders' entity names",
    ),
    ExitCodeDoc(
        ExitCode.AUDIT_UNAVAILABLE,
        "the audit location (`audit.path`) cannot be written or read (the line names the "
        "path and the cause)",
        "point `audit.path` at a folder or URI this machine (and every executor) can "
        "write, or fix its permissions; a Delta table there that delta-rs cannot read (its "
        "`_delta_log` not whole, or written by another tool): point `audit.path` at a new "
        "folder",
    ),
)


def action_of(code: ExitCode) -> str:
    """What the operator does about ``code``, as the table says (every code but 0 has
    an action: the ``fix:`` line of a result that names none more precise)."""
    return next(doc.action for doc in EXIT_CODES if doc.code == code)


class SyphonError(Exception):
    """Base of every error syphon raises on purpose."""

    exit_code: ExitCode = ExitCode.FAILED

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix


class ConfigError(SyphonError):
    """A configuration file or override is missing, malformed or invalid."""

    exit_code = ExitCode.CONFIG


class SecretError(SyphonError):
    """A secret reference cannot be resolved, or resolves to something malformed."""

    exit_code = ExitCode.CONFIG


class SparkSetupError(SyphonError):
    """A Spark session cannot be built here (no Java, no PySpark, bad master)."""

    exit_code = ExitCode.NO_SPARK


class AuditStoreError(SyphonError):
    """The audit location cannot be written or read."""

    exit_code = ExitCode.AUDIT_UNAVAILABLE


class LeaseLostError(SyphonError):
    """The run's lease expired and another run may hold it now."""


class BacklogPathError(SyphonError, ValueError):
    """A string is not a backlog queue path, or a backlog path cannot be built from the parts."""
