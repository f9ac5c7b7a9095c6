"""Which messages of a source a run takes: the operator's selection.

A selection narrows a run to some of what its snapshot holds — by destination, by the
original enqueue time, by MessageId, by dead-letter reason, or by any Spark SQL predicate
over the snapshot's columns — and is judged by Spark on the snapshot, never by the
service. What it leaves out gets the verdict ``unselected`` (reason ``not_selected``):
recorded in the audit like every other message, never sent, never settled; it stays
where it is for a later run. ``syphon plan`` with a selection is the dry run of
``syphon run`` with the same one.

Order: a key's messages are replayed in their order among those selected. A selection
that takes later messages of a key and leaves earlier ones sends those ahead of the
ones left; select whole keys (a destination, a time window that covers the key's
backlog) where the order matters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from syphon.core.errors import ExitCode, SyphonError
from syphon.core.schema import Detail

#: The reason an unselected message is recorded with (and its settle detail).
NOT_SELECTED = Detail.NOT_SELECTED


class SelectionError(SyphonError):
    """A selection option is malformed or its predicate does not apply to the snapshot
    (found before anything is peeked, sent or settled)."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str) -> None:
        # the fix line says what is wrong: a failed run's record keeps only the class
        super().__init__(message, fix=message)


@dataclass(frozen=True)
class Selection:
    """The messages a run takes (every condition given must hold; none given: all).

    Attributes:
        destinations: entity paths the messages are for (case as the service keeps it,
            compared without case, as the service does).
        message_ids: MessageIds to take.
        enqueued_from: the earliest original enqueue time taken (inclusive, UTC).
        enqueued_until: the latest original enqueue time taken (exclusive, UTC).
        dead_letter_reasons: dead-lettered messages with one of these reasons (the
            service's ``DeadLetterReason``, compared exactly); a message that was not
            dead-lettered has none and is left.
        where: a Spark SQL predicate over the snapshot's columns (see the README's
            "Select what a run takes"); a message for which it is not true is left.
    """

    destinations: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    enqueued_from: datetime | None = None
    enqueued_until: datetime | None = None
    dead_letter_reasons: tuple[str, ...] = ()
    where: str | None = None

    def __post_init__(self) -> None:
        for name in ("enqueued_from", "enqueued_until"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=timezone.utc))
        if (
            self.enqueued_from is not None
            and self.enqueued_until is not None
            and self.enqueued_from >= self.enqueued_until
        ):
            raise SelectionError(
                "the enqueue window is empty: --enqueued-from must be before --enqueued-until"
            )
        if self.where is not None and not self.where.strip():
            raise SelectionError("--where is empty")

    @property
    def everything(self) -> bool:
        """Whether it takes every message (no condition given)."""
        return self == Selection()

    def describe(self) -> str:
        """One line for reports and logs (MessageIds counted, never listed: a list of
        thousands helps nobody on a terminal; the audit has each message's verdict)."""
        if self.everything:
            return "every message"
        parts = []
        if self.destinations:
            parts.append("destination " + " or ".join(self.destinations))
        if self.message_ids:
            parts.append(f"{len(self.message_ids)} MessageId(s)")
        if self.enqueued_from is not None:
            parts.append(f"enqueued from {self.enqueued_from.isoformat()}")
        if self.enqueued_until is not None:
            parts.append(f"enqueued until {self.enqueued_until.isoformat()}")
        if self.dead_letter_reasons:
            parts.append("dead-letter reason " + " or ".join(self.dead_letter_reasons))
        if self.where is not None:
            parts.append(f"where {self.where}")
        return "; ".join(parts)


def selection_from_text(
    *,
    destinations: Iterable[str] = (),
    message_ids: Iterable[str] = (),
    enqueued_from: str | None = None,
    enqueued_until: str | None = None,
    dead_letter_reasons: Iterable[str] = (),
    where: str | None = None,
    spelled: Callable[[str], str] = lambda field: "--" + field.replace("_", "-"),
) -> Selection | None:
    """A selection from what an operator typed (the command line's options, the
    notebook's widgets): items stripped and empty ones dropped, times parsed (no zone:
    UTC; an empty one: none). None when it selects every message.

    Raises:
        SelectionError: a malformed time, an empty enqueue window or a blank ``where``,
            naming the option as ``spelled`` spells the field.
    """

    def items(values: Iterable[str]) -> tuple[str, ...]:
        return tuple(v.strip() for v in values if v.strip())

    def time(text: str | None, field: str) -> datetime | None:
        return parse_time(text, spelled(field)) if text and text.strip() else None

    if where is not None and not where.strip():
        raise SelectionError(f"{spelled('where')} is empty")
    selection = Selection(
        destinations=items(destinations),
        message_ids=items(message_ids),
        enqueued_from=time(enqueued_from, "enqueued_from"),
        enqueued_until=time(enqueued_until, "enqueued_until"),
        dead_letter_reasons=items(dead_letter_reasons),
        where=None if where is None else where.strip(),
    )
    return None if selection.everything else selection


def parse_time(text: str, option: str) -> datetime:
    """An ISO 8601 time from the command line (no zone: UTC).

    Raises:
        SelectionError: not an ISO 8601 date or time.
    """
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SelectionError(
            f"{option}: {text!r} is not an ISO 8601 time (e.g. 2026-11-24T08:00:00Z)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
