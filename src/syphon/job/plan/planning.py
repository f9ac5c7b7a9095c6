"""``syphon plan``: snapshot → reconcile → audit, sending nothing, removing nothing.

1. discover the backlog queues of every configured primary (management listing or
   probing), skipping empty ones;
2. learn each primary's entities and their settings from its management API (when it
   answers; otherwise settings are unknown and the safe defaults of the reconcile
   apply);
3. peek every non-empty backlog queue into a DataFrame (:mod:`syphon.job.read.snapshot`);
4. restore, classify, order and plan batches;
5. append the audit rows and a ``planned`` row to the run ledger.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from syphon.core.discard import Discard
from syphon.core.ledger import Operations, Timings
from syphon.core.render import spark_schema
from syphon.core.repair import Repair
from syphon.core.schema import DESTINATIONS, Stage, Verdict
from syphon.core.selection import Selection, SelectionError
from syphon.core.sessions import INTERPRETED_MESSAGES
from syphon.job.context import RunContext, fit_code_generation, fit_shuffle_partitions, keep
from syphon.job.ledger import record_planned
from syphon.job.plan.classify import Against
from syphon.job.plan.facts import audit_only, per_destination, plan_rows
from syphon.job.plan.reconcile import reconcile_snapshot, wave_messages
from syphon.job.read.snapshot import read_snapshot
from syphon.job.repair import check_repair
from syphon.job.request import RunRequest, SnapshotRead, StageResult, timed
from syphon.job.restore import Redrive, expression_type
from syphon.job.sources import RunSource
from syphon.job.where import in_driver
from syphon.obs import progress
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.entities import list_destinations, listing_failed
from syphon.servicebus.sending import Destination
from syphon.store import queries

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class PlanResult(StageResult):
    """What a plan found.

    Attributes:
        per_destination: :func:`per_destination` of the plan.
        messages: the wave's messages as the replay sends them (restored and repaired,
            bodies included: :func:`syphon.job.plan.reconcile.wave_messages`, lazy over the
            checkpointed snapshot).
        selection: what the run takes (None: every message).
        discard: what it removes without sending (None: nothing).
        repair: what it changes in the messages it sends (None: nothing).
        rows: the plan's audit rows, as appended (a projection of the checkpointed
            plan), for the replay: it need not read them back.
        audit: the same rows in the driver's memory, as appended
            (:func:`syphon.job.plan.facts.plan_rows`): the outcomes' rows take their keys.
    """

    run_id: str
    queues: list[DiscoveredQueue]
    counts: dict[str, int]
    messages: DataFrame
    rows: DataFrame
    audit: pa.Table
    per_destination: list[dict[str, Any]] = field(default_factory=list)
    selection: Selection | None = None
    discard: Discard | None = None
    repair: Repair | None = None

    @property
    def unknown(self) -> frozenset[Destination]:
        """The (primary, destination) pairs the plan found no entity for."""
        return frozenset(
            (d["primary"], d["destination"])
            for d in self.per_destination
            if d["destination_unknown"]
        )

    @property
    def sending_to(self) -> frozenset[Destination]:
        """The (primary, destination) pairs the plan replays messages to."""
        return frozenset(
            (d["primary"], d["destination"]) for d in self.per_destination if d["replay"]
        )


def discovery_operations(
    ctx: RunContext, queues: list[DiscoveredQueue], source: RunSource
) -> Operations:
    """What a discovery cost: one listing, or a peek per probed index (a dead-letter or
    namespace source: a peek per queue of its named entities, or the listings of its
    namespace's queues and subscriptions)."""
    if source.kind != "backlog":
        if source.config.entities:
            return Operations(
                discover_management_calls=0,
                discover_peeks=len(queues),
                discover_backlog_queues=len(queues),
            )
        calls = source.listings[-1] if source.listings else 0
        return Operations(
            discover_management_calls=calls, discover_peeks=0, discover_backlog_queues=len(queues)
        )
    backlog = ctx.config.backlog
    if backlog.discovery == "management":
        return Operations(
            discover_management_calls=1, discover_peeks=0, discover_backlog_queues=len(queues)
        )
    probes = backlog.probe_limit * len(ctx.config.primaries)
    return Operations(
        discover_management_calls=0, discover_peeks=probes, discover_backlog_queues=len(queues)
    )


def destination_settings(ctx: RunContext) -> tuple[list[tuple[Any, ...]] | None, tuple[str, ...]]:
    """Every entity of every primary that answers, with the settings the reconcile uses
    (rows of :data:`~syphon.core.schema.DESTINATIONS`); no Spark is needed.

    Returns:
        (the destinations' rows or None, the primaries that were listed completely).
    """
    rows: list[tuple[Any, ...]] = []
    listed: list[str] = []
    for name, access in ctx.namespaces.primaries.items():
        try:
            rows.extend(list_destinations(access))
        except Exception as exc:
            if not listing_failed(exc):
                raise
            log.warning(
                "the management API of %s did not answer (%s): its destinations' settings "
                "are unknown",
                name,
                type(exc).__name__,
            )
            continue
        listed.append(name)
    if not listed:
        return None, ()
    return rows, tuple(listed)


@dataclass(kw_only=True)
class Listed(StageResult):
    """The primaries' entities with their settings (``rows`` of
    :data:`~syphon.core.schema.DESTINATIONS`; None when no primary's management API
    answered) and the primaries listed completely. The listing needs no Spark, so a run
    lists while its session starts; the plan asks for the rows as a DataFrame."""

    rows: list[tuple[Any, ...]] | None
    primaries: tuple[str, ...]
    _frame: DataFrame | None = field(default=None, init=False, repr=False, compare=False)

    def frame(self, spark: SparkSession) -> DataFrame | None:
        """The rows as a DataFrame of ``spark``, made once for all the run's waves."""
        if self.rows is None:
            return None
        if self._frame is None:
            self._frame = spark.createDataFrame(self.rows, spark_schema(DESTINATIONS))
        return self._frame


def list_primaries(ctx: RunContext) -> Listed:
    """The destinations' settings, read once per run (every wave plans against them)."""
    result = Listed(rows=None, primaries=())
    with timed(result.timings, "destinations"):
        progress.step("destinations: reading the primaries' entities")
        result.rows, result.primaries = destination_settings(ctx)
    result.operations.destinations_management_calls = 2 * len(ctx.config.primaries)
    return result


def plan(
    ctx: RunContext, request: RunRequest, queues: list[DiscoveredQueue] | None = None
) -> PlanResult:
    """Plans a run in one wave (see the module docstring) and records it as ``planned``:
    what ``request.selection`` takes of its source (the rest is ``unselected``; the
    selection is checked before anything is peeked), ``request.discard`` removed without
    sending, the MessageIds of ``request.allow_resend`` sent again although an earlier
    run replayed them.

    Args:
        queues: the source's queues when the caller discovered them already.

    Raises:
        SelectionError: the selection's predicate does not apply to a snapshot.
    """
    source = request.source
    spark = ctx.spark()  # its start is no stage's time
    check_selection(spark, request.selection, source.redrive)
    request = replace(request, repair=check_repair(spark, request.repair, source.redrive))
    timings = Timings()
    with timed(timings, "discover"):
        if queues is None:
            progress.step(f"discover: finding the queues of source {source.name}")
            queues = source.discover(ctx)
        non_empty = [q for q in queues if not q.empty and q.unreadable is None]
    listed = list_primaries(ctx)
    with timed(timings, "snapshot"):
        progress.step(f"snapshot: peeking {len(non_empty)} queues")
        split = ctx.config.backlog.split_messages
        per_task = ctx.config.run.messages_per_task
        driver = in_driver(ctx)
        snapshot = read_snapshot(spark, source.access, non_empty, split, per_task, driver)
    read = SnapshotRead(
        snapshot=snapshot, timings=timings, operations=discovery_operations(ctx, queues, source)
    )
    read.timings.add(listed.timings)
    read.operations.add(listed.operations)
    read.operations.snapshot_queues_peeked = len(non_empty)
    result = plan_snapshot(ctx, request, read, listed)
    result.queues = queues
    return result


@dataclass(frozen=True)
class WaveMark:
    """Which wave of a run a plan is: its number (from 1), its cut (None: the queues'
    ends) and when it was planned (its audit rows' time)."""

    number: int
    watermark: datetime | None
    planned_at: datetime


def plan_snapshot(
    ctx: RunContext,
    request: RunRequest,
    read: SnapshotRead,
    listed: Listed,
    wave: WaveMark | None = None,
) -> PlanResult:
    """Reconciles the ``read``'s snapshot (checkpointed, or lazy over a checkpoint)
    against the destinations' settings (``listed``) and what earlier runs and waves
    replayed, appends the audit rows and records ``planned`` (of ``wave``; None: a run of
    one wave, whose frames are kept in memory) with what the plan took, the read's
    timings and operations (its discovery and listing too, when the caller added them)
    included."""
    source = request.source
    spark = ctx.spark()
    timings = Timings()
    operations = Operations()
    timings.add(read.timings)
    operations.add(read.operations)
    with timed(timings, "snapshot"):
        peeked = read.snapshot.count() if read.messages is None else read.messages
    fit_shuffle_partitions(spark, peeked, ctx.config.spark.conf)
    if wave is not None:  # a run in waves: its small first wave interpreted
        first = wave.number == 1 and peeked <= INTERPRETED_MESSAGES
        fit_code_generation(spark, first, ctx.config.spark.conf)
    planned_at = request.started if wave is None else wave.planned_at
    on_disk = wave is not None  # a run in waves (see keep)

    restored = wave_messages(read.snapshot, source.redrive, request.repair)
    with timed(timings, "reconcile"):
        progress.step(f"reconcile: {peeked} messages")
        planned = reconcile_snapshot(
            restored,
            against(ctx, request, listed),
            request.selection,
            request.discard,
            on_disk=on_disk,
        )
        # checkpointed: the audit, the counts and the summary read it
        planned = keep(with_source(planned, source), on_disk)

    audit_rows = queries.plan_audit_rows(planned, request.run_id, planned_at, request.job_run_id)
    with timed(timings, "audit"):
        progress.step("audit: writing the plan")
        collected = plan_rows(planned, request.run_id, planned_at, request.job_run_id)
        audit = audit_only(collected)
        rows = ctx.store.append_rows(audit, request.run_id, Stage.PLAN)
    if rows != peeked:  # pragma: no cover - a broken invariant, not an input
        raise RuntimeError(f"the audit has {rows} rows for {peeked} peeked messages")
    destinations = per_destination(collected, request.repair)
    counts = {v: n for v in Verdict.ALL if (n := sum(int(d[v]) for d in destinations))}
    if operations.snapshot_messages_peeked is None:  # a wave's read counted its own
        operations.snapshot_messages_peeked = rows
    mark = None if wave is None else (wave.number, wave.watermark)
    record_planned(ctx, request, StageResult(timings=timings, operations=operations), counts, mark)
    return PlanResult(
        run_id=request.run_id,
        queues=[],
        counts=counts,
        per_destination=destinations,
        timings=timings,
        operations=operations,
        messages=restored,
        selection=request.selection,
        discard=request.discard,
        repair=request.repair,
        rows=audit_rows,
        audit=audit,
    )


def against(ctx: RunContext, request: RunRequest, listed: Listed) -> Against:
    """What a wave's plan judges its messages against: the run's start, the listed
    destinations, what earlier runs and waves replayed (read anew for each wave: the
    last wave's replays are in), the source's size limit, the operator's
    ``--allow-resend`` and ``--new-message-ids``, and whether a dead letter's
    destination's duplicate detection window is judged (a dead-letter source)."""
    from pyspark.sql import functions as F

    return Against(
        F.lit(request.started),
        listed.frame(ctx.spark()),
        ctx.store.replayed(),
        request.source.access.max_message_bytes,
        listed.primaries,
        request.allow_resend,
        redrive_window=request.source.kind == "dead_letter",
        new_message_ids=request.new_message_ids,
    )


def unread(queues: list[DiscoveredQueue]) -> dict[str, str]:
    """The queues that may hold messages syphon cannot read, with why (path: reason)."""
    return {q.path: q.unreadable for q in queues if q.unreadable and not q.empty}


def with_source(planned: DataFrame, source: RunSource) -> DataFrame:
    """Planned rows with the audit's ``source`` and ``source_kind`` columns."""
    from pyspark.sql import functions as F

    return planned.withColumn("source", F.lit(source.name)).withColumn(
        "source_kind", F.lit(source.kind)
    )


def check_selection(
    spark: SparkSession, selection: Selection | None, redrive: Redrive | None = None
) -> None:
    """Judges the selection on an empty snapshot, so that a predicate that does not parse,
    names a column that does not exist or is not true or false fails before anything is
    peeked.

    Raises:
        SelectionError: with Spark's own words (its first line).
    """
    if selection is None or selection.where is None:
        return
    from pyspark.sql.types import BooleanType

    try:
        where_kind = expression_type(spark, selection.where, redrive)
    except ValueError as exc:
        raise SelectionError(f"--where {selection.where!r}: {exc}") from None
    if not isinstance(where_kind, BooleanType):
        raise SelectionError(
            f"--where {selection.where!r}: is {where_kind.simpleString()}, not true or false"
        )
