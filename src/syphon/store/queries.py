"""The audit's shape and the questions runs ask of it: pure DataFrame transforms.

Both audit backends read their tables as DataFrames and answer with these functions, so
the answers are the same whichever engine wrote the rows. Tested on hand-made rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from syphon.core.ledger import RunRecord
from syphon.core.schema import (
    AUDIT,
    AUDIT_FROM_PLANNED,
    MESSAGE_KEY,
    PLACE,
    REPLAYED,
    Outcome,
    Stage,
    Status,
    Verdict,
    names,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def _typed(column: str) -> str:
    return next(f.type for f in AUDIT if f.name == column)


def _name(column: str) -> str:
    """A column's name in Spark SQL (``primary`` is a keyword)."""
    return "`" + column.replace("`", "``") + "`"


def _text(value: str | None) -> str:
    """A Spark SQL string literal (its parser reads backslash escapes), NULL for None."""
    if value is None:
        return "NULL"
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _time(value: datetime) -> str:
    """A Spark SQL timestamp literal of the same instant (a naive time: local)."""
    since = value.astimezone(timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return f"timestamp_micros({since // timedelta(microseconds=1)})"


def _audit_columns(values: dict[str, str]) -> list[str]:
    """The audit's columns (:data:`AUDIT`) as SQL for ``selectExpr``, each cast to its
    type: the expression ``values`` gives, else the column of that name. One call to
    the JVM for the whole projection, where a Column apiece cost three."""
    return [f"CAST({values.get(c, _name(c))} AS {_typed(c)}) AS {_name(c)}" for c in names(AUDIT)]


def plan_audit_rows(
    planned: DataFrame,
    run_id: str,
    recorded_at: datetime,
    job_run_id: str | None = None,
    keep: Sequence[str] = (),
) -> DataFrame:
    """The audit rows (:data:`syphon.core.schema.AUDIT`) of a planned snapshot (of the
    platform's job run ``job_run_id``, None: none), and after them the planned columns
    ``keep`` names, as they are."""
    run = {
        "run_id": _text(run_id),
        "job_run_id": _text(job_run_id),
        "stage": _text(Stage.PLAN),
        "recorded_at": _time(recorded_at),
        "outcome": _text(Outcome.PLANNED),
        # a discarded message's plan row keeps the operator's reason
        "detail": _name("detail") if "detail" in planned.columns else "NULL",
    }
    renamed = {c: _name(source) for c, source in AUDIT_FROM_PLANNED.items()}
    return planned.selectExpr(*_audit_columns({**renamed, **run}), *map(_name, keep))


def outcome_audit_rows(
    results: DataFrame, planned: DataFrame, run_id: str, stage: str, recorded_at: datetime
) -> DataFrame:
    """Audit rows for a stage's results (``backlog_queue``, ``sequence_number``,
    ``outcome``, ``detail``): the message's keys come from its plan row (``planned``, the
    run's plan rows from the audit); a message the plan never saw keeps only its place.

    Raises:
        ValueError: ``stage`` is not the replay or the settle.
    """
    if stage not in (Stage.REPLAY, Stage.SETTLE):
        raise ValueError(f"not an outcome stage: {stage}")
    keys = planned.drop("run_id", "stage", "recorded_at", "outcome", "detail")
    joined = results.select(*PLACE, "outcome", "detail").join(keys, list(PLACE), "left")
    run = {"run_id": _text(run_id), "stage": _text(stage), "recorded_at": _time(recorded_at)}
    # a plan row of a table older than a column: null (a resumed run reads it back)
    have = set(joined.columns)
    missing = {c: "NULL" for c in names(AUDIT) if c not in have}
    return joined.selectExpr(*_audit_columns({**missing, **run}))


def run_rows(audit: DataFrame, run_id: str, stage: str | None = None) -> DataFrame:
    """One run's audit rows (of one stage, when given)."""
    from pyspark.sql import functions as F

    wanted = F.col("run_id") == run_id
    if stage is not None:
        wanted = wanted & (F.col("stage") == stage)
    return audit.where(wanted)


def replayed_messages(audit: DataFrame) -> DataFrame:
    """What earlier runs' replays delivered (:data:`syphon.core.schema.REPLAYED`): the
    replay rows with an :attr:`Outcome.REPLAYED` outcome and a MessageId."""
    from pyspark.sql import functions as F

    return audit.where(
        (F.col("stage") == Stage.REPLAY)
        & F.col("outcome").isin(*Outcome.REPLAYED)
        & F.col("message_id").isNotNull()
    ).select(*names(REPLAYED))


def interrupted_runs(records: Iterable[RunRecord]) -> list[str]:
    """Runs whose last ``replaying`` has no ``replayed`` after it: a crash cut their
    sends off (and no later attempt of the run committed its own). ``records`` in the
    order they were recorded, as the stores return them: a run of several waves records
    both once per wave, and one wave's commit does not cover a later wave's sends."""
    last: dict[str, str] = {}
    for r in records:
        if r.status in (Status.REPLAYING, Status.REPLAYED):
            last[r.run_id] = r.status
    return sorted(run for run, status in last.items() if status == Status.REPLAYING)


def in_doubt_messages(audit: DataFrame, interrupted: list[str]) -> DataFrame:
    """Backlog messages whose earlier send is unknown (:data:`MESSAGE_KEY` columns):
    replay rows recorded ``in_doubt``, and the ``replay``-verdict plan rows of the
    ``interrupted`` runs that have no replay outcome."""
    from pyspark.sql import functions as F

    doubt = audit.where(
        (F.col("stage") == Stage.REPLAY) & (F.col("outcome") == Outcome.IN_DOUBT)
    ).select(*names(MESSAGE_KEY))
    if not interrupted:
        return doubt
    planned = audit.where(
        (F.col("stage") == Stage.PLAN)
        & (F.col("verdict") == Verdict.REPLAY)
        & F.col("run_id").isin(*interrupted)
    ).select("run_id", *PLACE)
    recorded = audit.where(
        (F.col("stage") == Stage.REPLAY) & F.col("run_id").isin(*interrupted)
    ).select("run_id", *PLACE)
    lost = planned.join(recorded, ["run_id", *PLACE], "left_anti")
    return doubt.unionByName(lost.drop("run_id"))


#: The verdicts that do not keep a dead letter waiting for the operator: a message to
#: send (a failed send is sent by the next run), one the selection left out, and one
#: that waits for its destination's duplicate detection window (a later run sends it).
NOT_WAITING = (Verdict.REPLAY, Verdict.UNSELECTED, Verdict.TOO_SOON)


def _waiting(rows: DataFrame) -> DataFrame:
    """The rows whose verdict keeps a dead letter waiting for the operator."""
    from pyspark.sql import functions as F

    return rows.where(~F.col("verdict").isin(*NOT_WAITING))


def waiting_before(audit: DataFrame, waiting: DataFrame, run_id: str) -> DataFrame:
    """The messages of ``waiting`` (:data:`PLACE` columns and ``verdict``) that an earlier
    run's settle left where they are with the same waiting verdict: the operator was told
    then and has let them stay. One an earlier run left for another reason (unselected,
    a failed send) was never reported as waiting, and is not kept."""
    from pyspark.sql import functions as F

    earlier = _waiting(
        audit.where(
            (F.col("stage") == Stage.SETTLE)
            & (F.col("outcome") == Outcome.LEFT)
            & (F.col("run_id") != run_id)
        )
    ).select(*PLACE, "verdict")
    return waiting.join(earlier, [*PLACE, "verdict"], "left_semi")


def starts_a_spread_group() -> Column:
    """True on the first message (``replay_order`` 1) of a replay group spread over
    several backlog queues: counting it counts the spread groups."""
    from pyspark.sql import functions as F

    return (
        (F.col("verdict") == Verdict.REPLAY) & F.col("group_spread") & (F.col("replay_order") == 1)
    )


def verdicts_per_destination(
    plan: DataFrame, *by: str, time: str = "backlog_enqueued_time"
) -> DataFrame:
    """Per primary, destination and verdict (and the columns ``by`` names, e.g.
    ``reason``) of plan rows: ``messages``; ``spread_groups``, the replay groups spread
    over several backlog queues that start there; the ``first`` and ``last`` value of
    the column ``time`` (the audit's rows know when a message was parked; a plan being
    made, when it was first enqueued). The one aggregate the plan's summary, the run
    report (through :func:`syphon.job.run.report.by_source_entity`) and the notebook read."""
    from pyspark.sql import functions as F

    return plan.groupBy("primary", "destination", "verdict", *by).agg(
        F.count(F.lit(1)).alias("messages"),
        F.count(F.when(starts_a_spread_group(), 1)).alias("spread_groups"),
        F.min(time).alias("first"),
        F.max(time).alias("last"),
    )


def spread_groups(plan: DataFrame) -> DataFrame:
    """The replay groups (primary, destination, partition key) of a run's plan rows whose
    messages sit in several backlog queues, the most spread first: ``messages``,
    ``backlog_queues`` and ``span_seconds``."""
    from pyspark.sql import functions as F

    return (
        plan.where((F.col("verdict") == Verdict.REPLAY) & F.col("group_spread"))
        .groupBy("primary", "destination", "partition_key_effective")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.countDistinct("backlog_queue").alias("backlog_queues"),
            F.max("group_span_seconds").alias("span_seconds"),
        )
        .orderBy(
            F.desc("backlog_queues"),
            F.desc("messages"),
            "primary",
            "destination",
            "partition_key_effective",
        )
    )


def _place(only: Column | None = None) -> list[Column]:
    """A row's ``primary`` and ``destination``, an unknown one ``?`` and empty (null on
    the rows ``only`` leaves out, when given)."""
    from pyspark.sql import functions as F

    primary = F.coalesce(F.col("primary"), F.lit("?"))
    destination = F.coalesce(F.col("destination"), F.lit(""))
    if only is not None:
        primary, destination = F.when(only, primary), F.when(only, destination)
    return [primary.alias("primary"), destination.alias("destination")]


def outage_timeline(plan: DataFrame, start: float, width: float, buckets: int) -> DataFrame:
    """Messages per (primary, destination) and time slice of plan rows: ``bucket`` counts
    slices of ``width`` seconds from ``start`` (epoch seconds) by the backlog enqueue
    time, the last slice holding the rest."""
    from pyspark.sql import functions as F

    timed = plan.where(F.col("backlog_enqueued_time").isNotNull())
    seconds = F.col("backlog_enqueued_time").cast("double")
    bucket = F.least(F.floor((seconds - F.lit(start)) / F.lit(width)), F.lit(buckets - 1))
    return (
        timed.select(*_place(), bucket.cast("long").alias("bucket"))
        .groupBy("primary", "destination", "bucket")
        .count()
    )


#: What :func:`by_source_entity` counts by, besides the place and the verdict.
_FIGURES = ("entity", "stage", "outcome", "detail", "source", "why")


def by_source_entity(rows: DataFrame) -> DataFrame:
    """Per source entity (the queue or subscription read; a row without a source column:
    its backlog queue), stage, outcome, detail, source and why (``why``: a replay row's
    detail unless sent, a settle row's detail when left, a plan row's verdict and reason
    unless it is to be replayed), and for plan rows their place (``primary``, ``destination``;
    an unknown one ``?`` and empty) and ``verdict`` (null on other rows): ``count``
    messages, ``spread_groups`` and the ``first`` and ``last`` backlog enqueue time, as
    :func:`verdicts_per_destination` counts them. One aggregate, collected once, serves
    the report's per-entity table, what is left for the next run, the run's sources and
    the verdicts per destination (:mod:`syphon.store.figures`; its SQL twin answers on
    delta-rs's engine)."""
    from pyspark.sql import functions as F

    entity = F.coalesce(F.col("source_entity"), F.col("backlog_queue"), F.lit("?"))
    why = (
        F.when(
            (F.col("stage") == Stage.REPLAY) & (F.col("outcome") != Outcome.SENT),
            F.concat_ws(": ", F.col("outcome"), F.col("detail")),
        )
        .when(
            (F.col("stage") == Stage.SETTLE) & (F.col("outcome") == Outcome.LEFT),
            F.concat_ws(": ", F.lit("left"), F.col("detail")),
        )
        .when(
            (F.col("stage") == Stage.PLAN) & (F.col("verdict") != Verdict.REPLAY),
            F.concat_ws(": ", F.col("verdict"), F.col("reason")),
        )
    )
    planned = F.col("stage") == Stage.PLAN
    figures = rows.select(
        entity.alias("entity"),
        "stage",
        "outcome",
        "detail",
        "source",
        why.alias("why"),
        *_place(only=planned),
        F.when(planned, F.col("verdict")).alias("verdict"),
        "group_spread",
        "replay_order",
        F.when(planned, F.col("backlog_enqueued_time")).alias("_time"),
    )
    return verdicts_per_destination(figures, *_FIGURES, time="_time").withColumnRenamed(
        "messages", "count"
    )
