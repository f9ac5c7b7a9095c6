"""The run report's figures: a few aggregations of one run's audit rows.

The store answers the aggregations (:mod:`syphon.store.figures`, with Spark or on
delta-rs's engine); :func:`gather` folds their small answers into a :class:`ReportData`,
which :mod:`syphon.app.report` draws. The figures are counts, names of destinations and
partition keys, and times — never a body, a property value or a secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from syphon.core.ledger import RunRecord
from syphon.core.schema import Stage, Status
from syphon.job.ledger import RunResult
from syphon.job.rows import utc
from syphon.store.audit import AuditStore
from syphon.store.figures import TimeSlices

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


def left_for_next_run(figures: Iterable[Any]) -> list[dict[str, Any]]:
    """What a run did not finish, per (stage, outcome, detail), from the rows of
    :func:`syphon.store.queries.by_source_entity`: those of the replay and the settle
    with a ``why`` (replay outcomes other than ``sent``, settle outcomes ``left``); in
    that order."""
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
    """The report's figures: the run's result, and (``read_audit``: when Spark ran, as
    only then can the run have written audit rows) three questions asked of its rows
    (:mod:`syphon.store.figures`), each a small aggregation whatever the run's size: the
    figures per source entity and destination, then the outage's timeline (its span is
    the first's) and, when keys spread over queues, the most spread groups."""
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
    figures = store.run_figures(result.run_id) if read_audit else None
    if figures is None:
        return data
    per_entity = figures.per_entity()
    _add_destinations(data, per_entity)
    if data.windows:
        first = min(w[0] for w in data.windows.values())
        last = max(w[1] for w in data.windows.values())
        slices = TimeSlices.spanning(first, last, TIMELINE_BUCKETS)
        for r in figures.timeline(slices):
            at = slices.at(r["bucket"])
            data.timeline[(r["primary"], r["destination"], at)] = int(r["count"])
    if data.spread_groups:
        data.spread = figures.spread(SPREAD_ROWS)
    _add_entities(data, per_entity)
    return data


def _add_destinations(data: ReportData, figures: list[Any]) -> None:
    """The plan's figures per destination (the per-entity figures' plan rows): the
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
    """The figures per source entity, what the run left for
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
