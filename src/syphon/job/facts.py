"""What the driver keeps of a wave's plan, its facts (:func:`plan_facts`: one Spark job
of one stage), and the plan's summary per destination worked out from them
(:func:`per_destination`). The settle's actions are worked out from the same facts
(:func:`syphon.job.settle_actions.settle_actions`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from syphon.core.repair import Repair
from syphon.core.schema import PLACE, Verdict
from syphon.job.classify import DESTINATION_UNKNOWN, REPAIR_INVALID
from syphon.job.reconcile import REPAIRED_NAMES
from syphon.store import queries

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame


#: The plan's columns the driver keeps of a wave (:func:`plan_facts`), each message's: its
#: place, destination, verdict, reason and detail, whether it starts a spread replay group,
#: when it was first enqueued, and what a repair changes in it.
FACTS = (
    *PLACE,
    "primary",
    "destination",
    "verdict",
    "reason",
    "detail",
    "spread_start",
    "original_enqueued_time",
    REPAIRED_NAMES,
)


#: How the plan's summary counts the messages whose repaired value cannot be sent.
CANNOT_BE_SENT = "invalid: repair_invalid"


def plan_facts(planned: DataFrame) -> pa.Table:
    """The checkpointed plan's :data:`FACTS`, in the driver's memory: one Spark job of one
    stage (no shuffle) gives the plan's summary (:func:`per_destination`) and the settle
    its actions (:func:`syphon.job.settle_actions.settle_actions`), where a grouped count
    and, after the replay, a join were a job each. A few dozen bytes a message: the settle
    holds every message's action in the driver anyway."""
    from pyspark.sql import functions as F

    spread_start = F.coalesce(queries.starts_a_spread_group(), F.lit(False))
    columns = [spread_start.alias(c) if c == "spread_start" else F.col(c) for c in FACTS]
    return planned.select(*columns).toArrow()


def per_destination(facts: pa.Table, repair: Repair | None = None) -> list[dict[str, Any]]:
    """Per (primary, destination) of a plan's :func:`plan_facts`, sorted: messages, a
    count per verdict, the replay groups spread over several backlog queues, and the
    first and last original enqueue times; ``destination_unknown``: the invalid messages
    whose destination the listing did not find; with a ``repair``, ``repaired``: how many
    messages to send each of its changes alters (``set NAME``/``unset NAME``: count)."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    out: dict[tuple[Any, Any], dict[str, Any]] = {}
    keys = ["primary", "destination", "verdict", "reason"]
    time = "original_enqueued_time"
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
    if repair is not None:
        for d in out.values():
            d["repaired"] = {}
        facts = facts.combine_chunks()  # the list's parent indices count from 0 once
        changes = facts.column(REPAIRED_NAMES)
        rows = pc.list_parent_indices(changes)
        changed = pa.table(
            {
                "primary": pc.take(facts.column("primary"), rows),
                "destination": pc.take(facts.column("destination"), rows),
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
