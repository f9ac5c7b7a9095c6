"""The settle task against the local Service Bus, through the real SDK, without Spark: the
task is called with the rows Spark would hand it (its queues' settle actions). What it
completes, dead-letters and leaves, and each way it stops."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator import Emulator, ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.paired_env import secondary_access
from support.quick_client import QuickClient
from syphon.core.schema import Detail, Outcome
from syphon.job.settle.actions import COMPLETE, DEAD_LETTER, LEAVE
from syphon.job.settle.by_locks import LOCK_LOST
from syphon.job.settle.passes import _SettleTask
from syphon.servicebus.access import Access

QUEUE = "contoso-primary/x-servicebus-transfer/0"


def park(sb: Emulator, ids: list[str]) -> dict[str, int]:
    """Sends messages with these MessageIds; returns their sequence numbers."""
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(i.encode(), message_id=i) for i in ids])
        with client.get_queue_receiver(QUEUE) as receiver:
            peeked: list[Any] = []
            while page := receiver.peek_messages(
                250, sequence_number=(int(peeked[-1].sequence_number or 0) + 1 if peeked else 1)
            ):
                peeked += page  # a peek answers a page at most
    return {str(m.message_id): int(m.sequence_number or 0) for m in peeked}


def actions(rows: list[tuple[int, str, str | None, str]]) -> pd.DataFrame:
    """One queue's settle actions as Spark hands them to the task: through Arrow, so the
    strings are the task's own copies, never the module's constants."""
    frame = pd.DataFrame(
        [(QUEUE, seq, action, reason, verdict) for seq, action, reason, verdict in rows],
        columns=["backlog_queue", "sequence_number", "action", "reason", "verdict"],
    )
    return pa.Table.from_pandas(frame, preserve_index=False).to_pandas()


def settle_task(sb_access: Access, run_id: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The task as Spark runs it (frames in, frames out), over one frame of actions."""
    task = _SettleTask(sb_access, run_id)
    return lambda todo: pd.concat(list(task(iter([todo]))), ignore_index=True)


def by_seq(frame: pd.DataFrame) -> dict[int, dict[str, Any]]:
    return {int(r["sequence_number"]): r for r in frame.to_dict("records")}


def test_completes_dead_letters_with_the_reason_and_gives_back_what_it_leaves(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec(QUEUE))
    seq = park(sb, ["sent", "paused", "bad", "late"])
    todo = actions(
        [
            (seq["sent"], COMPLETE, None, "replay"),
            (seq["paused"], LEAVE, None, "replay"),
            (seq["bad"], DEAD_LETTER, "destination_unknown", "invalid"),
        ]
    )  # "late" arrived after the snapshot: not in the plan
    out = by_seq(settle_task(secondary_access(sb), "run-1")(todo))

    assert (out[seq["sent"]]["outcome"], out[seq["sent"]]["detail"]) == (Outcome.COMPLETED, None)
    assert (out[seq["bad"]]["outcome"], out[seq["bad"]]["detail"]) == (
        Outcome.DEAD_LETTERED,
        "destination_unknown",
    )
    paused = out[seq["paused"]]
    assert (paused["outcome"], paused["detail"], paused["abandoned"]) == (Outcome.LEFT, None, 1)
    # the plan's three were received once each (the run's count of receives), what was
    # left given back; "late", after the plan's last message, was never received
    assert {m: out[seq[m]]["received"] for m in ("sent", "paused", "bad")} == {
        "sent": 1,
        "paused": 1,
        "bad": 1,
    }
    assert {m: out[seq[m]]["abandoned"] for m in ("sent", "bad")} == {"sent": 0, "bad": 0}
    assert seq["late"] not in out
    assert 0 not in out

    entity = sb.broker.entity(QUEUE)
    late = next(m for m in entity.messages.values() if str(m.message_id) == "late")
    assert late.delivery_count == 0
    # what was left is available again at once: given back, not waiting out its
    # one-minute lock
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver(QUEUE, max_wait_time=5) as receiver:
            again = receiver.receive_messages(10, max_wait_time=5)
            assert sorted(str(m.message_id) for m in again) == ["late", "paused"]
            for m in again:
                receiver.abandon_message(m)
    assert entity.dlq is not None
    (dead,) = entity.dlq.messages.values()
    assert str(dead.message_id) == "bad"
    props = {
        k.decode() if isinstance(k, bytes) else k: v
        for k, v in dead.parsed.get_application_properties().items()
    }
    assert props["DeadLetterReason"] == "destination_unknown"
    assert props["DeadLetterErrorDescription"] == "syphon run run-1: invalid"


def test_a_wave_s_pass_receives_its_plan_and_nothing_of_the_later_waves(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """A wave's plan is a prefix of each queue: its pass receives exactly that prefix,
    one row per message of the plan, and never locks (or raises the delivery count of)
    a later wave's message, even where a page would hold more."""
    sb = servicebus_emulator(QueueSpec(QUEUE))
    ids = [f"m{i}" for i in range(40)]
    seq = park(sb, ids)
    planned = ids[:7]
    out = settle_task(secondary_access(sb), "run-w")(
        actions([(seq[m], COMPLETE, None, "replay") for m in planned])
    )
    assert sorted(int(s) for s in out["sequence_number"]) == sorted(seq[m] for m in planned)
    assert set(out["outcome"]) == {Outcome.COMPLETED}
    assert int(out["received"].sum()) == len(planned)
    counts = {
        str(m.message_id): m.delivery_count for m in sb.broker.entity(QUEUE).messages.values()
    }
    assert counts == dict.fromkeys(ids[7:], 0)


def test_an_earlier_wave_s_left_over_at_the_head_is_given_back_and_counted_not_audited(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """Messages an earlier wave left (a failed key) stand at the queue's head, before
    this wave's: the pass must receive them to reach its own, gives them back, and counts
    them in one ``given_back`` row (sequence number 0) rather than as messages of the
    wave; what follows the plan stays untouched."""
    sb = servicebus_emulator(QueueSpec(QUEUE))
    ids = [f"m{i}" for i in range(10)]
    seq = park(sb, ids)
    planned = ids[2:5]  # m0, m1: an earlier wave's left-overs
    out = by_seq(
        settle_task(secondary_access(sb), "run-h")(
            actions([(seq[m], COMPLETE, None, "replay") for m in planned])
        )
    )
    assert {m: out[seq[m]]["outcome"] for m in planned} == dict.fromkeys(planned, Outcome.COMPLETED)
    given = out[0]
    assert (given["outcome"], given["received"], given["abandoned"], given["requests"]) == (
        Outcome.GIVEN_BACK,
        2,
        2,
        1,
    )
    assert set(out) == {0, *(seq[m] for m in planned)}
    counts = {
        str(m.message_id): m.delivery_count for m in sb.broker.entity(QUEUE).messages.values()
    }
    assert counts == {"m0": 1, "m1": 1, **dict.fromkeys(ids[5:], 0)}


def test_a_queue_with_one_action_is_settled(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec(QUEUE))
    seq = park(sb, ["only"])
    todo = actions([(seq["only"], COMPLETE, None, "replay")])
    out = by_seq(settle_task(secondary_access(sb), "run-5")(todo))
    assert (out[seq["only"]]["outcome"], out[seq["only"]]["received"]) == (Outcome.COMPLETED, 1)
    assert not sb.broker.entity(QUEUE).messages


def test_a_queue_with_more_to_settle_than_one_receive_brings_is_settled_to_the_end(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """A pass receives page after page until everything it must settle has come: one
    more than a page and a half of messages to complete, all completed."""
    from syphon.job.settle.passes import RECEIVE_PAGE

    sb = servicebus_emulator(QueueSpec(QUEUE))
    seq = park(sb, [f"m{i}" for i in range(RECEIVE_PAGE * 3 // 2 + 1)])
    out = by_seq(
        settle_task(secondary_access(sb), "run-6")(
            actions([(s, COMPLETE, None, "replay") for s in seq.values()])
        )
    )
    assert {r["outcome"] for r in out.values()} == {Outcome.COMPLETED}
    assert len(out) == len(seq)
    assert not sb.broker.entity(QUEUE).messages


def test_a_message_locked_elsewhere_is_left_not_received(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec(QUEUE))
    seq = park(sb, ["held", "free"])
    with (
        QuickClient.from_connection_string(sb.connection_string) as client,
        client.get_queue_receiver(QUEUE) as other,
    ):
        (locked,) = other.receive_messages(1, max_wait_time=5)  # another consumer holds it
        assert str(locked.message_id) == "held"
        todo = actions(
            [(seq["held"], COMPLETE, None, "replay"), (seq["free"], COMPLETE, None, "replay")]
        )
        out = by_seq(settle_task(secondary_access(sb), "run-2")(todo))
        other.abandon_message(locked)
    assert (out[seq["free"]]["outcome"], out[seq["free"]]["detail"]) == (Outcome.COMPLETED, None)
    assert (out[seq["held"]]["outcome"], out[seq["held"]]["detail"]) == (
        Outcome.LEFT,
        Detail.NOT_RECEIVED,
    )
    assert (out[seq["held"]]["received"], out[seq["free"]]["received"]) == (0, 1)
    assert [str(m.message_id) for m in sb.broker.entity(QUEUE).messages.values()] == ["held"]


def test_a_pass_stops_a_page_beyond_the_plans_last_message(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What follows the plan's last message in a queue is a later wave's (or arrived
    after the snapshot): a pass waiting for a message locked elsewhere stops at the
    first page that goes beyond the plan, instead of receiving (and locking, and raising
    the delivery count of) the rest of the queue."""
    from syphon.job.settle import passes as settle

    monkeypatch.setattr(settle, "RECEIVE_PAGE", 3)
    sb = servicebus_emulator(QueueSpec(QUEUE))
    ids = [f"m{i}" for i in range(12)]
    seq = park(sb, ids)
    planned = ids[:4]
    with (
        QuickClient.from_connection_string(sb.connection_string) as client,
        client.get_queue_receiver(QUEUE) as other,
    ):
        (locked,) = other.receive_messages(1, max_wait_time=5)
        assert str(locked.message_id) == "m0"
        todo = actions([(seq[m], COMPLETE, None, "replay") for m in planned])
        out = by_seq(settle_task(secondary_access(sb), "run-8")(todo))
        other.abandon_message(locked)
    assert out[seq["m0"]]["detail"] == Detail.NOT_RECEIVED
    assert {out[seq[m]]["outcome"] for m in planned[1:]} == {Outcome.COMPLETED}
    # pages of three: m1-m3, then one (all the plan still has to come): m4, beyond m3,
    # the plan's last, given back and counted, not audited; stop there
    assert sorted(int(s) for s in out) == sorted([0, *(seq[m] for m in planned)])
    assert (out[0]["outcome"], out[0]["received"]) == (Outcome.GIVEN_BACK, 1)
    entity = sb.broker.entity(QUEUE)
    counts = {str(m.message_id): m.delivery_count for m in entity.messages.values()}
    assert counts["m4"] == 1
    assert {m: counts[m] for m in ids[5:]} == dict.fromkeys(ids[5:], 0)


def test_a_page_beyond_the_plan_that_missed_a_message_given_back_meanwhile_goes_on(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page can go beyond the plan and still miss one of its messages: the SDK releases
    what arrives while no receive waits, and the queue hands it out again after what it
    sent meanwhile (here: another consumer gives m3 back while m4 is settled). The
    pass goes on, asking for only what it still has to settle, and settles it; the
    message after the plan was received once, by the page that went beyond."""
    from syphon.job.settle import passes as settle
    from syphon.servicebus import locked as queue_locks

    monkeypatch.setattr(settle, "RECEIVE_PAGE", 3)
    sb = servicebus_emulator(QueueSpec(QUEUE))
    ids = [f"m{i}" for i in range(12)]
    seq = park(sb, ids)
    planned = ids[:5]
    real = queue_locks.settle_tokens
    completions: list[int] = []
    with (
        QuickClient.from_connection_string(sb.connection_string) as client,
        client.get_queue_receiver(QUEUE) as other,
    ):
        taken = other.receive_messages(4, max_wait_time=5)
        for m in taken[:3]:
            other.abandon_message(m)
        (locked,) = taken[3:]  # the other consumer holds m3 only
        assert str(locked.message_id) == "m3"

        def given_back_meanwhile(receiver: Any, tokens: Any, status: str, *args: Any) -> None:
            real(receiver, tokens, status, *args)
            if status == "completed":
                completions.append(len(tokens))
                if len(completions) == 2:  # the second page's: m4
                    other.abandon_message(locked)

        monkeypatch.setattr(queue_locks, "settle_tokens", given_back_meanwhile)
        todo = actions([(seq[m], COMPLETE, None, "replay") for m in planned])
        out = by_seq(settle_task(secondary_access(sb), "run-9")(todo))
    assert {m: (out[seq[m]]["outcome"], out[seq[m]]["detail"]) for m in planned} == dict.fromkeys(
        planned, (Outcome.COMPLETED, None)
    )
    # pages m0-m2, m4-m5 (what the plan still has to come; m5 beyond m4, the plan's
    # last, with m4 to settle), then one: m3
    assert sorted(int(s) for s in out) == sorted([0, *(seq[m] for m in planned)])
    assert (out[0]["outcome"], out[0]["received"], out[0]["abandoned"]) == (
        Outcome.GIVEN_BACK,
        1,
        1,
    )
    counts = {
        str(m.message_id): m.delivery_count for m in sb.broker.entity(QUEUE).messages.values()
    }
    assert set(counts) == set(ids[5:])
    assert {m: counts[m] for m in ids[6:]} == dict.fromkeys(ids[6:], 0)


def test_a_queue_that_cannot_be_read_leaves_everything_with_the_reason(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec(QUEUE))
    seq = park(sb, ["a", "b"])
    todo = actions([(seq["a"], COMPLETE, None, "replay"), (seq["b"], LEAVE, None, "replay")])

    sb.make_unavailable(QUEUE)  # the entity refuses: a receive error of its class
    out = by_seq(settle_task(secondary_access(sb), "run-3")(todo))
    assert out[seq["a"]]["outcome"] == Outcome.LEFT
    assert str(out[seq["a"]]["detail"]).startswith(Detail.RECEIVE_FAILED)
    assert (out[seq["b"]]["outcome"], out[seq["b"]]["detail"]) == (Outcome.LEFT, None)

    sb.clear_faults()
    sb.make_namespace_unavailable()  # the whole namespace is down
    out = by_seq(settle_task(secondary_access(sb), "run-4")(todo))
    assert (out[seq["a"]]["outcome"], out[seq["a"]]["detail"]) == (
        Outcome.LEFT,
        Detail.NAMESPACE_FAULT,
    )
    sb.clear_faults()
    assert len(sb.broker.entity(QUEUE).messages) == 2  # nothing was removed


def test_a_page_is_settled_in_one_request_per_outcome(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec(QUEUE))
    ids = [f"m{i}" for i in range(12)]
    seq = park(sb, ids)
    todo = actions(
        [(seq[ids[0]], LEAVE, None, "replay")]  # before the rest: received, given back
        + [(seq[m], COMPLETE, None, "replay") for m in ids[1:9]]
        + [(seq[m], DEAD_LETTER, "destination_unknown", "invalid") for m in ids[9:11]]
        + [(seq[m], DEAD_LETTER, "message_id_reused", "conflict") for m in ids[11:12]]
    )
    out = by_seq(settle_task(secondary_access(sb), "run-6")(todo))
    # on the wire: one request per outcome group, each with its page's lock tokens
    assert sorted(sb.broker.disposition_requests) == sorted(
        [
            (QUEUE, "completed", 8),
            (QUEUE, "suspended", 2),
            (QUEUE, "suspended", 1),
            (QUEUE, "abandoned", 1),
        ]
    )
    assert sum(r["requests"] for r in out.values()) == 4
    assert [out[seq[m]]["outcome"] for m in ids] == (
        [Outcome.LEFT] + [Outcome.COMPLETED] * 8 + [Outcome.DEAD_LETTERED] * 3
    )
    assert [str(m.message_id) for m in sb.broker.entity(QUEUE).messages.values()] == ["m0"]
    dead = sb.broker.entity(QUEUE).dlq
    assert dead is not None
    reasons = {}
    for m in dead.messages.values():
        props = {
            k.decode() if isinstance(k, bytes) else k: v
            for k, v in m.parsed.get_application_properties().items()
        }
        reasons[str(m.message_id)] = props["DeadLetterReason"]
        assert props["DeadLetterErrorDescription"] in (
            "syphon run run-6: invalid",
            "syphon run run-6: conflict",
        )
    assert reasons == {
        "m9": "destination_unknown",
        "m10": "destination_unknown",
        "m11": "message_id_reused",
    }


def lapse_before_settling(monkeypatch: pytest.MonkeyPatch, sb: Emulator, seconds: float) -> None:
    """The page's locks lapse between its receive and its settlement (a pass that
    outlives its locks): the namespace's clock moves on before the page is settled."""
    import syphon.servicebus.locked as queue_locks

    real = queue_locks.settle_tokens
    lapsed: list[bool] = []

    def late(receiver: Any, tokens: Any, status: str, *args: Any) -> None:
        if status != "abandoned" and not lapsed:
            sb.advance(seconds)
            lapsed.append(True)
        real(receiver, tokens, status, *args)

    monkeypatch.setattr(queue_locks, "settle_tokens", late)


def test_a_lapsed_lock_leaves_its_message_and_the_pass_goes_on(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = timedelta(seconds=3)
    sb = servicebus_emulator(QueueSpec(QUEUE, lock_duration=lock), clock=ManualClock())
    seq = park(sb, ["first", "second", "third"])
    todo = actions([(seq[m], COMPLETE, None, "replay") for m in ("first", "second", "third")])
    lapse_before_settling(monkeypatch, sb, lock.total_seconds() + 0.5)
    out = by_seq(settle_task(secondary_access(sb), "run-5")(todo))

    for late in ("first", "second", "third"):  # the request failed, then each on its own
        row = out[seq[late]]
        assert (row["outcome"], row["detail"], row["received"]) == (
            Outcome.LEFT,
            LOCK_LOST,
            1,
        )
    assert sum(r["requests"] for r in out.values()) == 4  # the page's, then one each
    left = sorted(str(m.message_id) for m in sb.broker.entity(QUEUE).messages.values())
    assert left == ["first", "second", "third"]  # still in the backlog for the next run


def test_a_request_that_failed_after_settling_some_is_found_out_message_by_message(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local Service Bus applies a request's lock tokens in order until one fails:
    here the second was completed just before, so the request completes the first, then
    fails. One by one, the first and the second are found gone (completed), the third is
    completed: all three recorded completed, as they are."""
    import syphon.servicebus.locked as queue_locks

    sb = servicebus_emulator(QueueSpec(QUEUE))
    seq = park(sb, ["first", "second", "third"])
    todo = actions([(seq[m], COMPLETE, None, "replay") for m in ("first", "second", "third")])
    real = queue_locks.settle_tokens

    def second_settled_before(receiver: Any, tokens: Any, status: str, *args: Any) -> None:
        if len(tokens) > 1:  # the page's request: another path settled its second
            real(receiver, [tokens[1]], status)
        real(receiver, tokens, status, *args)

    monkeypatch.setattr(queue_locks, "settle_tokens", second_settled_before)
    out = by_seq(settle_task(secondary_access(sb), "run-7")(todo))
    assert [
        (out[seq[m]]["outcome"], out[seq[m]]["detail"]) for m in ("first", "second", "third")
    ] == [(Outcome.COMPLETED, None)] * 3
    assert not sb.broker.entity(QUEUE).messages
    # the other path's request for the second, then the page's
    assert sb.broker.disposition_requests[:2] == [(QUEUE, "completed", 1), (QUEUE, "completed", 3)]


def test_a_tasks_queues_are_settled_side_by_side_each_with_its_own_results(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    import syphon.servicebus.locked as queue_locks

    other = "contoso-primary/x-servicebus-transfer/1"
    sb = servicebus_emulator(QueueSpec(QUEUE), QueueSpec(other))
    seq = park(sb, ["a1", "a2"])
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender(other) as sender:
            sender.send_messages([ServiceBusMessage(b"b", message_id="b1")])
    # each queue's first settlement waits until the other queue's has begun too: the
    # task settles only if its queues' passes run at the same time
    both = threading.Barrier(2, timeout=20)
    real = queue_locks.settle_tokens
    met: list[str] = []

    def together(receiver: Any, tokens: Any, status: str, *args: Any) -> None:
        if status == "completed":
            both.wait()
            met.append(str(receiver._entity_name))
        real(receiver, tokens, status, *args)

    monkeypatch.setattr(queue_locks, "settle_tokens", together)
    frame = pd.concat(
        [
            actions([(seq["a1"], COMPLETE, None, "replay"), (seq["a2"], LEAVE, None, "replay")]),
            actions([(1, COMPLETE, None, "replay")]).assign(backlog_queue=other),
        ],
        ignore_index=True,
    )
    rows = settle_task(secondary_access(sb), "run-8")(frame).to_dict("records")
    out = {
        (r["backlog_queue"], int(r["sequence_number"])): (r["outcome"], r["detail"]) for r in rows
    }
    assert sorted(met) == sorted([QUEUE, other])
    assert out == {
        (QUEUE, seq["a1"]): (Outcome.COMPLETED, None),
        (QUEUE, seq["a2"]): (Outcome.LEFT, None),
        (other, 1): (Outcome.COMPLETED, None),
    }
    assert [str(m.message_id) for m in sb.broker.entity(QUEUE).messages.values()] == ["a2"]
    assert sb.broker.entity(other).messages == {}
