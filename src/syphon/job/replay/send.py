"""Replay: send a planned run's ``replay`` messages to their primaries.

Input: the run's plan rows in the audit (verdict, batch, position, effective partition
key) joined with a snapshot of the backlog (the bodies and original properties, which
the audit never holds) — :func:`replay_input`. Every destination is probed from the
driver first (a sender link attached, no message sent); one that is missing, unavailable
or refuses the probe is skipped for this run and its messages stay in the backlog.

Spark lays the sends out by packing group (a destination, and its partition key where
batches hold one key; see :mod:`syphon.job.plan.batches`): rows are hash-partitioned on the
group and sorted by batch number and position inside each task, so each group's batches
go out in order and every key's order is kept. A primary's credit budget
(``replay.credits_per_second``) is split evenly among the tasks, each pacing its own
sends (:class:`~syphon.job.replay.lanes.CreditPacer`). A task holds one client per
primary namespace (:class:`~syphon.servicebus.sending.SenderPool`), applies the rules of
:mod:`syphon.job.replay.lanes` batch by batch and closes its clients on every path.

Outcomes per message: ``sent``; ``failed`` (the error class in ``detail``: the service
refused the batch, nothing was delivered); ``in_doubt`` (a timeout or a broken
connection after the transfer started: the next run sends it again and marks it);
``skipped`` (with the reason). A message sent again because an earlier run left it in
doubt, or by a Spark task retried after a failed attempt, has ``detail``
``resent_in_doubt``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from syphon.core import amqp_bytes as ab
from syphon.core.dedupe import NEW_MESSAGE_ID, ORIGINAL_ID_PROPERTY
from syphon.core.rebuild import dropped_properties, rebuild
from syphon.core.render import spark_schema
from syphon.core.repaired import decode_changes, repaired_timing
from syphon.core.schema import (
    MESSAGE_COLUMNS,
    PLACE,
    REPLAY_RESULT,
    Detail,
    Outcome,
    Verdict,
    names,
)
from syphon.job.context import service_tasks
from syphon.job.repair import carried_changes
from syphon.job.replay.journal import TaskJournal
from syphon.job.replay.lanes import Attempt, Lane, Replayer, ReplaySettings
from syphon.job.rows import plain_cell
from syphon.job.where import IN_TASKS, Spread, map_in_pandas
from syphon.obs.failpoints import FailPoint
from syphon.servicebus.access import Access
from syphon.servicebus.raw_batch import EncodedMessage
from syphon.servicebus.sending import Destination, SenderPool
from syphon.store.location import Location

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

#: Columns the replay reads (restored snapshot columns plus the plan's).
INPUT_COLUMNS = (
    *PLACE,
    "primary",
    "destination",
    "partition_key_effective",
    "replay_order",
    "batch_id",
    "batch_position",
    *MESSAGE_COLUMNS,
    "original_enqueued_time",
    "in_doubt",
    "snapshot_matches",
    "repair_application",
    "repair_system",
    "send_as",
)

#: Snapshot columns that rebuild a message.
_MESSAGE_COLUMNS = ("body_sha256", *MESSAGE_COLUMNS, "original_enqueued_time")


def still_to_send(planned: DataFrame, earlier: DataFrame | None) -> DataFrame:
    """The plan rows with verdict ``replay`` that no earlier attempt of the run recorded
    as ``sent`` (``earlier``: the run's replay rows, when it is resumed)."""
    from pyspark.sql import functions as F

    todo = planned.where(F.col("verdict") == Verdict.REPLAY)
    if earlier is None:
        return todo
    done = earlier.where(F.col("outcome") == Outcome.SENT).select(*PLACE)
    return todo.join(done, list(PLACE), "left_anti")


def replay_input(restored: DataFrame, todo: DataFrame, in_doubt: DataFrame | None) -> DataFrame:
    """The messages to send: plan rows (``todo``) joined with the restored snapshot on
    their place, flagged when an earlier run left them in doubt and when the snapshot's
    body differs from the planned one (or the message is gone), with what a repair
    changes (``restored`` with :func:`syphon.job.repair.with_repair`)."""
    from pyspark.sql import functions as F

    plan = todo.where(F.col("verdict") == Verdict.REPLAY).select(
        *PLACE,
        "primary",
        "destination",
        "partition_key_effective",
        "replay_order",
        "batch_id",
        "batch_position",
        F.col("body_sha256").alias("_planned_sha"),
        # the MessageId a dead letter its destination would drop is sent under
        F.when(F.col("reason") == NEW_MESSAGE_ID, F.col("detail")).alias("send_as"),
    )
    message = restored.select(*PLACE, *_MESSAGE_COLUMNS, *carried_changes(restored))
    df = plan.join(message, list(PLACE), "left")
    matches = F.coalesce(F.col("body_sha256") == F.col("_planned_sha"), F.lit(False))
    df = df.withColumn("snapshot_matches", matches)
    if in_doubt is not None:
        doubt = in_doubt.select(*PLACE).distinct().withColumn("in_doubt", F.lit(True))
        df = df.join(doubt, list(PLACE), "left")
        df = df.withColumn("in_doubt", F.coalesce(F.col("in_doubt"), F.lit(False)))
    else:
        df = df.withColumn("in_doubt", F.lit(False))
    return df.select(*INPUT_COLUMNS)


def replay_messages(
    rows: DataFrame,
    primaries: Mapping[str, Access],
    skipped: Mapping[Destination, str | None],
    settings: ReplaySettings | None = None,
    failpoint: FailPoint | None = None,
    broken: Mapping[Lane, str] | None = None,
    journal: Location | None = None,
    spread: Spread = IN_TASKS,
) -> DataFrame:
    """Sends ``rows`` (the output of :func:`replay_input`) as ``spread`` says: in its
    Spark tasks (None: one per core; a packing group's batches in one task, in order),
    or in the driver (every batch in order, one after another), and returns one result
    row per message (:data:`syphon.core.schema.REPLAY_RESULT`); the messages of ``broken`` lanes
    (primary, destination, partition key: an earlier wave of the run left one of their
    messages unsent, or the run could not read one) are ``skipped`` with the lane's
    detail (``earlier_batch_failed``, ``earlier_message_unseen``). With ``journal`` (a
    wave's journal folder, as tasks get it), each transfer is journaled
    (:mod:`syphon.job.replay.journal`). Lazy: the sends happen when the result is read, so read
    it exactly once (checkpoint or write it)."""
    from pyspark.sql import functions as F

    needed = {p for p, _ in skipped}
    # a packing group's batches (batch id: group#number) go out in order, in one task
    group = F.regexp_replace(F.col("batch_id"), "#[0-9]+$", "")
    number = F.expr("try_cast(element_at(split(batch_id, '#'), -1) AS BIGINT)")
    partitions = 1 if spread.driver else spread.tasks or service_tasks(rows.sparkSession, None)
    laid_out = rows.repartition(partitions, group).sortWithinPartitions(
        group, number, "batch_position"
    )
    # a primary's credit budget is the run's: each task gets its share
    task_settings = (settings or ReplaySettings()).split(partitions)
    plan = _TaskPlan(
        {p: a for p, a in primaries.items() if p in needed},
        {k: v for k, v in skipped.items() if v},
        task_settings,
        failpoint,
        dict(broken or {}),
        journal,
    )
    return map_in_pandas(laid_out, _ReplayTask(plan), spark_schema(REPLAY_RESULT), spread.driver)


def credit_rates(
    results: pa.Table, plan: pa.Table, budgets: Mapping[str, float], seconds: float
) -> dict[str, int]:
    """The ledger's credit figures for the primaries with a budget: the budget and the
    rate reached (messages sent there per second of the replay's sending), whole credits.
    From the replay's ``results`` and the wave's ``plan`` rows, in the driver."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if not budgets:
        return {}
    sent = results.filter(pc.equal(results.column("outcome"), Outcome.SENT)).select(list(PLACE))
    where = sent.join(
        plan.select([*PLACE, "primary"]), list(PLACE), join_type="inner", use_threads=False
    )
    per_primary = Counter(where.column("primary").to_pylist())
    out: dict[str, int] = {}
    for primary, budget in sorted(budgets.items()):
        out[f"replay.credit_budget.{primary}"] = int(budget)
        out[f"replay.credit_rate.{primary}"] = round(
            per_primary.get(primary, 0) / max(seconds, 1e-3)
        )
    return out


def build_message(rec: Mapping[str, Any], ttl: timedelta | None, now: datetime) -> EncodedMessage:
    """The message a record restores (:func:`syphon.core.rebuild.rebuild` of its backlog
    bytes), with the TTL left and what a repair changes (a TTL it sets counts from
    now); a scheduled time already past is sent at once (unscheduled). A record with
    ``send_as`` goes under that MessageId, its own kept in
    :data:`~syphon.core.dedupe.ORIGINAL_ID_PROPERTY`.

    Raises:
        AmqpFormatError: the record's bytes are not an AMQP message.
    """
    system = decode_changes(rec.get("repair_system"))
    ttl_ms = None if ttl is None else max(1, ttl // timedelta(milliseconds=1))
    ttl_ms, scheduled = repaired_timing(system, ttl_ms, rec["original_scheduled_enqueue_time"])
    if scheduled is not None:
        if scheduled.tzinfo is None:
            scheduled = scheduled.replace(tzinfo=timezone.utc)
        if scheduled <= now:
            scheduled = None
    application = decode_changes(rec.get("repair_application"))
    message_id, send_as = rec["message_id"], rec.get("send_as")
    if send_as is not None:
        application = {**(application or {}), ORIGINAL_ID_PROPERTY: ab.encode_string(message_id)}
    encoded = rebuild(
        bytes(rec["encoded"]),
        session_id=rec["original_session_id"],
        time_to_live_ms=ttl_ms,
        scheduled_enqueue_time=scheduled,
        dropped=dropped_properties(rec.get("backlog_queue")),
        application=application,
        system=system,
        message_id=send_as,
    )
    return EncodedMessage(
        encoded, send_as or message_id, rec["original_session_id"], rec["partition_key"]
    )


@dataclass(frozen=True)
class _TaskPlan:
    """What every replay task is given: the primaries' access (secrets, never shown), the
    destinations to skip, the settings and the armed fail point."""

    primaries: dict[str, Access] = field(repr=False)
    skip: dict[Destination, str | None]
    settings: ReplaySettings
    failpoint: FailPoint | None = None
    #: lanes the run holds back, with why (see :class:`~syphon.job.replay.lanes.Replayer`)
    broken: Mapping[Lane, str] = field(default_factory=dict)
    #: the wave's journal folder (its storage options, secrets included: never shown)
    journal: Location | None = field(default=None, repr=False)


class _ReplayTask:
    """The function every replay task runs (pickled with its secrets, never logged)."""

    def __init__(self, plan: _TaskPlan) -> None:
        self.plan = plan

    def __repr__(self) -> str:  # never show the secrets
        return f"_ReplayTask(primaries={sorted(self.plan.primaries)})"

    def __call__(self, frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd  # type: ignore[import-untyped]
        from pyspark import TaskContext

        pool = SenderPool(self.plan.primaries)
        context = TaskContext.get()
        failpoint = self.plan.failpoint
        journal = TaskJournal(self.plan.journal, uuid.uuid4().hex[:12])  # a task attempt's
        replayer = Replayer(
            self.plan.settings,
            self.plan.skip,
            pool.send,
            build_message,
            attempt=Attempt(
                # a retried task may repeat sends of the failed attempt: everything it
                # sends is marked as a resend of something in doubt
                retried=context is not None and context.attemptNumber() > 0,
                broken=self.plan.broken,
                journal=journal,
                on_sent=failpoint.reached if failpoint is not None else None,
            ),
        )
        columns = names(REPLAY_RESULT)
        try:
            batch: list[dict[str, Any]] = []
            for pdf in frames:
                wanted = zip(pdf["primary"], pdf["destination"], strict=True)
                pool.open(
                    d for d in wanted if d not in replayer.skip and d[0] not in replayer.faulted
                )
                out: list[dict[str, Any]] = []
                for raw in pdf.to_dict("records"):
                    rec = {k: plain_cell(v) for k, v in raw.items()}
                    if batch and rec["batch_id"] != batch[0]["batch_id"]:
                        out.extend(replayer.replay(batch))
                        batch = []
                    batch.append(rec)
                if out:
                    yield pd.DataFrame(out, columns=list(columns))
            if batch:
                yield pd.DataFrame(replayer.replay(batch), columns=list(columns))
        finally:
            try:
                journal.close()  # the last transfer's outcome
            finally:
                pool.close()


#: Skips that leave a lane whole (the message alone stays behind, as within a wave).
_LANE_KEEPING = (Detail.BACKLOG_CHANGED, Detail.EXPIRED_BEFORE_SEND)
#: Details that say a destination, not one message, failed: a later wave skips it whole.
_DESTINATION_DOWN = (
    Detail.DESTINATION_FAILING,
    Detail.DESTINATION_MISSING,
    Detail.DESTINATION_UNAVAILABLE,
)


@dataclass(frozen=True)
class LeftBehind:
    """What a wave's replay left for the next run, so that no later wave of the run
    tries it again: the lanes (primary, destination, partition key) it broke, and the
    destinations that failed as a whole, with why."""

    lanes: frozenset[Lane] = frozenset()
    destinations: Mapping[Destination, str] = field(default_factory=dict)


def left_behind(results: pa.Table, plan: pa.Table) -> LeftBehind:
    """What a wave's replay ``results`` of its ``plan`` rows (both in the driver's memory)
    left behind: the lane of a keyed message that was not sent, unless it alone stays
    behind (its backlog copy changed, its TTL ran out); and a destination the replay
    found missing, disabled or failing. A later wave sends none of their messages
    (:func:`replay_messages`' ``broken`` and ``skipped``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keeping = pc.is_in(results.column("detail"), pa.array(_LANE_KEEPING, pa.string()))
    unsent = results.filter(
        pc.and_(pc.not_equal(results.column("outcome"), Outcome.SENT), pc.invert(keeping))
    )
    whys = unsent.select([*PLACE, "detail"]).rename_columns([*PLACE, "_why"])
    lane = ["primary", "destination", "partition_key_effective"]
    found = plan.select([*PLACE, *lane]).join(
        whys, list(PLACE), join_type="inner", use_threads=False
    )
    lanes, down = set(), {}
    for r in found.select([*lane, "_why"]).to_pylist():
        primary, destination, key, why = r.values()
        if key is not None:
            lanes.add((primary, destination, key))
        if why in _DESTINATION_DOWN:
            down[(primary, destination)] = why
    return LeftBehind(frozenset(lanes), down)
