"""Reconcile transforms on hand-made snapshots (no Service Bus): verdicts and order."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pyspark.sql import functions as F

from support.snapshot_rows import T0, row
from syphon.core.render import spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.job.plan.classify import Against, classify
from syphon.job.plan.reconcile import order_groups
from syphon.job.restore import restore

NOW = T0 + timedelta(hours=2)


CASES: list[tuple[dict[str, Any], str, str | None]] = [
    (row(0, 1, message_id="a", minutes=1), "replay", None),
    (row(1, 1, message_id="a", minutes=2), "duplicate", "duplicate_in_snapshot"),
    (
        row(1, 2, message_id="a", minutes=3, body=b"other"),
        "conflict",
        "message_id_reused_in_snapshot",
    ),
    (row(0, 2, message_id="done", minutes=1), "duplicate", "already_replayed"),
    (row(0, 3, message_id="reused", minutes=1), "conflict", "message_id_reused_after_replay"),
    (row(0, 4, path=None, message_id="nopath"), "invalid", "path_missing"),
    (row(0, 5, path=12345, message_id="intpath"), "invalid", "path_holds_timestamp"),
    (
        row(0, 6, message_id="ping", content_type="application/vnd.ms-servicebus-ping", body=b""),
        "ping",
        None,
    ),
    (row(0, 7, message_id="old", ttl=timedelta(minutes=30)), "expired", "time_to_live_passed"),
    (row(0, 8, message_id="young", ttl=timedelta(hours=5)), "replay", None),
    (
        row(0, 9, message_id="pk", session="s1", partition_key="s2"),
        "invalid",
        "partition_key_differs_from_session_id",
    ),
    (row(0, 10, message_id="big", body=b"x" * 300_000), "invalid", "too_large"),
    (row(0, 11, path="nowhere", message_id="unknown"), "invalid", "destination_unknown"),
    # what only the Python SDK's high-level API could not send: replayed, as it came
    (row(0, 12, message_id="value", body_type="value"), "replay", None),
    (row(0, 23, message_id="sequence", body_type="sequence"), "replay", None),
    (row(0, 13, message_id="badsid", session=b"\xff\xfe"), "invalid", "session_id_not_utf8"),
    (row(0, 14, message_id="badkey", extra={b"\xff": 1}), "invalid", "property_key_not_utf8"),
    (
        row(0, 15, message_id="self", path="contoso-primary/x-servicebus-transfer/3"),
        "invalid",
        "path_is_backlog_queue",
    ),
    (row(0, 18, message_id="binary", extra={b"k": b"\xff"}), "replay", None),
    (row(0, 19, message_id="text", extra={b"k": b"\xc3\xa9"}), "replay", None),
    (row(0, 20, message_id="long", extra={"n": 2**31}), "replay", None),
    (row(0, 24, message_id="when", extra={"t": T0}), "replay", None),
    (
        row(0, 25, message_id="twice", extra=[("k", 1), ("k", 2)]),
        "invalid",
        "property_key_duplicate",
    ),
    (row(0, 21, message_id="negative", extra={"n": -(2**31)}), "replay", None),
    (row(0, 22, message_id="i" * 129), "invalid", "message_id_too_long"),
    (row(0, 16, message_id=None), "replay", None),
    (row(0, 17, message_id=None), "replay", None),
]


def classified(
    spark: Any, rows: list[dict[str, Any]], partitioned: bool = True, sessions: bool = False
) -> Any:
    """``rows`` classified against destinations where ``orders`` is partitioned (one key
    per batch) unless told otherwise."""
    snapshot = spark.createDataFrame(rows, spark_schema(SNAPSHOT))
    destinations = spark.createDataFrame(
        [
            ("contoso-primary", "orders", True, True, sessions, 256 * 1024, partitioned),
            ("contoso-primary", "nowhere", False, None, None, None, None),
            ("other-primary", "orders", True, True, False, 1024, False),  # not this primary's
        ],
        "primary string, destination string, exists boolean, "
        "requires_duplicate_detection boolean, "
        "requires_session boolean, max_message_bytes long, partitioned boolean",
    )
    replayed = spark.createDataFrame(
        [
            ("contoso-primary", "orders", "done", _sha(b"body")),
            ("contoso-primary", "orders", "reused", _sha(b"earlier body")),
            ("other-primary", "orders", "a", _sha(b"body")),  # another namespace's orders
        ],
        "primary string, destination string, message_id string, body_sha256 string",
    )
    return classify(restore(snapshot), Against(F.lit(NOW), destinations, replayed))


def _sha(body: bytes) -> str:
    import hashlib

    return hashlib.sha256(body).hexdigest()


def test_every_message_gets_exactly_its_verdict(spark: Any) -> None:
    rows = [case[0] for case in CASES]
    out = classified(spark, rows).select("backlog_queue", "sequence_number", "verdict", "reason")
    got = {(r[0], r[1]): (r[2], r[3]) for r in out.collect()}
    assert len(got) == len(CASES)  # one row per message, none lost or doubled
    expected = {(c[0]["backlog_queue"], c[0]["sequence_number"]): (c[1], c[2]) for c in CASES}
    assert got == expected


PING = "application/vnd.ms-servicebus-ping"
OLD = timedelta(minutes=30)  # a TTL that has passed by NOW

#: Messages that qualify for more than one verdict (or reason): the first in the
#: module's order of precedence wins.
PRECEDENCE: list[tuple[dict[str, Any], str, str | None]] = [
    (row(2, 0, message_id="a"), "replay", None),
    # a ping that is also expired and invalid
    (row(2, 1, message_id="ping", content_type=PING, ttl=OLD, path=None), "ping", None),
    # invalid beats expired and duplicate (the same MessageId and body as 2/0)
    (
        row(2, 2, message_id="a", minutes=1, ttl=OLD, extra={b"\xff": 1}),
        "invalid",
        "property_key_not_utf8",
    ),
    # expired beats duplicate and conflict
    (row(2, 3, message_id="a", minutes=2, ttl=OLD), "expired", "time_to_live_passed"),
    (
        row(2, 4, message_id="a", minutes=3, ttl=OLD, body=b"other"),
        "expired",
        "time_to_live_passed",
    ),
    # an expired first copy makes no later copy a duplicate: only what could be sent counts
    (row(2, 5, message_id="late", minutes=1, ttl=OLD), "expired", "time_to_live_passed"),
    (row(2, 6, message_id="late", minutes=2), "replay", None),
    # an earlier run's send beats an earlier copy in this snapshot, for both copies
    (row(2, 7, message_id="done", minutes=1), "duplicate", "already_replayed"),
    (row(2, 8, message_id="done", minutes=2), "duplicate", "already_replayed"),
    (row(2, 9, message_id="reused", minutes=1), "conflict", "message_id_reused_after_replay"),
    (row(2, 10, message_id="reused", minutes=2), "conflict", "message_id_reused_after_replay"),
    # the invalid reasons, in their order
    (
        row(2, 11, path=None, message_id="nopath-big", body=b"x" * 300_000),
        "invalid",
        "path_missing",
    ),
    (
        row(2, 12, message_id="both", extra={b"\xff": 1}, session=""),
        "invalid",
        "property_key_not_utf8",
    ),
    (row(2, 13, message_id="i" * 129, session=""), "invalid", "session_id_empty"),
    (row(2, 14, path="nowhere", message_id="i" * 130), "invalid", "message_id_too_long"),
    (row(2, 15, path="nowhere", message_id="r", extra={"n": 1}), "invalid", "destination_unknown"),
    (
        row(2, 16, path="nowhere", message_id="big-nowhere", body=b"x" * 300_000),
        "invalid",
        "destination_unknown",
    ),
    (
        row(2, 17, message_id="big-pk", session="s1", partition_key="s2", body=b"x" * 300_000),
        "invalid",
        "partition_key_differs_from_session_id",
    ),
]


def test_the_first_verdict_and_reason_in_precedence_wins(spark: Any) -> None:
    out = classified(spark, [case[0] for case in PRECEDENCE])
    got = {r[0]: (r[1], r[2]) for r in out.select("sequence_number", "verdict", "reason").collect()}
    assert got == {c[0]["sequence_number"]: (c[1], c[2]) for c in PRECEDENCE}


def test_groups_are_ordered_by_original_enqueue_time_and_spread_is_flagged(spark: Any) -> None:
    rows = [
        row(2, 5, message_id="s-3", session="s", minutes=3),
        row(0, 9, message_id="s-1", session="s", minutes=1),
        row(1, 1, message_id="s-2", session="s", minutes=2),
        row(0, 1, message_id="k-1", partition_key="k", minutes=5),
        row(0, 2, message_id="k-2", partition_key="k", minutes=5),
    ]
    out = order_groups(classified(spark, rows))
    got = {
        r["message_id"]: (
            r["partition_key_effective"],
            r["replay_order"],
            r["group_spread"],
            r["group_size"],
            r["group_span_seconds"],
        )
        for r in out.collect()
    }
    assert got["s-1"] == ("s", 1, True, 3, 120.0)
    assert got["s-2"] == ("s", 2, True, 3, 120.0)
    assert got["s-3"] == ("s", 3, True, 3, 120.0)
    # same enqueue time: the backlog queue then the sequence number decide
    assert got["k-1"] == ("k", 1, False, 2, 0.0)
    assert got["k-2"] == ("k", 2, False, 2, 0.0)


def _replayed(r: Any) -> bytes:
    from syphon.core.rebuild import rebuild

    return rebuild(
        bytes(r["encoded"]),
        session_id=r["original_session_id"],
        time_to_live_ms=None,
        scheduled_enqueue_time=None,
    )


def sdk_packing(messages: list[bytes], limit: int) -> list[int]:
    """Batch numbers as the SDK's own ServiceBusMessageBatch would fill them."""
    from azure.servicebus import ServiceBusMessageBatch
    from azure.servicebus.exceptions import MessageSizeExceededError

    from syphon.servicebus.raw_batch import add_encoded

    numbers, batch, n = [], ServiceBusMessageBatch(max_size_in_bytes=limit), 0
    for m in messages:
        try:
            add_encoded(batch, m)
        except MessageSizeExceededError:
            n += 1
            batch = ServiceBusMessageBatch(max_size_in_bytes=limit)
            add_encoded(batch, m)
        numbers.append(n)
    return numbers


def wire_size(messages: list[bytes], envelope: tuple[str, str | None, str]) -> int:
    """The bytes of the batch as it goes on the wire, its envelope included (what the
    service measures against the entity's limit; the SDK's count leaves the envelope
    out)."""
    from azure.servicebus import ServiceBusMessageBatch
    from azure.servicebus._pyamqp._encode import encode_payload

    from syphon.servicebus.raw_batch import add_encoded

    batch = ServiceBusMessageBatch(max_size_in_bytes=2**62)
    for m in messages:
        add_encoded(batch, m, envelope)
    return len(encode_payload(bytearray(), batch._message))


@pytest.mark.parametrize(
    ("partitioned", "sessions"), [(False, False), (True, False), (False, True)]
)
def test_a_batch_holds_many_keys_unless_the_destination_is_partitioned_or_has_sessions(
    spark: Any, partitioned: bool, sessions: bool
) -> None:
    from syphon.job.plan.batches import plan_batches

    rows = [
        row(
            0,
            i,
            message_id=f"m-{i}",
            minutes=i,
            body=b"small",
            **({"session": key} if sessions else {"partition_key": key}),
        )
        for i, key in enumerate(["b", "a", "c", "a", "b", "a"], start=1)
    ]
    out = plan_batches(order_groups(classified(spark, rows, partitioned, sessions))).collect()
    placed = sorted((r["batch_id"], r["batch_position"], r["message_id"]) for r in out)
    if not (partitioned or sessions):  # one batch: key after key, each in replay order
        assert placed == [
            ("contoso-primary#orders##0", p, m)
            for p, m in enumerate(["m-2", "m-4", "m-6", "m-1", "m-5", "m-3"])
        ]
    else:
        assert placed == [
            ("contoso-primary#orders#a#0", 0, "m-2"),
            ("contoso-primary#orders#a#0", 1, "m-4"),
            ("contoso-primary#orders#a#0", 2, "m-6"),
            ("contoso-primary#orders#b#0", 0, "m-1"),
            ("contoso-primary#orders#b#0", 1, "m-5"),
            ("contoso-primary#orders#c#0", 0, "m-3"),
        ]


def test_batches_fit_the_sdk_measure_and_keep_keys_apart(spark: Any) -> None:
    from syphon.core.sizing import ENVELOPE_RESERVE
    from syphon.job.plan.batches import plan_batches

    rows = (
        [
            row(
                0,
                i,
                message_id=f"k-{i}" + "中" * 120,
                partition_key="k",
                minutes=i,
                body=bytes([i]) * 130_570,
                extra={"n": i, "tag": "x"},
            )
            for i in range(1, 8)
        ]
        + [row(1, i, message_id=None, minutes=i, body=b"small") for i in range(1, 4)]
        + [row(2, 1, message_id="huge", partition_key="h", body=b"x" * 262_100)]
    )
    restored = {
        (r["backlog_queue"], r["sequence_number"]): r
        for r in restore(spark.createDataFrame(rows, spark_schema(SNAPSHOT))).collect()
    }
    out = plan_batches(order_groups(classified(spark, rows))).collect()
    by_id = {r["message_id"] or f"keyless-{r['sequence_number']}": r for r in out}

    keyed = sorted(
        (r for r in out if r["partition_key_effective"] == "k"), key=lambda r: r["replay_order"]
    )
    replayed = [_replayed(restored[(r["backlog_queue"], r["sequence_number"])]) for r in keyed]
    expected = sdk_packing(replayed, 256 * 1024 - ENVELOPE_RESERVE)
    # packed by the bound: here as the SDK packs within the room its envelope leaves, and
    # every planned batch fits the destination's limit on the wire, envelope and all
    assert [int(r["batch_id"].rsplit("#", 1)[1]) for r in keyed] == expected
    for number in set(expected):
        planned = [
            (m, r)
            for m, r in zip(replayed, keyed, strict=True)
            if r["batch_id"].endswith(f"#{number}")
        ]
        first = planned[0][1]
        envelope = (first["message_id"], None, first["partition_key"])
        assert wire_size([m for m, _ in planned], envelope) <= 256 * 1024
    assert expected[-1] > 0  # the group needed several batches
    assert all(r["batch_id"].startswith("contoso-primary#orders#k#") for r in keyed)
    positions = [(r["batch_id"], r["batch_position"]) for r in keyed]
    for batch_id in {b for b, _ in positions}:
        assert sorted(p for b, p in positions if b == batch_id) == list(
            range(sum(1 for b, _ in positions if b == batch_id))
        )
    # keyless messages (no MessageId, so no key even with duplicate detection): own batches
    keyless = [by_id[f"keyless-{i}"] for i in range(1, 4)]
    assert {r["batch_id"] for r in keyless} == {"contoso-primary#orders##0"}
    assert [r["batch_position"] for r in keyless] == [0, 1, 2]
    # a body under the limit whose message is over it
    assert (by_id["huge"]["verdict"], by_id["huge"]["reason"]) == ("invalid", "too_large")
    assert by_id["huge"]["batch_id"] is None
    assert all(r["message_bytes"] > 0 for r in keyed + keyless)


def test_a_repair_is_judged_with_its_added_bytes_and_its_bad_values(spark: Any) -> None:
    from pyspark.sql import functions as F

    from syphon.core.repair import Repair
    from syphon.job.plan.reconcile import reconcile_snapshot, wave_messages
    from syphon.job.repair import check_repair

    rows = [
        row(0, 1, message_id="fits", body=b"x" * 200_000, extra={"n": 1}),
        row(0, 2, message_id="near", body=b"x" * 250_000, extra={"n": 2}),
        row(0, 3, message_id="bad", body=b"x", extra={"n": 300}),
        row(0, 4, message_id="kept", body=b"x"),  # no n: null, left as it is
    ]
    asked = Repair.from_options(
        ["pad=repeat('p', 20000)", "small:byte=typed_properties['n'].int"], []
    )
    repair = check_repair(spark, asked)
    snapshot = spark.createDataFrame(rows, spark_schema(SNAPSHOT))
    now = Against(F.current_timestamp())
    planned = reconcile_snapshot(wave_messages(snapshot, None, repair), now)
    got = {
        r["message_id"]: (r["verdict"], r["reason"], r["detail"], r["repaired"])
        for r in planned.collect()
    }
    assert got == {
        "fits": ("replay", None, None, "set pad; set small"),
        # under the limit as it was, over it with 20,000 more bytes: measured exactly
        "near": ("invalid", "too_large", None, None),
        "bad": (
            "invalid",
            "repair_invalid",
            "--set small: the value is outside byte's range",
            None,
        ),
        "kept": ("replay", None, None, "set pad"),
    }
    plain = reconcile_snapshot(wave_messages(snapshot, None, None), now)  # without a repair
    assert {r["message_id"]: r["verdict"] for r in plain.collect()}["near"] == "replay"


def test_a_tie_in_one_millisecond_is_broken_by_the_senders_stamp_where_it_is(spark: Any) -> None:
    """Two copies of one key in different backlog queues within one millisecond: by the
    backlog alone, queue 0's copy would go first; syphon's sender stamped the copy in
    queue 1 first, and that order is kept. The stamp is an alias: never sent."""

    def stamped(n: int) -> dict[str, Any]:
        return {"x-syphon-sender-id": "sender-a", "x-syphon-sender-sequence": n}

    rows = [
        row(0, 3, message_id="t-2", partition_key="t", minutes=7, extra=stamped(12)),
        row(1, 8, message_id="t-1", partition_key="t", minutes=7, extra=stamped(11)),
        row(2, 4, message_id="t-3", partition_key="t", minutes=7, extra=stamped(13)),
    ]
    out = order_groups(classified(spark, rows))
    got = {r["message_id"]: r["replay_order"] for r in out.collect()}
    assert got == {"t-1": 1, "t-2": 2, "t-3": 3}
    kept = {k for r in out.collect() for k in (r["original_application_properties"] or {})}
    assert not kept & {"x-syphon-sender-id", "x-syphon-sender-sequence"}
