"""Reconcile: pure DataFrame transforms from a snapshot to verdicts and replay order.

:func:`wave_messages` restores a wave's snapshot (:mod:`syphon.job.restore`) and
repairs it; :func:`reconcile_snapshot` applies the operator's selection
(:mod:`syphon.job.selection`) to those messages, gives every row its verdict
(:mod:`syphon.job.plan.classify`, where the verdicts and their precedence are), applies a
discard (:func:`with_discards`), orders each replay group (:func:`order_groups`) and
plans the batches (:mod:`syphon.job.plan.batches`).

A run that repairs (:mod:`syphon.job.repair`) computes each message's changes before the
classify, which judges the repaired message; a ``replay`` row's ``repaired`` names what
the repair changes in it (:func:`with_repaired`).

A run that discards (:mod:`syphon.core.discard`) turns what it takes into
``discarded``: the duplicates (keeping their reason), or every selected message (reason
``operator_selected``); the operator's reason is the row's ``detail``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from syphon.core.discard import DUPLICATES, OPERATOR_SELECTED, Discard
from syphon.core.repair import Repair
from syphon.core.schema import (
    DESTINATION_KEY,
    Verdict,
)
from syphon.core.selection import Selection
from syphon.job.context import keep
from syphon.job.plan.batches import plan_batches
from syphon.job.plan.classify import ORDER_COLUMNS, REPAIR_INVALID, Against, classify
from syphon.job.repair import REPAIR, with_repair
from syphon.job.restore import Redrive, restore
from syphon.job.selection import select

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def with_discards(classified: DataFrame, discard: Discard | None) -> DataFrame:
    """Classified rows with the verdict ``discarded`` for what ``discard`` takes, and
    their ``detail``: the operator's reason on a discarded row, else the classify's."""
    from pyspark.sql import functions as F

    if "detail" not in classified.columns:
        classified = classified.withColumn("detail", F.lit(None).cast("string"))
    detail = F.col("detail")
    if discard is None:
        return classified
    verdict = F.col("verdict")
    if discard.what == DUPLICATES:
        taken = verdict == Verdict.DUPLICATE
        reason = F.col("reason")  # why it is a duplicate
    else:
        taken = verdict != Verdict.UNSELECTED
        reason = F.lit(OPERATOR_SELECTED)
    return (
        classified.withColumn("_discard", taken)
        .withColumn(
            "verdict", F.when(F.col("_discard"), F.lit(Verdict.DISCARDED)).otherwise(verdict)
        )
        .withColumn("reason", F.when(F.col("_discard"), reason).otherwise(F.col("reason")))
        .withColumn("detail", F.when(F.col("_discard"), F.lit(discard.reason)).otherwise(detail))
        .drop("_discard")
    )


def order_groups(classified: DataFrame) -> DataFrame:
    """Adds the replay order within (destination, partition key), the group's size,
    whether it is spread over several backlog queues, and its time span (seconds).

    Keyless messages of a destination form one group (their order is kept, though the
    service does not promise it to receivers). Windows over the whole frame, with the
    verdict in the partition: no join back.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    replay = F.col("verdict") == Verdict.REPLAY
    group = [*DESTINATION_KEY, "partition_key_effective", "_in_replay"]
    ordered = Window.partitionBy(*group).orderBy(*[F.col(c) for c in ORDER_COLUMNS])
    whole = Window.partitionBy(*group)

    def only_replay(value: Column) -> Column:
        return F.when(F.col("_in_replay"), value)

    span = F.max("original_enqueued_time").over(whole).cast("double") - F.min(
        "original_enqueued_time"
    ).over(whole).cast("double")
    return (
        classified.withColumn("_in_replay", replay)
        .withColumns(
            {
                "replay_order": only_replay(F.row_number().over(ordered)),
                "group_size": only_replay(F.count(F.lit(1)).over(whole)),
                "group_spread": only_replay(
                    F.min("backlog_queue").over(whole) != F.max("backlog_queue").over(whole)
                ),
                "group_span_seconds": only_replay(span),
            }
        )
        .drop("_in_replay")
    )


def wave_messages(snapshot: DataFrame, redrive: Redrive | None, repair: Repair | None) -> DataFrame:
    """A snapshot's messages as a run takes them, bytes included: restored
    (:func:`restore`, dead letters with ``redrive``) and with what the ``repair`` does to
    each (:func:`syphon.job.repair.with_repair`). Defined once per wave: the reconcile
    judges them, the replay sends them."""
    return with_repair(restore(snapshot, redrive), repair)


def reconcile_snapshot(
    messages: DataFrame,
    against: Against,
    selection: Selection | None = None,
    discard: Discard | None = None,
    on_disk: bool = False,
) -> DataFrame:
    """The whole reconcile of a wave's :func:`wave_messages` (its frames kept ``on_disk``
    in a run in waves, see :func:`syphon.job.context.keep`): the ``selection``
    (:mod:`syphon.job.selection`; a message it leaves out is ``unselected``),
    :func:`classify` ``against`` the destinations and earlier replays, the ``discard``
    (:func:`with_discards`), :func:`order_groups`, :func:`plan_batches` and
    :func:`with_repaired`. The messages' bytes are dropped by the classify once
    measured, the property maps after it, so the shuffles carry the audit's columns
    only."""
    selected = select(messages, selection).drop("application_properties")
    classified = classify(selected, against).drop("original_application_properties")
    classified = with_discards(classified, discard)
    # materialized once: the batch plan reads it twice (its groups, and the join back)
    ordered = keep(order_groups(classified), on_disk)
    return with_repaired(plan_batches(ordered))


#: What a repair changed in each planned row (``set NAME`` / ``unset NAME``), kept
#: beside the audit's columns for the plan's summary.
REPAIRED_NAMES = "_repaired_names"


def with_repaired(planned: DataFrame) -> DataFrame:
    """Planned rows with ``repaired``: on a ``replay`` row, what the repair changes in
    the message (names, never values; null: nothing), and :data:`REPAIRED_NAMES`; on a
    ``repair_invalid`` row, ``detail`` says why. Without a repair ``repaired`` is null."""
    from pyspark.sql import functions as F

    if REPAIR not in planned.columns:
        return planned.withColumns(
            {
                "repaired": F.lit(None).cast("string"),
                REPAIRED_NAMES: F.lit(None).cast("array<string>"),
            }
        )
    names = F.when(
        (F.col("verdict") == Verdict.REPLAY) & (F.size(f"{REPAIR}.names") > 0),
        F.col(f"{REPAIR}.names"),
    )
    why = F.when(F.col("reason") == REPAIR_INVALID, F.col(f"{REPAIR}.error"))
    return planned.withColumns(
        {
            REPAIRED_NAMES: names,
            "repaired": F.array_join(names, "; "),
            "detail": F.coalesce(F.col("detail"), why),
        }
    ).drop(REPAIR)
