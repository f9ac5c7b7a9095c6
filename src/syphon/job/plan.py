"""``syphon plan``: snapshot → reconcile → audit, sending nothing, removing nothing.

1. discover the backlog queues of every configured primary (management listing or
   probing), skipping empty ones;
2. learn each primary's entities and their settings from its management API (when it
   answers; otherwise settings are unknown and the safe defaults of the reconcile
   apply);
3. peek every non-empty backlog queue through the ``syphon-backlog`` data source;
4. restore, classify, order and plan batches;
5. append the audit rows and a ``planned`` row to the run ledger.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.config import NamespaceConfig, SyphonConfig
from syphon.job.snapshot import QueueRange, queues_option, split_ranges
from syphon.obs import progress
from syphon.servicebus.access import admin_client, servicebus_client
from syphon.servicebus.discovery import DiscoveredQueue, discover_by_management, discover_by_probe
from syphon.store.audit import (
    RunRecord,
    append_run,
    config_fingerprint,
    replayed_frame,
    write_audit,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

DbutilsGet = Callable[[str, str], str] | None


@dataclass
class PlanResult:
    """What a plan found."""

    run_id: str
    queues: list[DiscoveredQueue]
    counts: dict[str, int]
    per_destination: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    audit_rows: int = 0
    snapshot: Any = None  # the checkpointed snapshot DataFrame (bodies included)


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def discover(config: SyphonConfig, dbutils_get: DbutilsGet = None) -> list[DiscoveredQueue]:
    primaries = [p.namespace for p in config.primaries]
    count = config.backlog.queue_count
    if config.backlog.discovery == "management":
        with admin_client(config.secondary, dbutils_get) as admin:
            return discover_by_management(admin, primaries, count)
    with servicebus_client(config.secondary, dbutils_get) as client:
        return discover_by_probe(client, primaries, count, config.backlog.probe_limit)


def destination_settings(
    spark: SparkSession, config: SyphonConfig, dbutils_get: DbutilsGet = None
) -> tuple[DataFrame | None, tuple[str, ...]]:
    """Every entity of every primary that answers, with the settings the reconcile uses.

    Returns:
        (the destinations frame or None, the primaries that were listed completely).
    """
    from azure.core.exceptions import AzureError

    rows: list[tuple[Any, ...]] = []
    listed: list[str] = []
    for primary in config.primaries:
        try:
            rows.extend(_entities(primary, dbutils_get))
        except (AzureError, OSError) as exc:
            log.warning(
                "the management API of %s did not answer (%s): its destinations' settings "
                "are unknown", primary.namespace, type(exc).__name__,
            )  # fmt: skip
            continue
        listed.append(primary.namespace)
    if not listed:
        return None, ()
    schema = (
        "primary string, destination string, exists boolean, "
        "requires_duplicate_detection boolean, requires_session boolean, max_message_bytes long"
    )
    return spark.createDataFrame(rows, schema), tuple(listed)


def _entities(primary: NamespaceConfig, dbutils_get: DbutilsGet) -> list[tuple[Any, ...]]:
    limit = (1024 if primary.tier == "premium" else 256) * 1024
    out = []
    with admin_client(primary, dbutils_get) as admin:
        for q in admin.list_queues():
            size = (q.max_message_size_in_kilobytes or 0) * 1024 or limit
            out.append((primary.namespace, q.name, True, bool(q.requires_duplicate_detection),
                        bool(q.requires_session), size))  # fmt: skip
        for t in admin.list_topics():
            size = (t.max_message_size_in_kilobytes or 0) * 1024 or limit
            out.append((primary.namespace, t.name, True, bool(t.requires_duplicate_detection),
                        False, size))  # fmt: skip
    return out


def snapshot_ranges(
    config: SyphonConfig, queues: list[DiscoveredQueue], dbutils_get: DbutilsGet = None
) -> list[QueueRange]:
    """The snapshot's input partitions: one per queue, several for a queue known to hold
    more than ``backlog.split_messages`` (its first sequence number costs one peek)."""
    size = config.backlog.split_messages
    large = [q for q in queues if (q.message_count or 0) > size]
    firsts: dict[str, int] = {}
    if large:
        with servicebus_client(config.secondary, dbutils_get) as client:
            for q in large:
                with client.get_queue_receiver(q.path) as receiver:
                    peeked = receiver.peek_messages(1, sequence_number=1)
                if peeked:
                    firsts[q.path] = peeked[0].sequence_number
    ranges: list[QueueRange] = []
    for q in queues:
        if q.path in firsts:
            ranges.extend(split_ranges(q.path, firsts[q.path], q.message_count or 0, size))
        else:
            ranges.append(QueueRange(q.path))
    return ranges


def read_snapshot(
    spark: SparkSession,
    config: SyphonConfig,
    queues: list[DiscoveredQueue],
    dbutils_get: DbutilsGet = None,
) -> DataFrame:
    """Peeks ``queues`` into a DataFrame, read exactly once.

    The rows are kept by Spark (``localCheckpoint``) so that every later use sees the
    same snapshot: a second read of the source would peek again and could see messages
    that arrived since.
    """
    from syphon.job.snapshot import register_backlog_source
    from syphon.servicebus.peek import snapshot_schema

    if not queues:
        return spark.createDataFrame([], snapshot_schema())
    name = register_backlog_source(spark, config.secondary, dbutils_get)
    option = queues_option(snapshot_ranges(config, queues, dbutils_get))
    return spark.read.format(name).option("queues", option).load().localCheckpoint(eager=True)


def run_plan(
    spark: SparkSession,
    config: SyphonConfig,
    *,
    run_id: str | None = None,
    now: datetime | None = None,
    dbutils_get: DbutilsGet = None,
    queues: list[DiscoveredQueue] | None = None,
) -> PlanResult:
    """Plans a run (see the module docstring) and records it as ``planned``.

    Args:
        queues: the backlog queues when the caller discovered them already.
    """
    from pyspark.sql import functions as F

    from syphon.job.reconcile import reconcile_snapshot

    started = now or datetime.now(timezone.utc)
    run_id = run_id or new_run_id(started)
    timings: dict[str, float] = {}
    clock = time.monotonic()
    progress.watch(spark)

    if queues is None:
        progress.step("discover: listing the backlog queues")
        queues = discover(config, dbutils_get)
    non_empty = [q for q in queues if not q.empty]
    timings["discover"] = time.monotonic() - clock

    clock = time.monotonic()
    progress.step("destinations: reading the primaries' entities")
    destinations, listed = destination_settings(spark, config, dbutils_get)
    timings["destinations"] = time.monotonic() - clock

    clock = time.monotonic()
    progress.step(f"snapshot: peeking {len(non_empty)} backlog queues")
    snapshot = read_snapshot(spark, config, non_empty, dbutils_get)
    snapshot_rows = snapshot.count()
    timings["snapshot"] = time.monotonic() - clock

    clock = time.monotonic()
    progress.step(f"reconcile: {snapshot_rows} messages")
    default_limit = (1024 if config.secondary.tier == "premium" else 256) * 1024
    planned = reconcile_snapshot(
        snapshot,
        F.lit(started),
        destinations,
        replayed_frame(spark, config.audit),
        default_max_message_bytes=default_limit,
        listed_primaries=listed,
    )
    # checkpointed: the audit, the counts and the summary read it
    planned = planned.localCheckpoint(eager=True)
    timings["reconcile"] = time.monotonic() - clock

    clock = time.monotonic()
    progress.step("audit: writing the plan")
    rows = write_audit(planned, config.audit, run_id, "plan", started)
    timings["audit"] = time.monotonic() - clock
    if rows != snapshot_rows:  # pragma: no cover - a broken invariant, not an input
        raise RuntimeError(f"the audit has {rows} rows for {snapshot_rows} peeked messages")
    counts = {r["verdict"]: int(r["count"]) for r in planned.groupBy("verdict").count().collect()}
    per_destination = _summary(planned)
    append_run(
        RunRecord(
            run_id=run_id,
            status="planned",
            started_at=started,
            finished_at=datetime.now(timezone.utc),
            config_fingerprint=config_fingerprint(config),
            counts=counts,
            operations={
                "discover.backlog_queues": len(queues),
                "snapshot.queues_peeked": len(non_empty),
                "snapshot.messages_peeked": rows,
            },
            timings=timings,
        ),
        config.audit,
    )
    return PlanResult(run_id, queues, counts, per_destination, timings, rows, snapshot)


def _summary(planned: DataFrame) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    replay = F.col("verdict") == "replay"
    spread_groups = F.when(replay & F.col("group_spread") & (F.col("replay_order") == 1), 1)
    rows = (
        planned.groupBy("primary", "destination")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            *[
                F.count(F.when(F.col("verdict") == v, 1)).alias(v)
                for v in ("replay", "duplicate", "conflict", "expired", "ping", "invalid")
            ],
            F.count(spread_groups).alias("spread_groups"),
            F.min("original_enqueued_time").alias("first"),
            F.max("original_enqueued_time").alias("last"),
        )
        .orderBy("primary", "destination")
        .collect()
    )
    return [r.asDict() for r in rows]


def format_summary(result: PlanResult) -> str:
    """The plan's summary table, as ``syphon plan`` prints it."""
    lines = [
        f"run {result.run_id}: {sum(result.counts.values())} messages in "
        f"{sum(1 for q in result.queues if not q.empty)} of {len(result.queues)} backlog queues",
        f"{'primary':<20} {'destination':<28} {'replay':>7} {'dup':>5} {'confl':>5} "
        f"{'exp':>5} {'ping':>5} {'inval':>5} {'spread':>6}  outage span",
    ]
    for d in result.per_destination:
        span = "-"
        if d["first"] is not None and d["last"] is not None:
            span = f"{d['first']:%Y-%m-%d %H:%M:%S} .. {d['last']:%H:%M:%S}"
        lines.append(
            f"{d['primary'] or '?':<20} {d['destination'] or '(no destination)':<28} "
            f"{d['replay']:>7} {d['duplicate']:>5} {d['conflict']:>5} {d['expired']:>5} "
            f"{d['ping']:>5} {d['invalid']:>5} {d['spread_groups']:>6}  {span}"
        )
    return "\n".join(lines)
