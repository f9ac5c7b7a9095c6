"""What the settle does with each planned message, worked out in the driver from the plan's
facts and the places the replay sent (syphon.job.settle.actions)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from syphon.job.settle.actions import SETTLE_FACTS, sent_places, settle_actions

Q0 = "contoso/x-servicebus-transfer/0"
DLQ = "orders/$DeadLetterQueue"
TDLQ = "orders/$Transfer/$DeadLetterQueue"


def facts(*rows: tuple[Any, ...]) -> pa.Table:
    """Plan facts: (queue, sequence number, verdict, reason, detail) per row."""
    columns = list(zip(*rows, strict=True)) if rows else [[]] * len(SETTLE_FACTS)
    types = [pa.string(), pa.int64(), pa.string(), pa.string(), pa.string()]
    return pa.table(
        {
            name: pa.array(list(values), type=kind)
            for name, values, kind in zip(SETTLE_FACTS, columns, types, strict=True)
        }
    )


def replayed(*outcomes: tuple[str, int, str | None]) -> pa.Table:
    queues, numbers, outcome = zip(*outcomes, strict=True) if outcomes else ((), (), ())
    return pa.table(
        {
            "backlog_queue": pa.array(list(queues), pa.string()),
            "sequence_number": pa.array(list(numbers), pa.int64()),
            "outcome": pa.array(list(outcome), pa.string()),
            "detail": pa.array([None] * len(queues), pa.string()),
        }
    )


def test_settle_completes_what_was_replayed_or_needs_nothing_and_dead_letters_the_bad() -> None:
    plan = facts(
        (Q0, 1, "replay", None, None),
        (Q0, 2, "replay", None, None),
        (Q0, 3, "duplicate", "already_replayed", None),
        (Q0, 4, "expired", None, None),
        (Q0, 5, "ping", None, None),
        (Q0, 6, "invalid", "path_missing", None),
        (Q0, 7, "conflict", "message_id_reused_in_snapshot", None),
        (Q0, 8, "invalid", None, None),
        (Q0, 9, None, None, None),
        (Q0, 10, "replay", None, None),
        (Q0, 11, "unselected", "not_selected", None),
    )
    results = replayed(
        (Q0, 1, "sent"), (Q0, 1, "sent"), (Q0, 2, "failed"), (Q0, 8, "sent"), (Q0, 10, "skipped")
    )
    sent = sent_places(results)
    assert sent == {(Q0, 1), (Q0, 8)}
    assert settle_actions(plan, sent) == [
        (Q0, 1, "complete", None, "replay"),  # sent (twice: one action)
        (Q0, 2, "leave", None, "replay"),  # its send failed
        (Q0, 3, "complete", None, "duplicate"),
        (Q0, 4, "complete", None, "expired"),
        (Q0, 5, "complete", None, "ping"),
        (Q0, 6, "dead_letter", "path_missing", "invalid"),
        (Q0, 7, "dead_letter", "message_id_reused_in_snapshot", "conflict"),
        (Q0, 8, "dead_letter", "invalid", "invalid"),  # no reason: the verdict is the reason
        (Q0, 9, "leave", None, None),  # a null verdict is never settled
        (Q0, 10, "leave", None, "replay"),  # skipped: not sent
        (Q0, 11, "leave", "not_selected", "unselected"),  # left for a later run on purpose
    ]
    unsent = settle_actions(plan, set())
    assert [a for _, s, a, _, _ in unsent if s in (1, 2)] == ["leave", "leave"]


def test_a_dead_letter_is_removed_only_once_sent_or_discarded() -> None:
    plan = facts(
        (DLQ, 1, "replay", None, None),
        (DLQ, 2, "replay", None, None),
        (DLQ, 3, "duplicate", "already_replayed", None),
        (TDLQ, 4, "invalid", None, None),
        (DLQ, 5, "discarded", "operator_selected", "poison"),
        (Q0, 6, "discarded", "already_replayed", "copies"),
        (DLQ, 7, "unselected", "not_selected", None),
        (DLQ, 8, None, None, None),
    )
    assert settle_actions(plan, {(DLQ, 1)}) == [
        (DLQ, 1, "complete", None, "replay"),
        (DLQ, 2, "leave", None, "replay"),  # not sent: it stays, and says nothing more
        (DLQ, 3, "leave", "already_replayed", "duplicate"),  # a dead letter stays
        (TDLQ, 4, "leave", "invalid", "invalid"),  # with its verdict's reason (or the verdict)
        (DLQ, 5, "discard", "poison", "discarded"),  # the operator's reason, in any queue
        (Q0, 6, "discard", "copies", "discarded"),
        (DLQ, 7, "leave", "not_selected", "unselected"),
        (DLQ, 8, "leave", None, None),
    ]


def test_a_place_sent_in_another_queue_is_not_this_one() -> None:
    plan = facts((Q0, 1, "replay", None, None), (DLQ, 1, "replay", None, None))
    assert [a for _, _, a, _, _ in settle_actions(plan, {(DLQ, 1)})] == ["leave", "complete"]


def test_nothing_planned_is_nothing_to_do() -> None:
    assert settle_actions(facts(), {(Q0, 1)}) == []
    assert sent_places(replayed()) == set()
