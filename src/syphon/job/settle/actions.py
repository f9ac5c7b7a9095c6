"""What the settle does with each message of a run's plan: complete it, dead-letter it,
discard it or leave it, and why (:func:`settle_actions`); :mod:`syphon.job.settle.passes` then
does it, queue by queue.

The actions are worked out in the driver, from the wave's plan rows it holds already
(:func:`syphon.job.plan.facts.plan_rows`) and the places the replay sent (its results are in
the driver's memory too): a join in Spark was a job of its own for every wave."""

from __future__ import annotations

from collections.abc import Set
from typing import TYPE_CHECKING

from syphon.core.naming import is_dead_letter_path
from syphon.core.schema import PLACE, Detail, Outcome, Verdict

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

#: What the settle does with a message (``discard``: complete it, recorded as discarded).
COMPLETE, DEAD_LETTER, DISCARD, LEAVE = "complete", "dead_letter", "discard", "leave"

#: A message's settle action, reason and verdict.
Action = tuple[str, "str | None", str]

#: A message's place in its queue: (backlog queue, sequence number).
Place = tuple[str, int]

#: The plan's columns the actions read (those of :data:`syphon.core.schema.SETTLE_ACTION`'s
#: rows, and ``detail``: the operator's reason for a discard).
SETTLE_FACTS = (*PLACE, "verdict", "reason", "detail")


def settle_actions(plan: pa.Table, sent: Set[Place]) -> list[tuple[object, ...]]:
    """What to do with each planned message (rows of
    :data:`syphon.core.schema.SETTLE_ACTION`, in the plan's order): ``complete`` what was
    replayed (its place in ``sent``), duplicated, expired or a ping; ``dead_letter`` what
    is invalid or a conflict, with the verdict's reason; ``discard`` what the operator
    discards, with their reason (the plan row's detail); ``leave`` everything else (an
    unselected message with the reason ``not_selected``, which its settle row's detail
    carries). In a dead-letter queue only what was sent or discarded is removed; the rest
    is left with its verdict's reason.

    Args:
        plan: the plan's rows, with at least :data:`SETTLE_FACTS`.
        sent: the places of every message the run replayed (outcome ``sent``).
    """
    columns = [plan.column(c).to_pylist() for c in SETTLE_FACTS]
    return [
        (queue, number, *action(queue, number, verdict, reason, detail, sent))
        for queue, number, verdict, reason, detail in zip(*columns, strict=True)
    ]


def action(
    queue: str | None,
    number: int | None,
    verdict: str | None,
    reason: str | None,
    detail: str | None,
    sent: Set[Place],
) -> tuple[str, str | None, str | None]:
    """One message's (action, reason, verdict): see :func:`settle_actions`."""
    replayed = verdict == Verdict.REPLAY and (queue, number) in sent
    # a dead-letter queue's message is removed only once sent: it cannot be dead-lettered
    # again, and nothing else may remove the only copy of a message that failed
    dead_letter_queue = is_dead_letter_path(queue)
    if verdict == Verdict.DISCARDED:
        return DISCARD, detail, verdict  # the operator's reason
    if dead_letter_queue:
        if replayed:
            return COMPLETE, None, verdict
        # why a dead letter stays where it is: its verdict's reason (or the verdict)
        stays = _or_verdict(reason, verdict) if verdict not in (None, Verdict.REPLAY) else None
        return LEAVE, stays, verdict
    if verdict in Verdict.COMPLETED_AS_IS:
        return COMPLETE, None, verdict
    if verdict in Verdict.DEAD_LETTERED:
        return DEAD_LETTER, _or_verdict(reason, verdict), verdict
    if replayed:
        return COMPLETE, None, verdict
    # left for a later run on purpose: its settle row says so (not work left over)
    return LEAVE, Detail.NOT_SELECTED if verdict == Verdict.UNSELECTED else None, verdict


def _or_verdict(reason: str | None, verdict: str | None) -> str | None:
    return reason if reason is not None else verdict


def sent_places(results: pa.Table) -> set[Place]:
    """The places of a replay's results (``backlog_queue``, ``sequence_number``,
    ``outcome``) whose outcome is ``sent``."""
    queues, numbers, outcomes = (results.column(c).to_pylist() for c in (*PLACE, "outcome"))
    return {
        (queue, number)
        for queue, number, outcome in zip(queues, numbers, outcomes, strict=True)
        if outcome == Outcome.SENT
    }


def earlier_sent(earlier: DataFrame) -> set[Place]:
    """:func:`sent_places` of an earlier attempt's replay rows (a resumed run's, read from
    the audit by Spark)."""
    return sent_places(earlier.select(*PLACE, "outcome").toArrow())
