"""What the settle does with each message of a run's plan: complete it, dead-letter it,
discard it or leave it, and why (:func:`settle_actions`); :mod:`syphon.job.settle` then
does it, queue by queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from syphon.core.naming import is_dead_letter_col
from syphon.core.schema import PLACE, SETTLE_ACTION, Detail, Outcome, Verdict, names

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: What the settle does with a message (``discard``: complete it, recorded as discarded).
COMPLETE, DEAD_LETTER, DISCARD, LEAVE = "complete", "dead_letter", "discard", "leave"

#: A message's settle action, reason and verdict.
Action = tuple[str, "str | None", str]


def settle_actions(plan_rows: DataFrame, replay_results: DataFrame | None) -> DataFrame:
    """What to do with each snapshot message (:data:`syphon.core.schema.SETTLE_ACTION`):
    ``complete`` what was replayed (an outcome ``sent`` in ``replay_results``),
    duplicated, expired or a ping; ``dead_letter`` what is invalid or a conflict, with
    the verdict's reason; ``discard`` what the operator discards, with their reason (the
    plan row's detail); ``leave`` everything else (an unselected message with the
    reason ``not_selected``, which its settle row's detail carries). In a dead-letter
    queue only what was sent or discarded is removed; the rest is left with its
    verdict's reason."""
    from pyspark.sql import functions as F

    plan = plan_rows.select(*PLACE, "verdict", "reason", "detail")
    if replay_results is not None:
        sent = (
            replay_results.where(F.col("outcome") == Outcome.SENT)
            .select(*PLACE, F.lit(True).alias("_sent"))
            .distinct()
        )
        plan = plan.join(sent, list(PLACE), "left")
    else:
        plan = plan.withColumn("_sent", F.lit(None).cast("boolean"))
    verdict = F.col("verdict")
    replayed = (verdict == Verdict.REPLAY) & F.coalesce(F.col("_sent"), F.lit(False))
    # a dead-letter queue's message is removed only once sent: it cannot be dead-lettered
    # again, and nothing else may remove the only copy of a message that failed
    dead_letter_queue = is_dead_letter_col(F.col("backlog_queue"))
    action = (
        F.when(verdict == Verdict.DISCARDED, F.lit(DISCARD))
        .when(dead_letter_queue & replayed, F.lit(COMPLETE))
        .when(dead_letter_queue, F.lit(LEAVE))
        .when(verdict.isin(*Verdict.COMPLETED_AS_IS), F.lit(COMPLETE))
        .when(verdict.isin(*Verdict.DEAD_LETTERED), F.lit(DEAD_LETTER))
        .when(replayed, F.lit(COMPLETE))
        .otherwise(F.lit(LEAVE))
    )
    reason = (
        # the operator's reason
        F.when(verdict == Verdict.DISCARDED, F.col("detail"))
        # why a dead letter stays where it is: its verdict's reason (or the verdict)
        .when(
            dead_letter_queue & ~replayed & (verdict != Verdict.REPLAY),
            F.coalesce(F.col("reason"), verdict),
        )
        .when(verdict.isin(*Verdict.DEAD_LETTERED), F.coalesce(F.col("reason"), verdict))
        # left for a later run on purpose: its settle row says so (not work left over)
        .when(verdict == Verdict.UNSELECTED, F.lit(Detail.NOT_SELECTED))
    )
    return plan.select(
        *PLACE, action.alias("action"), reason.alias("reason"), verdict.alias("verdict")
    ).select(*names(SETTLE_ACTION))
