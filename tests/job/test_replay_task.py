"""The replay task of one Spark partition against the local Service Bus, through the real
SDK, without Spark: the task is called with the frames Spark would hand it (replay input
rows laid out by destination and key, in replay order). What it sends, how it cuts the
rows into batches across frames, what it restores of each message, and what it keeps
out of sight."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import pytest
from pyspark.sql import SparkSession

from servicebus_emulator import Emulator, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.core.render import spark_schema
from syphon.core.schema import REPLAY_RESULT, Detail, Field, Outcome, names
from syphon.job.replay.lanes import ReplaySettings
from syphon.job.replay.send import (
    INPUT_COLUMNS,
    _ReplayTask,
    _TaskPlan,
    build_message,
    replay_messages,
)
from syphon.servicebus.access import Access
from syphon.servicebus.sending import SenderPool

PRIMARY = "contoso"
QUEUE = "contoso/x-servicebus-transfer/0"
NOW = datetime.now(timezone.utc)


def primaries(sb: Emulator) -> dict[str, Access]:
    return {
        PRIMARY: Access(PRIMARY, "primary", "localhost", connection_string=sb.connection_string)
    }


def backlog_bytes(seq: int, **fields: Any) -> bytes:
    """A backlog message (as a peek returns it) with ``body-<seq>``, MessageId ``m<seq>``,
    the path alias and ``fields`` (python-qpid-proton's message fields)."""
    from proton import Message

    properties = {"x-ms-path": "orders", **fields.pop("properties", {})}
    message = Message(id=f"m{seq}", body=f"body-{seq}".encode(), properties=properties, **fields)
    message.inferred = True
    return bytes(message.encode())


def row(seq: int, batch: str, destination: str = "orders", **more: Any) -> dict[str, Any]:
    """One replay input row: a message of ``batch`` (keyed by its batch, position = seq).
    Each row's batch id is a string object of its own, as rows from Arrow are: the task
    compares them by value."""
    base: dict[str, Any] = {c: None for c in INPUT_COLUMNS}
    base.update(
        backlog_queue=QUEUE,
        sequence_number=seq,
        primary=PRIMARY,
        destination=destination,
        partition_key_effective=None,
        replay_order=seq,
        batch_id=(batch + "_")[:-1],
        batch_position=seq,
        encoded=backlog_bytes(seq),
        message_id=f"m{seq}",
        original_enqueued_time=NOW,
        in_doubt=False,
        snapshot_matches=True,
    )
    base.update(more)
    return base


def replay_task(
    sb: Emulator, skip: dict[tuple[str, str], str | None] | None = None, failpoint: Any = None
) -> _ReplayTask:
    """The task Spark would run, for the primary ``sb`` (default settings)."""
    return _ReplayTask(_TaskPlan(primaries(sb), skip or {}, ReplaySettings(), failpoint))


def frames(*groups: list[dict[str, Any]]) -> Iterator[pd.DataFrame]:
    for rows in groups:
        yield pd.DataFrame(rows, columns=list(INPUT_COLUMNS))


def run_task(task: _ReplayTask, *groups: list[dict[str, Any]]) -> list[pd.DataFrame]:
    return list(task(frames(*groups)))


def received(sb: Emulator, queue: str = "orders") -> list[Any]:
    return sorted(sb.broker.entity(queue).messages.values(), key=lambda m: m.seq)


class Reached:
    """A fail point that counts what the task reports as sent (never fires)."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def reached(self, n: int) -> None:
        self.counts.append(n)


def test_sends_every_row_in_order_and_a_batch_that_spans_frames_goes_as_one(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    counted = Reached()
    task = replay_task(sb, failpoint=counted)
    # batch b1 is cut by Spark's frame boundary; b2 follows in the second frame
    out = run_task(task, [row(1, "b1"), row(2, "b1")], [row(3, "b1"), row(4, "b2")])

    results = pd.concat(out)
    assert list(results.columns) == list(names(REPLAY_RESULT))
    assert list(results["sequence_number"]) == [1, 2, 3, 4]
    assert set(results["outcome"]) == {Outcome.SENT}
    by_seq = results.set_index("sequence_number")
    # b1 is one transfer although it came in two frames, counted on its first row
    assert (by_seq.loc[1, "transfers"], by_seq.loc[4, "transfers"]) == (1, 1)
    assert by_seq.loc[[2, 3], "transfers"].sum() == 0
    assert [str(m.message_id) for m in received(sb)] == ["m1", "m2", "m3", "m4"]
    assert counted.counts == [1, 2]  # the running count of batches sent


def senders_made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The destinations the task makes a sender for, in order (the pool's own method,
    watched)."""
    made: list[tuple[str, str]] = []
    make = SenderPool.sender

    def watched(self: SenderPool, destination: tuple[str, str]) -> Any:
        if destination not in self.senders:
            made.append(destination)
        return make(self, destination)

    monkeypatch.setattr(SenderPool, "sender", watched)
    return made


def test_a_skipped_destination_is_not_opened_and_its_rows_say_why(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"), QueueSpec("billing"))
    made = senders_made(monkeypatch)
    skip = {(PRIMARY, "gone"): Detail.DESTINATION_MISSING}
    task = replay_task(sb, skip)
    out = pd.concat(run_task(task, [row(1, "b1", "gone"), row(2, "b2"), row(3, "b3", "billing")]))

    outcome = {
        int(r["sequence_number"]): (r["outcome"], r["detail"]) for r in out.to_dict("records")
    }
    assert outcome == {
        1: (Outcome.SKIPPED, Detail.DESTINATION_MISSING),
        2: (Outcome.SENT, None),
        3: (Outcome.SENT, None),
    }
    assert [str(m.message_id) for m in received(sb)] == ["m2"]
    assert sorted(made) == [(PRIMARY, "billing"), (PRIMARY, "orders")]


def test_a_lane_an_earlier_wave_broke_reaches_the_task_and_is_not_sent(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """The lanes an earlier wave of the run broke reach every task of a later wave: their
    messages stay in the backlog (``earlier_batch_failed``), the rest is sent."""
    sb = servicebus_emulator(QueueSpec("orders"))
    plan = _TaskPlan(
        primaries(sb),
        {},
        ReplaySettings(),
        None,
        {(PRIMARY, "orders", "late"): "earlier_batch_failed"},
    )
    out = pd.concat(
        run_task(
            _ReplayTask(plan),
            [
                row(1, "b1", partition_key_effective="late"),
                row(2, "b2", partition_key_effective="ok"),
            ],
        )
    )
    outcome = {
        int(r["sequence_number"]): (r["outcome"], r["detail"]) for r in out.to_dict("records")
    }
    assert outcome == {1: (Outcome.SKIPPED, Detail.EARLIER_BATCH_FAILED), 2: (Outcome.SENT, None)}
    assert [str(m.message_id) for m in received(sb)] == ["m2"]


def test_after_its_namespace_fails_no_sender_is_opened_there(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary goes away after the first frame (whose first batch went out; a batch
    goes when the next one starts): the second frame's first row sends the batch still
    pending, which finds the namespace gone, and the third frame's destinations there
    are neither opened nor sent to."""
    sb = servicebus_emulator(QueueSpec("orders"), QueueSpec("a"), QueueSpec("b"))
    made = senders_made(monkeypatch)

    def frames_then_outage() -> Iterator[pd.DataFrame]:
        yield from frames([row(1, "b1"), row(2, "b2")])
        sb.stop()
        yield from frames([row(3, "b3")], [row(4, "b4", "a"), row(5, "b5", "b")])

    out = pd.concat(list(replay_task(sb)(frames_then_outage())))
    outcome = dict(zip(out["sequence_number"], out["outcome"], strict=True))
    # each row's outcome and detail (the error's name) in the message: seen once, under
    # a whole suite's load, the pending batch's send failed without a namespace fault
    told = out[["sequence_number", "outcome", "detail"]].values.tolist()
    assert outcome[1] == Outcome.SENT, told
    assert outcome[2] != Outcome.SENT, told
    assert [outcome[s] for s in (3, 4, 5)] == [Outcome.SKIPPED] * 3, told
    assert set(out[out["sequence_number"] > 2]["detail"]) == {Detail.NAMESPACE_FAULT}, told
    assert made == [(PRIMARY, "orders")]  # and again after it failed: never a or b


@pytest.mark.parametrize("attempt", [0, 1])
def test_a_retried_task_marks_everything_it_sends_as_resent_in_doubt(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch, attempt: int
) -> None:
    """A task Spark runs again after a failed attempt may repeat that attempt's sends.
    Local mode never retries a task, so Spark's task context is stood in for, with the
    attempt number Spark would give."""
    from pyspark import TaskContext

    class Attempt:
        def attemptNumber(self) -> int:  # noqa: N802 (Spark's name)
            return attempt

    monkeypatch.setattr(TaskContext, "get", classmethod(lambda cls: Attempt()))
    sb = servicebus_emulator(QueueSpec("orders"))
    out = pd.concat(run_task(replay_task(sb), [row(1, "b1"), row(2, "b2", in_doubt=True)]))
    details = dict(zip(out["sequence_number"], out["detail"], strict=True))
    in_doubt = Detail.RESENT_IN_DOUBT
    assert details == ({1: in_doubt, 2: in_doubt} if attempt else {1: None, 2: in_doubt})
    assert set(out["outcome"]) == {Outcome.SENT}


def test_an_empty_partition_sends_nothing_and_yields_nothing(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    task = replay_task(sb)
    assert run_task(task, []) == []
    assert received(sb) == []


def test_the_replayed_message_keeps_its_headers_and_a_past_schedule_is_sent_at_once(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    task = replay_task(sb)
    headers = backlog_bytes(
        1,
        content_type="application/json",
        correlation_id="corr-1",
        subject="created",
        address="billing",
        reply_to="replies",
        reply_to_group_id="rs-1",
        properties={"tenant": "t1", "n": 7},
    )
    past = (NOW - timedelta(hours=1)).replace(tzinfo=None)  # naive: read as UTC
    future = NOW + timedelta(hours=1)
    out = pd.concat(
        run_task(
            task,
            [
                row(1, "b1", encoded=headers, original_scheduled_enqueue_time=past),
                row(2, "b2", original_scheduled_enqueue_time=future),
            ],
        )
    )
    assert set(out["outcome"]) == {Outcome.SENT}

    entity = sb.broker.entity("orders")
    first = entity.messages[min(entity.messages)]
    assert first.scheduled_ms is None  # its time had passed: sent at once
    p = first.parsed
    # the AMQP properties section: to, subject, reply-to, correlation-id, content-type,
    # reply-to-group-id
    assert str(p.message_id) == "m1"
    assert [p.prop(i) for i in (2, 3, 4, 5, 6, 12)] == [
        "billing",
        "created",
        "replies",
        "corr-1",
        "application/json",
        "rs-1",
    ]
    props = {
        k.decode() if isinstance(k, bytes) else k: v
        for k, v in p.get_application_properties().items()
    }
    assert props == {"tenant": "t1", "n": 7}  # the path alias is gone
    (later,) = [m for m in entity.messages.values() if str(m.message_id) == "m2"]
    assert later.scheduled_ms == int(future.timestamp() * 1000)  # still ahead: scheduled


def _header_and_schedule(message: Any) -> tuple[int | None, datetime | None]:
    from syphon.core import amqp_bytes as ab

    parts = {s.code: s for s in ab.sections(message.encoded)}
    ttl = None
    if ab.HEADER in parts:
        ttl = ab.decode(ab.compound_items(parts[ab.HEADER].value)[2])
    scheduled = None
    if ab.MESSAGE_ANNOTATIONS in parts:
        scheduled = {
            ab.decode(k): ab.decode(v)
            for k, v in ab.map_entries(parts[ab.MESSAGE_ANNOTATIONS].value)
        }.get("x-opt-scheduled-enqueue-time")
    return ttl, scheduled


def test_build_message_sets_the_ttl_left_and_only_a_schedule_still_ahead() -> None:
    message = build_message(row(1, "b1"), timedelta(minutes=5), NOW)
    assert _header_and_schedule(message) == (300_000, None)
    assert (message.message_id, message.session_id) == ("m1", None)
    # due now (an equal time, not the same object) is not in the future, nor is the past
    ahead = NOW + timedelta(seconds=1)
    same = datetime.fromtimestamp(NOW.timestamp(), timezone.utc)
    at_now = build_message(row(1, "b1", original_scheduled_enqueue_time=same), None, NOW)
    assert _header_and_schedule(at_now) == (None, None)
    past = NOW - timedelta(minutes=1)
    gone_by = build_message(row(1, "b1", original_scheduled_enqueue_time=past), None, NOW)
    assert _header_and_schedule(gone_by) == (None, None)
    soon = build_message(row(1, "b1", original_scheduled_enqueue_time=ahead), None, NOW)
    assert _header_and_schedule(soon)[1] == ahead.replace(
        microsecond=ahead.microsecond // 1000 * 1000
    )
    # a TTL beyond what the header holds (a uint of milliseconds) is sent as the longest
    longest = build_message(row(1, "b1"), timedelta(days=400), NOW)
    assert _header_and_schedule(longest)[0] == 2**32 - 1
    # under a millisecond left is still a TTL, never none (which would be infinite)
    assert _header_and_schedule(build_message(row(1, "b1"), timedelta(microseconds=5), NOW))[0] == 1
    assert "body" not in repr(message)


def test_a_repaired_ttl_counts_from_the_send_and_a_repaired_schedule_replaces_the_old() -> None:
    from syphon.core.repaired import encode_changes, encode_value

    later = (NOW + timedelta(hours=3)).replace(microsecond=0)  # AMQP keeps milliseconds
    system = encode_changes(
        {
            "time_to_live": encode_value(7200, "milliseconds"),
            "scheduled_enqueue_time": encode_value(later, "timestamp"),
        }
    )
    repaired = row(1, "b1", original_scheduled_enqueue_time=NOW, repair_system=system)
    assert _header_and_schedule(build_message(repaired, timedelta(minutes=5), NOW)) == (
        7_200_000,
        later,
    )
    # removed: no TTL (the destination's default), no schedule
    removed = row(1, "b1", repair_system=encode_changes({"time_to_live": None}))
    assert _header_and_schedule(build_message(removed, timedelta(minutes=5), NOW)) == (None, None)


def test_the_task_shows_no_secret_and_its_plan_cannot_change(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    task = replay_task(sb)
    for text in (repr(task), repr(task.plan), str(task.plan)):
        assert "SharedAccessKey" not in text
        assert sb.connection_string not in text
    assert repr(task) == "_ReplayTask(primaries=['contoso'])"
    # one plan for every task of the replay: no task can change what the others see
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.plan.skip = {}  # type: ignore[misc]


#: The replay input's columns and types (what :func:`syphon.job.replay.send.replay_input` gives).
INPUT = (
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
    Field("primary", "string"),
    Field("destination", "string"),
    Field("partition_key_effective", "string"),
    Field("replay_order", "int"),
    Field("batch_id", "string"),
    Field("batch_position", "long"),
    Field("encoded", "binary"),
    Field("message_id", "string"),
    Field("partition_key", "string"),
    Field("original_session_id", "string"),
    Field("original_time_to_live_ticks", "long"),
    Field("original_scheduled_enqueue_time", "timestamp"),
    Field("original_enqueued_time", "timestamp"),
    Field("in_doubt", "boolean"),
    Field("snapshot_matches", "boolean"),
    Field("repair_application", "binary"),
    Field("repair_system", "binary"),
    Field("send_as", "string"),
)


@pytest.mark.spark
def test_spark_lays_the_sends_out_by_destination_and_key_in_replay_order(
    spark: SparkSession, servicebus_emulator: EmulatorFactory
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"), QueueSpec("audit"))
    assert names(INPUT) == INPUT_COLUMNS
    # replay order: k1 = 1, 2 (batch a), 3 (batch b); k2 = 4, 5 (batch c, d); keyless
    # batches e, f to "audit"; "gone" is skipped; rows handed over in reverse order
    # (batch ids as the plan writes them: packing group, then the batch's number)
    rows = [
        row(1, "p#orders#k1#0", partition_key_effective="k1", replay_order=1),
        row(2, "p#orders#k1#0", partition_key_effective="k1", replay_order=2),
        row(3, "p#orders#k1#1", partition_key_effective="k1", replay_order=3),
        row(4, "p#orders#k2#0", partition_key_effective="k2", replay_order=1),
        row(5, "p#orders#k2#1", partition_key_effective="k2", replay_order=2),
        row(6, "p#audit##0", "audit", replay_order=1),
        row(7, "p#audit##1", "audit", replay_order=1),
        row(8, "p#gone##0", "gone", replay_order=1),
    ]
    df = spark.createDataFrame(
        [tuple(r[c] for c in INPUT_COLUMNS) for r in reversed(rows)], spark_schema(INPUT)
    )
    skipped = {
        (PRIMARY, "orders"): None,
        (PRIMARY, "audit"): None,
        (PRIMARY, "gone"): Detail.DESTINATION_UNAVAILABLE,
    }
    other = Access(
        "elsewhere",
        "primary",
        "localhost",
        connection_string="Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=never-used",
    )
    results = replay_messages(df, {**primaries(sb), "elsewhere": other}, skipped).collect()

    outcome = {r["sequence_number"]: (r["outcome"], r["detail"]) for r in results}
    assert outcome == {
        **{s: (Outcome.SENT, None) for s in range(1, 8)},
        8: (Outcome.SKIPPED, Detail.DESTINATION_UNAVAILABLE),
    }
    orders = [str(m.message_id) for m in received(sb, "orders")]
    for key in (["m1", "m2", "m3"], ["m4", "m5"]):  # each key's order kept
        assert [m for m in orders if m in key] == key
    assert sorted(str(m.message_id) for m in received(sb, "audit")) == ["m6", "m7"]
    # one transfer per planned batch
    assert sum(r["transfers"] for r in results) == 6
