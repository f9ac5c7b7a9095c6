"""The run report's figures: a few aggregations of one run's audit rows.

Each aggregation is a DataFrame → DataFrame function (tested on hand-made rows);
:func:`gather` runs them and collects their small answers into a :class:`ReportData`,
which :mod:`syphon.app.report` draws. The figures are counts, names of destinations and
partition keys, and times — never a body, a property value or a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.ledger import RunRecord
from syphon.core.schema import Outcome, Stage, Status
from syphon.job.ledger import RunResult
from syphon.job.rows import utc
from syphon.store import queries
from syphon.store.audit import AuditStore

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Spread groups listed (the largest spread first); the count says how many there are.
SPREAD_ROWS = 50
#: Time buckets of the outage timeline.
TIMELINE_BUCKETS = 60


@dataclass
class ReportData:
    """What a report shows; ``by_destination`` and the rest are empty when the run
    recorded no audit rows (an empty run, a busy one, one that failed before its plan)."""

    run_id: str
    status: str
    detail: str | None
    fix: str | None
    generated_at: datetime
    counts: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: (primary, destination) -> verdict -> messages
    by_destination: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    #: (primary, destination) -> (first, last) original enqueue time
    windows: dict[tuple[str, str], tuple[datetime, datetime]] = field(default_factory=dict)
    #: (primary, destination, bucket start) -> messages
    timeline: dict[tuple[str, str, datetime], int] = field(default_factory=dict)
    spread_groups: int = 0
    #: the largest spread groups: primary, destination, partition_key_effective, messages,
    #: backlog_queues, span_seconds
    spread: list[dict[str, Any]] = field(default_factory=list)
    #: what the run did not finish: stage, outcome, detail, count
    left: list[dict[str, Any]] = field(default_factory=list)
    #: the run's source
    source: str | None = None
    #: source entity -> what happened to its messages (``planned``, ``sent``, and the
    #: settle's ``completed``, ``dead_lettered``, ``left``) -> messages
    by_entity: dict[str, dict[str, int]] = field(default_factory=dict)
    #: source entity -> why its messages were not sent or not removed -> messages
    entity_reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    #: a run of several waves: each wave's number, watermark, messages planned, messages
    #: home when it was replayed (the run's, so far) and seconds from the run's start
    waves: list[WaveFigures] = field(default_factory=list)
    #: the run's repair in the operator's words (empty: none)
    repair: tuple[str, ...] = ()


@dataclass(frozen=True)
class WaveFigures:
    """One wave of a run, from the ledger."""

    number: int
    watermark: datetime | None
    planned: int
    home: int | None
    seconds: float | None
    #: when its plan was recorded, seconds from the run's start (None: unknown)
    planned_seconds: float | None = None


def waves_of(records: Iterable[RunRecord]) -> list[WaveFigures]:
    """The waves of one run's ledger rows (oldest first): a ``planned`` row per wave with
    its counts, and its ``replayed`` row with the run's messages sent so far. None for a
    run of one wave (its rows name no wave)."""
    planned: dict[int, RunRecord] = {}
    replayed: dict[int, RunRecord] = {}
    for r in records:
        if r.wave is None:
            continue
        if r.status == Status.PLANNED:
            planned[r.wave] = r
        elif r.status == Status.REPLAYED:
            replayed.setdefault(r.wave, r)  # the run's own, not a later recovery's
    out = []
    for number in sorted(planned):
        p, done = planned[number], replayed.get(number)
        seconds = None
        if done is not None and done.recorded_at is not None:
            seconds = (utc(done.recorded_at) - utc(p.started_at)).total_seconds()
        home = done.operations.replay_messages_sent if done is not None else None
        at = None
        if p.recorded_at is not None:
            at = (utc(p.recorded_at) - utc(p.started_at)).total_seconds()
        out.append(WaveFigures(number, p.watermark, sum(p.counts.values()), home, seconds, at))
    return out


def _place(only: Column | None = None) -> list[Column]:
    """A row's ``primary`` and ``destination``, an unknown one ``?`` and empty (null on
    the rows ``only`` leaves out, when given)."""
    from pyspark.sql import functions as F

    primary = F.coalesce(F.col("primary"), F.lit("?"))
    destination = F.coalesce(F.col("destination"), F.lit(""))
    if only is not None:
        primary, destination = F.when(only, primary), F.when(only, destination)
    return [primary.alias("primary"), destination.alias("destination")]


def outage_timeline(
    plan: DataFrame, first: datetime, last: datetime, buckets: int = TIMELINE_BUCKETS
) -> DataFrame:
    """Messages per (primary, destination) and time slice: the span from ``first`` to
    ``last`` (the earliest and latest backlog enqueue times) cut into ``buckets`` slices,
    ``at`` the slice's start."""
    from pyspark.sql import functions as F

    timed = plan.where(F.col("backlog_enqueued_time").isNotNull())
    seconds = F.col("backlog_enqueued_time").cast("double")
    lo, hi = first.timestamp(), last.timestamp()
    width = max((hi - lo) / buckets, 1e-3)
    bucket = F.least(F.floor((seconds - F.lit(lo)) / F.lit(width)), F.lit(buckets - 1))
    start = (F.lit(lo) + bucket * F.lit(width)).cast("timestamp")
    return (
        timed.select(*_place(), start.alias("at")).groupBy("primary", "destination", "at").count()
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
    :func:`syphon.store.queries.verdicts_per_destination` counts them. One aggregate, collected
    once, serves the per-entity table, what is left for the next run
    (:func:`left_for_next_run`), the run's sources and the verdicts per destination: one
    Spark job for the four."""
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
            (F.col("stage") == Stage.PLAN) & (F.col("verdict") != "replay"),
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
    return queries.verdicts_per_destination(figures, *_FIGURES, time="_time").withColumnRenamed(
        "messages", "count"
    )


def left_for_next_run(figures: Iterable[Any]) -> list[dict[str, Any]]:
    """What a run did not finish, per (stage, outcome, detail), from the rows of
    :func:`by_source_entity`: those of the replay and the settle with a ``why`` (replay
    outcomes other than ``sent``, settle outcomes ``left``); in that order."""
    left: dict[tuple[str, str, str | None], int] = {}
    for r in figures:
        if r["why"] and r["stage"] != Stage.PLAN:
            key = (r["stage"], r["outcome"], r["detail"])
            left[key] = left.get(key, 0) + int(r["count"])
    return [
        {"stage": stage, "outcome": outcome, "detail": detail, "count": count}
        for (stage, outcome, detail), count in sorted(
            left.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or "")
        )
    ]


def gather(result: RunResult, store: AuditStore, read_audit: bool) -> ReportData:
    """The report's figures: the run's result, and (``read_audit``, when Spark ran) its
    audit rows. Two Spark jobs (three when keys spread over queues), whatever the run's
    size, each collecting a small aggregation of the run's rows: the figures per source
    entity and destination, then the outage's timeline (its span is the first's)."""
    data = ReportData(
        result.run_id,
        result.status,
        result.detail,
        result.fix,
        datetime.now(timezone.utc),
        dict(result.counts),
        dict(result.outcomes),
        result.operations.as_map(),
        result.timings.as_map(),
    )
    records = [r for r in store.runs() if r.run_id == result.run_id]
    data.waves = waves_of(records)
    data.repair = next((r.repair for r in records if r.repair), ())
    rows = store.run_rows(result.run_id) if read_audit else None
    if rows is None:
        return data
    figures = by_source_entity(rows).collect()
    _add_destinations(data, figures)
    plan = queries.run_rows(rows, result.run_id, Stage.PLAN)
    if data.windows:
        first = min(w[0] for w in data.windows.values())
        last = max(w[1] for w in data.windows.values())
        for r in outage_timeline(plan, first, last).collect():
            data.timeline[(r["primary"], r["destination"], utc(r["at"]))] = int(r["count"])
    if data.spread_groups:
        spread = queries.spread_groups(plan).limit(SPREAD_ROWS).collect()
        data.spread = [r.asDict() for r in spread]
    _add_entities(data, figures)
    return data


def _add_destinations(data: ReportData, figures: list[Any]) -> None:
    """The plan's figures per destination (:func:`by_source_entity`'s plan rows): the
    messages per verdict, the spread groups and when the messages were parked."""
    for r in figures:
        if r["stage"] != Stage.PLAN:
            continue
        place = (r["primary"], r["destination"])
        counts = data.by_destination.setdefault(place, {})
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + int(r["count"])
        data.spread_groups += int(r["spread_groups"])
        if r["first"] is not None:  # the times it was parked
            first, last = utc(r["first"]), utc(r["last"])
            known = data.windows.get(place)
            if known is not None:
                first, last = min(first, known[0]), max(last, known[1])
            data.windows[place] = (first, last)


def _add_entities(data: ReportData, figures: list[Any]) -> None:
    """The figures per source entity (:func:`by_source_entity`), what the run left for
    the next and the sources it read."""
    data.left = left_for_next_run(figures)
    sources = {r["source"] for r in figures if r["stage"] == Stage.PLAN} - {None}
    data.source = ", ".join(sorted(sources)) or None
    for r in figures:
        counts = data.by_entity.setdefault(r["entity"], {})
        key = r["outcome"] if r["stage"] != Stage.REPLAY else f"replay_{r['outcome']}"
        counts[key] = counts.get(key, 0) + int(r["count"])
        if r["why"]:
            reasons = data.entity_reasons.setdefault(r["entity"], {})
            reasons[r["why"]] = reasons.get(r["why"], 0) + int(r["count"])
