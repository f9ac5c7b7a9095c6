"""What the driver keeps of a wave's plan: its audit rows, collected once
(:func:`plan_rows`: one Spark job of one stage) and appended to the audit from there;
the plan's summary per destination worked out from them (:func:`per_destination`); and
the audit rows of the wave's outcomes (:func:`outcome_rows`): a stage's results, in the
driver's memory already, beside their plan rows. The settle's actions are worked out
from the same rows (:func:`syphon.job.settle.actions.settle_actions`).

A wave holds its plan's rows from its plan to its settle: a few hundred bytes a message
(keys, hashes and sizes, never a body), bounded by the wave as its messages are. Where
Spark did this work, each wave cost three jobs more: the plan's append from tasks, and
a join (a shuffle) in each of the replay's and the settle's appends."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from syphon.core.naming import is_dead_letter_path
from syphon.core.render import arrow_schema
from syphon.core.repair import Repair
from syphon.core.schema import AUDIT, PLACE, Outcome, Stage, Verdict, names
from syphon.job.plan.classify import DESTINATION_UNKNOWN, REPAIR_INVALID
from syphon.job.plan.reconcile import REPAIRED_NAMES
from syphon.store import queries

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame


#: The planned columns collected beside a plan's audit rows for its summary only: when
#: each message was first enqueued, and what a repair changes in it.
SUMMARY_ONLY = ("original_enqueued_time", REPAIRED_NAMES)


#: How the plan's summary counts the messages whose repaired value cannot be sent.
CANNOT_BE_SENT = "invalid: repair_invalid"


def plan_rows(
    planned: DataFrame, run_id: str, planned_at: datetime, job_run_id: str | None = None
) -> pa.Table:
    """The checkpointed plan's audit rows (:func:`syphon.store.queries.plan_audit_rows`)
    with :data:`SUMMARY_ONLY`, in the driver's memory: one Spark job of one stage (no
    shuffle). :func:`audit_only` drops the summary's columns."""
    return queries.plan_audit_rows(
        planned, run_id, planned_at, job_run_id, keep=SUMMARY_ONLY
    ).toArrow()


def audit_only(rows: pa.Table) -> pa.Table:
    """``rows`` with the audit's columns only (:data:`syphon.core.schema.AUDIT`)."""
    return rows.select(list(names(AUDIT)))


def outcome_rows(
    results: pa.Table, plan: pa.Table, run_id: str, stage: str, recorded_at: datetime
) -> pa.Table:
    """The audit rows of a stage's ``results`` (place, ``outcome``, ``detail``), each
    message's keys from its row of ``plan`` (the wave's plan rows); a message the plan
    does not hold keeps only its place. The rows of
    :func:`syphon.store.queries.outcome_audit_rows`, made in the driver.

    Raises:
        ValueError: ``stage`` is not the replay or the settle.
    """
    import pyarrow as pa

    if stage not in (Stage.REPLAY, Stage.SETTLE):
        raise ValueError(f"not an outcome stage: {stage}")
    own = {"run_id": run_id, "stage": stage, "recorded_at": recorded_at}
    taken = {*own, "outcome", "detail"}
    keys = plan.select([c for c in plan.column_names if c in names(AUDIT) and c not in taken])
    joined = results.select([*PLACE, "outcome", "detail"]).join(
        keys, list(PLACE), join_type="left outer", use_threads=False
    )
    schema = arrow_schema(AUDIT)
    columns = []
    for f in schema:
        if f.name in own:
            columns.append(pa.repeat(pa.scalar(own[f.name], f.type), joined.num_rows))
        elif f.name in joined.column_names:
            columns.append(joined.column(f.name).cast(f.type))
        else:  # a plan row of a table older than the column
            columns.append(pa.nulls(joined.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def per_destination(rows: pa.Table, repair: Repair | None = None) -> list[dict[str, Any]]:
    """Per (primary, destination) of a plan's :func:`plan_rows`, sorted: messages, a
    count per verdict, the replay groups spread over several backlog queues, and the
    first and last original enqueue times; ``destination_unknown``: the invalid messages
    whose destination the listing did not find; ``too_soon_until``, where some wait for
    the destination's duplicate detection window: when the last window passes; with a
    ``repair``, ``repaired``: how many messages to send each of its changes alters
    (``set NAME``/``unset NAME``: count)."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    keys = ["primary", "destination", "verdict", "reason"]
    time = "original_enqueued_time"
    facts = rows.select([*keys, time]).append_column("spread_start", starts_a_spread_group(rows))
    by_reason = facts.group_by(keys, use_threads=False).aggregate(
        [([], "count_all"), ("spread_start", "sum"), (time, "min"), (time, "max")]
    )
    for r in by_reason.to_pylist():
        place = (r["primary"], r["destination"])
        d = out.setdefault(
            place,
            {
                "primary": place[0],
                "destination": place[1],
                "messages": 0,
                **dict.fromkeys(Verdict.ALL, 0),
                "spread_groups": 0,
                "destination_unknown": 0,
                "first": None,
                "last": None,
            },
        )
        messages = r["count_all"]
        d["messages"] += messages
        d[r["verdict"]] += messages
        if r["verdict"] == Verdict.INVALID and r["reason"] == DESTINATION_UNKNOWN:
            d["destination_unknown"] += messages
        d["spread_groups"] += r["spread_start_sum"] or 0
        first, last = r[f"{time}_min"], r[f"{time}_max"]
        if first is not None:
            d["first"] = first if d["first"] is None else min(d["first"], first)
            d["last"] = last if d["last"] is None else max(d["last"], last)
    waits = rows.filter(pc.equal(rows.column("verdict"), Verdict.TOO_SOON))
    if waits.num_rows:
        latest = waits.group_by(["primary", "destination"], use_threads=False).aggregate(
            [("detail", "max")]
        )
        for r in latest.to_pylist():
            out[(r["primary"], r["destination"])]["too_soon_until"] = r["detail_max"]
    if repair is not None:
        for d in out.values():
            d["repaired"] = {}
        facts = rows.combine_chunks()  # the list's parent indices count from 0 once
        changes = facts.column(REPAIRED_NAMES)
        owners = pc.list_parent_indices(changes)
        changed = pa.table(
            {
                "primary": pc.take(facts.column("primary"), owners),
                "destination": pc.take(facts.column("destination"), owners),
                "change": pc.list_flatten(changes),
            }
        )
        refused = facts.filter(pc.equal(facts.column("reason"), REPAIR_INVALID))
        cannot = pa.table(
            {
                "primary": refused.column("primary"),
                "destination": refused.column("destination"),
                "change": pa.array([CANNOT_BE_SENT] * refused.num_rows, pa.string()),
            }
        )
        tallied = pa.concat_tables([changed, cannot]).group_by(
            ["primary", "destination", "change"], use_threads=False
        )
        for r in tallied.aggregate([([], "count_all")]).to_pylist():
            place = (r["primary"], r["destination"])
            out[place]["repaired"][r["change"]] = int(r["count_all"])
    return [out[k] for k in sorted(out, key=lambda k: (k[0] or "", k[1] or ""))]


def starts_a_spread_group(rows: pa.Table) -> pa.ChunkedArray:
    """True on each plan row that is the first message (``replay_order`` 1) of a replay
    group spread over several backlog queues, false elsewhere (nulls too):
    :func:`syphon.store.queries.starts_a_spread_group`, in the driver."""
    import pyarrow.compute as pc

    replay = pc.equal(rows.column("verdict"), Verdict.REPLAY)
    first = pc.equal(rows.column("replay_order"), 1)
    spread = pc.and_kleene(pc.and_kleene(replay, rows.column("group_spread")), first)
    return pc.fill_null(spread, False)


def dead_letters_waiting(settled: pa.Table, plan: pa.Table) -> pa.Table:
    """The messages a wave's settle left in a dead-letter queue because they wait for the
    operator (:data:`syphon.core.schema.PLACE` columns and the ``verdict``): judged a
    duplicate, a conflict or invalid; no later run sends them by itself. ``settled``:
    the settle's results; ``plan``: the wave's plan rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    left = settled.filter(pc.equal(settled.column("outcome"), Outcome.LEFT))
    queues = left.column("backlog_queue").to_pylist()
    in_dead_letters = [q is not None and is_dead_letter_path(q) for q in queues]
    left = left.filter(pa.array(in_dead_letters, pa.bool_())).select(list(PLACE))
    verdict = plan.column("verdict")
    waiting = pc.invert(pc.is_in(verdict, pa.array(queries.NOT_WAITING, pa.string())))
    judged = plan.filter(pc.and_(waiting, pc.is_valid(verdict))).select([*PLACE, "verdict"])
    return left.join(judged, list(PLACE), join_type="inner", use_threads=False)
