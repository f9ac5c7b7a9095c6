"""What an operator removes from a source without sending it: the discard.

Some messages should never go home: exact copies of messages already delivered (a
dead-letter queue that holds a message twice, or one dead-lettered again after its
re-drive), or poison messages an operator decides to drop. A run that discards gives
each such message the verdict ``discarded`` (its reason says why it qualified: the
duplicate's ``already_replayed`` or ``duplicate_in_snapshot``, or ``operator_selected``;
its plan row's detail holds the operator's reason), sends none of them, and once their
plan is in the audit completes them in their queue: the settle row says ``discarded``,
with the operator's reason, under the run's id. ``syphon plan`` with the same discard is
the dry run.

Two kinds:

- ``duplicates`` (``--discard-duplicates``): every message the reconcile judges a
  ``duplicate`` — a copy of one this run sends, or of one an earlier run delivered. A
  copy of one this run sends is completed even where the send fails (the other copy
  stays for the next run), as a backlog's duplicates always are.
- ``selected`` (``syphon discard``): every message the run's selection takes, whatever
  its verdict (a selection is required: a discard never takes a whole source by
  default).

The reason is the operator's words, kept in the audit: it may not hold what looks like a
secret, and is at most :data:`REASON_LIMIT` characters.
"""

from __future__ import annotations

from dataclasses import dataclass

from syphon.core.configreader import looks_like_a_secret
from syphon.core.errors import ExitCode, SyphonError

#: What a discard takes.
DUPLICATES = "duplicates"
SELECTED = "selected"

#: The reason of a message discarded because the operator's selection took it.
OPERATOR_SELECTED = "operator_selected"

#: The reason recorded when ``--discard-duplicates`` is given without ``--reason``.
DEFAULT_DUPLICATES_REASON = "copy of a message already delivered"

#: The longest reason an operator may give (it is kept on every discarded row).
REASON_LIMIT = 500


class DiscardError(SyphonError):
    """A discard is malformed: no reason, a reason that looks like a secret or is too
    long, or (for ``syphon discard``) no selection."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str) -> None:
        super().__init__(message, fix=message)


@dataclass(frozen=True)
class Discard:
    """Which messages a run removes without sending, and the operator's reason.

    Attributes:
        what: :data:`DUPLICATES` or :data:`SELECTED`.
        reason: the operator's words, recorded on every discarded message's rows.
    """

    what: str
    reason: str

    def __post_init__(self) -> None:
        if self.what not in (DUPLICATES, SELECTED):
            raise ValueError(f"a discard takes duplicates or selected messages, not {self.what}")
        reason = self.reason.strip()
        if not reason:
            raise DiscardError("--reason is empty: say why these messages are discarded")
        if len(reason) > REASON_LIMIT:
            raise DiscardError(f"--reason is longer than {REASON_LIMIT} characters")
        if looks_like_a_secret(reason):
            raise DiscardError(
                "--reason looks like it holds a secret (a key, a connection string or a "
                "signature): it is kept in the audit; say why in other words"
            )
        object.__setattr__(self, "reason", reason)

    def describe(self) -> str:
        """One line for the summary and the log (the reason is the operator's own)."""
        what = "duplicates" if self.what == DUPLICATES else "the selected messages"
        return f"discard {what} (reason: {self.reason})"
