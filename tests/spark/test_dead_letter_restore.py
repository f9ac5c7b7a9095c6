"""Dead-lettered messages restored for a re-drive (no Service Bus): each goes back to its
entity (or the entity's target) in the source namespace, with its own session id and
properties but the service's dead-letter reason and description, never expired by a
time to live counted from its first enqueue."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pyspark.sql import functions as F

from support.snapshot_rows import T0, encode_message, snapshot_row
from syphon.core.render import spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.core.selection import Selection
from syphon.job.plan.classify import Against
from syphon.job.plan.reconcile import reconcile_snapshot, wave_messages
from syphon.job.restore import Redrive

NOW = T0 + timedelta(days=3)
DL = [("DeadLetterReason", "MaxDeliveryCountExceeded"), ("DeadLetterErrorDescription", "10")]


def dead_lettered(
    entity: str,
    seq: int,
    message_id: str,
    minutes: int = 0,
    props: list[tuple[Any, Any]] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    encoded = encode_message([*(props or []), *DL], message_id=message_id)
    row = snapshot_row(encoded, seq)
    row.update(
        backlog_queue=f"{entity}/$DeadLetterQueue",
        message_id=message_id,
        enqueued_time=T0 + timedelta(minutes=minutes),
        **fields,
    )
    return row


def test_dead_letters_go_back_to_their_entity_with_their_own_envelope(spark: Any) -> None:
    rows = [
        dead_lettered("orders", 1, "a", 2, [("tenant", "contoso")], session_id="s1"),
        dead_lettered("orders", 2, "b", 1, session_id="s1", time_to_live_ms=60_000),
        dead_lettered(
            "billing", 1, "c", 0, [("x-ms-path", "elsewhere")], dead_letter_source="billing-in"
        ),
        dead_lettered("orders", 3, "a", 3, [("tenant", "contoso")], session_id="s1"),
    ]
    snapshot = spark.createDataFrame(rows, spark_schema(SNAPSHOT))
    where = Redrive("contoso", {"billing": "billing-retry"})
    planned = reconcile_snapshot(wave_messages(snapshot, where, None), Against(F.lit(NOW)))
    out = {(r["backlog_queue"], r["sequence_number"]): r for r in planned.collect()}
    a, b, c = (
        out[("orders/$DeadLetterQueue", 1)],
        out[("orders/$DeadLetterQueue", 2)],
        out[("billing/$DeadLetterQueue", 1)],
    )
    assert {(r["primary"], r["destination"]) for r in (a, b)} == {("contoso", "orders")}
    # a target, and an x-ms-path of the sender's own is only a property here
    assert (c["primary"], c["destination"], c["verdict"]) == ("contoso", "billing-retry", "replay")
    # its own session, in its key's order (b was first enqueued first); its TTL, counted
    # from its first enqueue three days ago, neither expires it nor goes with it
    assert (b["verdict"], b["original_session_id"], b["original_time_to_live_ticks"]) == (
        "replay",
        "s1",
        None,
    )
    assert (b["replay_order"], a["replay_order"]) == (1, 2)
    dup = out[("orders/$DeadLetterQueue", 3)]
    assert (dup["verdict"], dup["reason"]) == ("duplicate", "duplicate_in_snapshot")
    # what the audit records of where each came from and why it was dead-lettered
    assert [
        (
            r["source_entity"],
            r["dead_letter_reason"],
            r["dead_letter_description"],
            r["dead_letter_error_source"],
        )
        for r in (a, c)
    ] == [
        ("orders", "MaxDeliveryCountExceeded", "10", None),
        ("billing", "MaxDeliveryCountExceeded", "10", "billing-in"),
    ]


def test_active_messages_of_an_entity_keep_their_lifetime(spark: Any) -> None:
    """A namespace source's active messages (not dead-lettered) keep their time to live,
    counted from their first enqueue, and their scheduled time; they have no dead-letter
    reason even when a sender set a property of that name."""
    later = T0 + timedelta(days=4)
    rows = [
        dead_lettered("orders", 1, "a", time_to_live_ms=60_000),
        dead_lettered(
            "orders", 2, "b", time_to_live_ms=10 * 86_400_000, scheduled_enqueue_time=later
        ),
    ]
    for row in rows:
        row["backlog_queue"] = "orders"
    snapshot = spark.createDataFrame(rows, spark_schema(SNAPSHOT))
    messages = wave_messages(snapshot, Redrive("contoso"), None)
    planned = reconcile_snapshot(messages, Against(F.lit(NOW)))
    out = {r["message_id"]: r for r in planned.collect()}
    assert (out["a"]["verdict"], out["a"]["original_time_to_live_ticks"]) == (
        "expired",
        60_000 * 10_000,
    )
    b = out["b"]
    assert (b["verdict"], b["destination"], b["source_entity"]) == ("replay", "orders", "orders")
    assert b["original_scheduled_enqueue_time"] == later.replace(tzinfo=None)  # Spark: naive UTC
    assert (b["dead_letter_reason"], b["dead_letter_description"]) == (None, None)


def test_a_selection_sees_the_dead_letter_reason(spark: Any) -> None:
    rows = [dead_lettered("orders", 1, "a"), dead_lettered("orders", 2, "b")]
    snapshot = spark.createDataFrame(rows, spark_schema(SNAPSHOT))

    def taken(where: str | None = None, reasons: tuple[str, ...] = ()) -> list[str]:
        selection = Selection(where=where, dead_letter_reasons=reasons)
        messages = wave_messages(snapshot, Redrive("contoso"), None)
        planned = reconcile_snapshot(messages, Against(F.lit(NOW)), selection)
        return sorted(r["message_id"] for r in planned.collect() if r["verdict"] == "replay")

    assert taken("properties['DeadLetterReason'] = 'MaxDeliveryCountExceeded'") == ["a", "b"]
    assert taken("properties['DeadLetterReason'] = 'TTLExpiredException'") == []
    assert taken("dead_letter_description = '10'") == ["a", "b"]
    assert taken(reasons=("TTLExpiredException", "MaxDeliveryCountExceeded")) == ["a", "b"]
    assert taken(reasons=("TTLExpiredException",)) == []
