"""The run report's figures: three small questions asked of one run's audit rows, each
store answering them with the engine that reads it best.

:class:`RunFigures` is what a report asks: the counts per source entity and place, the
outage's timeline, the replay groups spread most widely. A catalog store answers with
Spark (:class:`SparkFigures`, the transforms of :mod:`syphon.store.queries`). A delta-rs
store answers with the same questions written as SQL on delta-rs's own engine
(:class:`DeltaRsFigures`): in milliseconds, with no Spark job, the engine's aggregation
bounded by the number of groups. Each append's files are one run's, and the Delta log
keeps each file's least and greatest ``run_id``: the engine opens only the files that
can hold the run (four runs' files, a query for one: one file scanned, by its
``EXPLAIN ANALYZE``), so a long audit history does not slow a report. In a cold run the
report's three Spark jobs took about 0.9 s. The tests ask both engines the same
questions about the same rows, hand-made and a real run's, and compare the answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from syphon.core.schema import Outcome, Stage, Verdict
from syphon.store import queries
from syphon.store.delta import sql_engine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from syphon.store.location import Location


@dataclass(frozen=True)
class TimeSlices:
    """The outage timeline's ``count`` slices of ``width`` seconds from ``start`` (epoch
    seconds); a time past the last slice counts in the last."""

    start: float
    width: float
    count: int

    @classmethod
    def spanning(cls, first: datetime, last: datetime, count: int) -> TimeSlices:
        """``count`` slices from ``first`` to ``last`` (a thousandth of a second each at
        least)."""
        lo, hi = first.timestamp(), last.timestamp()
        return cls(lo, max((hi - lo) / count, 1e-3), count)

    def at(self, bucket: int) -> datetime:
        """When slice ``bucket`` starts."""
        return datetime.fromtimestamp(self.start + bucket * self.width, timezone.utc)


class RunFigures(Protocol):
    """The answers a run's report reads (rows as dicts)."""

    def per_entity(self) -> list[dict[str, Any]]:
        """The rows of :func:`syphon.store.queries.by_source_entity`."""
        ...

    def timeline(self, slices: TimeSlices) -> list[dict[str, Any]]:
        """The plan rows per ``primary``, ``destination`` and ``bucket`` (a slice of
        ``slices``): ``count``."""
        ...

    def spread(self, limit: int) -> list[dict[str, Any]]:
        """The first ``limit`` rows of :func:`syphon.store.queries.spread_groups`."""
        ...


class SparkFigures:
    """The answers from a run's rows as Spark reads them: a job per question."""

    def __init__(self, rows: DataFrame, run_id: str) -> None:
        self.rows = rows
        self.plan = queries.run_rows(rows, run_id, Stage.PLAN)

    def per_entity(self) -> list[dict[str, Any]]:
        return [r.asDict() for r in queries.by_source_entity(self.rows).collect()]

    def timeline(self, slices: TimeSlices) -> list[dict[str, Any]]:
        frame = queries.outage_timeline(self.plan, slices.start, slices.width, slices.count)
        return [r.asDict() for r in frame.collect()]

    def spread(self, limit: int) -> list[dict[str, Any]]:
        return [r.asDict() for r in queries.spread_groups(self.plan).limit(limit).collect()]


def _text(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def _when_planned(column: str) -> str:
    return f"CASE WHEN stage = {_text(Stage.PLAN)} THEN {column} END"


_PRIMARY = """COALESCE("primary", '?')"""


#: :func:`syphon.store.queries.by_source_entity` in SQL: the same columns, counted alike.
_PER_ENTITY = f"""
SELECT entity, stage, outcome, detail, source, why, "primary", destination, verdict,
  COUNT(*) AS "count", COUNT(spread_start) AS spread_groups,
  MIN(parked) AS "first", MAX(parked) AS "last"
FROM (
  SELECT COALESCE(source_entity, backlog_queue, '?') AS entity, stage, outcome, detail, source,
    CASE
      WHEN stage = {_text(Stage.REPLAY)} AND outcome <> {_text(Outcome.SENT)}
        THEN concat_ws(': ', outcome, detail)
      WHEN stage = {_text(Stage.SETTLE)} AND outcome = {_text(Outcome.LEFT)}
        THEN concat_ws(': ', 'left', detail)
      WHEN stage = {_text(Stage.PLAN)} AND verdict <> {_text(Verdict.REPLAY)}
        THEN concat_ws(': ', verdict, reason)
    END AS why,
    {_when_planned(_PRIMARY)} AS "primary",
    {_when_planned("COALESCE(destination, '')")} AS destination,
    {_when_planned("verdict")} AS verdict,
    CASE WHEN stage = {_text(Stage.PLAN)} AND verdict = {_text(Verdict.REPLAY)}
      AND group_spread AND replay_order = 1 THEN 1 END AS spread_start,
    {_when_planned("backlog_enqueued_time")} AS parked
  FROM audit WHERE run_id = {{run}}
) AS figures
GROUP BY entity, stage, outcome, detail, source, why, "primary", destination, verdict
"""  # noqa: S608 - the schema's constants; a run id through _text

#: :func:`syphon.store.queries.outage_timeline` in SQL (a Delta timestamp is in
#: microseconds: the same seconds as Spark's cast, to the bit).
_TIMELINE = f"""
SELECT "primary", destination, bucket, COUNT(*) AS "count"
FROM (
  SELECT COALESCE("primary", '?') AS "primary", COALESCE(destination, '') AS destination,
    CAST(LEAST(
      FLOOR((CAST(backlog_enqueued_time AS BIGINT) / 1000000.0 - {{start}}) / {{width}}),
      {{last}}) AS BIGINT) AS bucket
  FROM audit
  WHERE run_id = {{run}} AND stage = {_text(Stage.PLAN)} AND backlog_enqueued_time IS NOT NULL
) AS timed
GROUP BY "primary", destination, bucket
"""  # noqa: S608 - the schema's constants; a run id through _text

#: :func:`syphon.store.queries.spread_groups` in SQL, in Spark's order (nulls first). The
#: backlog queues are counted by grouping twice (per queue, then per group) rather than
#: with ``COUNT(DISTINCT ...)``: the engine keeps a set per group for that, and on a
#: 200,000-message run it took 250 MB of the driver's memory where this takes about 15 MB
#: beyond the scan's (tests/benchmarks/README.md, "The report's memory").
_SPREAD = f"""
SELECT "primary", destination, partition_key_effective, SUM(messages) AS messages,
  COUNT(backlog_queue) AS backlog_queues, MAX(span_seconds) AS span_seconds
FROM (
  SELECT "primary", destination, partition_key_effective, backlog_queue,
    COUNT(*) AS messages, MAX(group_span_seconds) AS span_seconds
  FROM audit
  WHERE run_id = {{run}} AND stage = {_text(Stage.PLAN)}
    AND verdict = {_text(Verdict.REPLAY)} AND group_spread
  GROUP BY "primary", destination, partition_key_effective, backlog_queue
) AS per_queue
GROUP BY "primary", destination, partition_key_effective
ORDER BY backlog_queues DESC, messages DESC, "primary" NULLS FIRST,
  destination NULLS FIRST, partition_key_effective NULLS FIRST
LIMIT {{limit}}
"""  # noqa: S608 - the schema's constants; a run id through _text


class DeltaRsFigures:
    """The answers as SQL on delta-rs's engine over the audit table's current version."""

    def __init__(self, table: Location, run_id: str) -> None:
        self.engine = sql_engine(table, "audit")
        self.run = _text(run_id)
        self._per_entity: list[dict[str, Any]] | None = None

    @classmethod
    def answered(cls, table: Location, run_id: str) -> DeltaRsFigures:
        """The figures of ``table``, the first question asked already (the engine
        refuses a table it cannot read on the first)."""
        figures = cls(table, run_id)
        figures.per_entity()
        return figures

    def _ask(self, sql: str) -> list[dict[str, Any]]:
        import pyarrow as pa  # type: ignore[import-untyped]

        rows: list[dict[str, Any]] = pa.table(self.engine.execute(sql).read_all()).to_pylist()
        return rows

    def per_entity(self) -> list[dict[str, Any]]:
        if self._per_entity is None:
            self._per_entity = self._ask(_PER_ENTITY.format(run=self.run))
        return self._per_entity

    def timeline(self, slices: TimeSlices) -> list[dict[str, Any]]:
        sql = _TIMELINE.format(
            run=self.run, start=repr(slices.start), width=repr(slices.width), last=slices.count - 1
        )
        return self._ask(sql)

    def spread(self, limit: int) -> list[dict[str, Any]]:
        return self._ask(_SPREAD.format(run=self.run, limit=int(limit)))
