"""The local Service Bus behaves like the service, seen through the real SDK (sync)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageSizeExceededError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusError,
    ServiceBusServerBusyError,
)

from servicebus_emulator import Emulator, ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support import waiting
from support.quick_client import QuickClient
from support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def client_for(sb: Emulator, **kwargs: object) -> ServiceBusClient:
    return QuickClient.from_connection_string(sb.connection_string, **kwargs)  # type: ignore[arg-type]


def drain(sb: Emulator, client: ServiceBusClient, queue: str, **kwargs: object) -> list[object]:
    """Everything the queue (or its sub-queue) delivers (see :func:`waiting.drain`)."""
    path = queue + ("/$DeadLetterQueue" if kwargs.get("sub_queue") else "")
    with client.get_queue_receiver(queue, **kwargs) as receiver:  # type: ignore[arg-type]
        return waiting.drain(sb, path, receiver)


def test_every_property_comes_back_as_sent(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    sent = ServiceBusMessage(
        b"\x00body\xff",
        application_properties={"s": "text", "i": 7, "f": 1.5, "b": True, "bin": b"\x01\x02"},
        message_id="m-1",
        correlation_id="c-1",
        content_type="application/octet-stream",
        subject="subj",
        to="dest",
        reply_to="back",
        reply_to_session_id="rs",
        partition_key="pk",
        time_to_live=timedelta(minutes=5),
    )
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(sent)
        (got,) = drain(sb, client, "q")
    assert b"".join(got.body) == b"\x00body\xff"
    assert got.application_properties == {
        b"s": b"text",
        b"i": 7,
        b"f": 1.5,
        b"b": True,
        b"bin": b"\x01\x02",
    }
    assert (got.message_id, got.correlation_id, got.content_type) == (
        "m-1",
        "c-1",
        "application/octet-stream",
    )
    assert (got.subject, got.to, got.reply_to, got.reply_to_session_id) == (
        "subj",
        "dest",
        "back",
        "rs",
    )
    assert got.partition_key == "pk"
    assert got.time_to_live == timedelta(minutes=5)
    assert got.sequence_number == 1
    assert abs(got.enqueued_time_utc - datetime.now(timezone.utc)) < timedelta(seconds=10)


def test_single_list_and_batch_sends_get_consecutive_sequence_numbers(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb) as client, client.get_queue_sender("q") as sender:
        sender.send_messages(ServiceBusMessage("a"))
        sender.send_messages([ServiceBusMessage("b"), ServiceBusMessage("c")])
        batch = sender.create_message_batch()
        for body in ("d", "e", "f"):
            batch.add_message(ServiceBusMessage(body))
        sender.send_messages(batch)
        got = drain(sb, client, "q")
    assert [str(m) for m in got] == list("abcdef")
    assert [m.sequence_number for m in got] == [1, 2, 3, 4, 5, 6]


def test_a_missing_entity_fails_like_the_service(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb, retry_total=0) as client:
        with pytest.raises(MessagingEntityNotFoundError):
            client.get_queue_sender("nope").send_messages(ServiceBusMessage("x"))
        with pytest.raises(MessagingEntityNotFoundError):
            client.get_queue_receiver("nope").receive_messages(1, max_wait_time=1)


def test_auto_create_makes_unknown_queues_on_first_use(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(auto_create=True)
    with client_for(sb) as client:
        client.get_queue_sender("fresh").send_messages(ServiceBusMessage("x"))
        assert [str(m) for m in drain(sb, client, "fresh")] == ["x"]


def test_size_limits_are_the_standard_tiers(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"), QueueSpec("big", max_message_size_in_kilobytes=1024))
    with client_for(sb, retry_total=0) as client:
        with client.get_queue_sender("q") as sender:
            assert sender.create_message_batch().max_size_in_bytes == 256 * 1024
            with pytest.raises(MessageSizeExceededError):
                sender.send_messages(ServiceBusMessage(b"x" * (256 * 1024 + 1)))
        with client.get_queue_sender("big") as sender:
            assert sender.create_message_batch().max_size_in_bytes == 1024 * 1024
            sender.send_messages(ServiceBusMessage(b"x" * (512 * 1024)))


def test_a_large_message_entity_still_limits_batches_to_1_mb(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """Premium entities take messages up to 100 MB, one at a time; a batch stays at 1 MB."""
    sb = servicebus_emulator(QueueSpec("huge", max_message_size_in_kilobytes=4096))
    with client_for(sb, retry_total=0) as client, client.get_queue_sender("huge") as sender:
        assert sender.create_message_batch().max_size_in_bytes == 1024 * 1024
        sender.send_messages(ServiceBusMessage(b"x" * (3 * 1024 * 1024)))
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages([ServiceBusMessage(b"y" * (600 * 1024)) for _ in range(2)])
    assert len(sb.broker.entity("huge").messages) == 1


def test_receive_and_delete_removes_at_once(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        got = drain(sb, client, "q", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE)
        assert [str(m) for m in got] == ["a", "b"]
        assert drain(sb, client, "q") == []


def test_abandon_redelivers_with_a_higher_delivery_count(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as receiver:
            (first,) = receiver.receive_messages(1, max_wait_time=2)
            assert first.delivery_count == 0
            receiver.abandon_message(first)
            (again,) = receiver.receive_messages(1, max_wait_time=2)
            assert again.delivery_count == 1
            assert again.sequence_number == first.sequence_number
            receiver.complete_message(again)
        assert drain(sb, client, "q") == []


def test_max_delivery_count_dead_letters(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q", max_delivery_count=2))
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as receiver:
            for _ in range(2):
                (m,) = receiver.receive_messages(1, max_wait_time=2)
                receiver.abandon_message(m)
            assert receiver.receive_messages(1, max_wait_time=1) == []
        (dead,) = drain(sb, client, "q", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"


def test_dead_letter_keeps_reason_and_description(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(
            ServiceBusMessage("a", application_properties={"k": "v"})
        )
        with client.get_queue_receiver("q") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            receiver.dead_letter_message(m, reason="bad", error_description="why it is bad")
        assert drain(sb, client, "q") == []
        (dead,) = drain(sb, client, "q", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
    assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("bad", "why it is bad")
    assert dead.application_properties[b"k"] == b"v"
    assert str(dead) == "a"


def test_deferred_messages_come_back_by_sequence_number(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb, retry_total=0) as client:
        client.get_queue_sender("q").send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        with client.get_queue_receiver("q") as receiver:
            (a,) = receiver.receive_messages(1, max_wait_time=2)
            receiver.defer_message(a)
            (b,) = receiver.receive_messages(1, max_wait_time=2)
            assert str(b) == "b"
            receiver.complete_message(b)
            assert receiver.receive_messages(1, max_wait_time=1) == []
            (back,) = receiver.receive_deferred_messages([a.sequence_number])
            assert str(back) == "a"
            receiver.complete_message(back)
            with pytest.raises(ServiceBusError):
                receiver.receive_deferred_messages([a.sequence_number])


def test_an_expired_lock_redelivers_and_the_old_lock_is_lost(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(
        QueueSpec("q", lock_duration=timedelta(seconds=1)), clock=ManualClock()
    )
    with client_for(sb, retry_total=0) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as receiver:
            (first,) = receiver.receive_messages(1, max_wait_time=2)
            sb.advance(1.3)
            (again,) = receiver.receive_messages(1, max_wait_time=2)
            assert again.delivery_count == 1
            # Make the client believe the lock still holds, so the server must refuse.
            first._locked_until_utc = datetime.now(timezone.utc) + timedelta(minutes=1)
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(first)
            receiver.complete_message(again)


def test_a_stale_delivery_cannot_settle_the_message_another_receiver_now_holds(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """The lock of the delivery settled decides, not the message's current lock: after a
    redelivery to another receiver, completing (or abandoning) through the old delivery
    fails with MessageLockLost and changes nothing; the new holder completes it."""
    sb = servicebus_emulator(
        QueueSpec("q", lock_duration=timedelta(seconds=1)), clock=ManualClock()
    )
    with client_for(sb, retry_total=0) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as old, client.get_queue_receiver("q") as new:
            (first,) = old.receive_messages(1, max_wait_time=2)
            sb.advance(1.1)  # the first lock expires: redelivered
            (again,) = new.receive_messages(1, max_wait_time=5)
            assert (again.delivery_count, again.lock_token) != (0, first.lock_token)
            # Make the client believe the old lock still holds, so the server must refuse.
            first._locked_until_utc = datetime.now(timezone.utc) + timedelta(minutes=1)
            for settle in (old.complete_message, old.abandon_message):
                with pytest.raises(MessageLockLostError):
                    settle(first)
            (stored,) = sb.broker.entity("q").messages.values()
            assert stored.lock_token == again.lock_token
            new.complete_message(again)
    assert sb.broker.entity("q").messages == {}


def test_renewing_a_lock_keeps_the_message(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec("q", lock_duration=timedelta(seconds=1)), clock=ManualClock()
    )
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            before = m.locked_until_utc
            for _ in range(3):  # 1.5 s in all: past the first lock, never past a renewed one
                sb.advance(0.5)
                receiver.renew_message_lock(m)
            assert m.locked_until_utc > before
            receiver.complete_message(m)
            assert receiver.receive_messages(1, max_wait_time=1) == []


def test_peek_sees_locked_and_scheduled_messages_and_removes_nothing(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    with client_for(sb) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
            sender.schedule_messages(ServiceBusMessage("later"), later)
        with client.get_queue_receiver("q") as receiver:
            (locked,) = receiver.receive_messages(1, max_wait_time=2)
            peeked = receiver.peek_messages(10, sequence_number=1)
            assert [str(m) for m in peeked] == ["a", "b", "later"]
            assert [m.state.name for m in peeked] == ["ACTIVE", "ACTIVE", "SCHEDULED"]
            assert str(locked) == "a"
            assert [str(m) for m in receiver.peek_messages(10, sequence_number=2)] == ["b", "later"]


def test_peek_is_capped_per_call_and_pages_by_sequence_number(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb) as client:
        with client.get_queue_sender("q") as sender:
            for start in range(0, 600, 100):
                sender.send_messages([ServiceBusMessage(str(i)) for i in range(start, start + 100)])
        with client.get_queue_receiver("q") as receiver:
            first = receiver.peek_messages(1000, sequence_number=1)
            assert len(first) == 250
            seen = list(first)
            while page := receiver.peek_messages(
                1000, sequence_number=seen[-1].sequence_number + 1
            ):
                seen.extend(page)
    assert [m.sequence_number for m in seen] == list(range(1, 601))


def test_expired_messages_are_never_delivered_and_dropped_by_default(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"), clock=ManualClock())
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(
            [
                # the SDK sends TTLs in whole seconds
                ServiceBusMessage("short", time_to_live=timedelta(seconds=1)),
                ServiceBusMessage("long"),
            ]
        )
        sb.advance(1.2)
        assert [str(m) for m in drain(sb, client, "q")] == ["long"]
        assert drain(sb, client, "q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) == []


def test_expired_messages_are_dead_lettered_when_the_entity_says_so(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(
        QueueSpec(
            "q",
            dead_lettering_on_message_expiration=True,
            default_message_time_to_live=timedelta(milliseconds=300),
        ),
        clock=ManualClock(),
    )
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        sb.advance(0.5)
        assert drain(sb, client, "q") == []
        (dead,) = drain(sb, client, "q", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert dead.dead_letter_reason == "TTLExpiredException"


def test_duplicates_within_the_window_are_dropped(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec(
            "q",
            requires_duplicate_detection=True,
            duplicate_detection_history_window=timedelta(seconds=1),
        ),
        clock=ManualClock(),
    )
    with client_for(sb) as client, client.get_queue_sender("q") as sender:
        sender.send_messages(
            [ServiceBusMessage("a", message_id="1"), ServiceBusMessage("b", message_id="2")]
        )
        sender.send_messages(ServiceBusMessage("a again", message_id="1"))
        assert [str(m) for m in drain(sb, client, "q")] == ["a", "b"]
        sb.advance(1.1)
        sender.send_messages(ServiceBusMessage("after the window", message_id="1"))
        assert [str(m) for m in drain(sb, client, "q")] == ["after the window"]


def test_scheduled_messages_wait_for_their_time_and_can_be_cancelled(
    servicebus_emulator: EmulatorFactory,
) -> None:
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q"), clock=clock)
    with (
        client_for(sb) as client,
        client.get_queue_sender("q") as sender,
        client.get_queue_receiver("q") as receiver,
    ):
        assert receiver.receive_messages(1, max_wait_time=0.2) == []  # links are up
        due = datetime.fromtimestamp(clock.now_ms() / 1000, timezone.utc) + timedelta(seconds=2)
        (keep,) = sender.schedule_messages(ServiceBusMessage("due"), due)
        (drop,) = sender.schedule_messages(ServiceBusMessage("cancelled"), due)
        sender.cancel_scheduled_messages(drop)
        # also through the message property, on a plain send
        sender.send_messages(ServiceBusMessage("prop", scheduled_enqueue_time_utc=due))
        assert keep > 0
        assert receiver.receive_messages(5, max_wait_time=0.5) == []
        sb.advance(2.1)
        got = receiver.receive_messages(5, max_wait_time=2)
        got += receiver.receive_messages(5, max_wait_time=0.5)
        assert sorted(str(m) for m in got) == ["due", "prop"]
        for m in got:
            receiver.complete_message(m)


def test_pings_are_accepted_and_never_delivered(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    ping = ServiceBusMessage(
        b"", content_type="application/vnd.ms-servicebus-ping", time_to_live=timedelta(seconds=1)
    )
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages([ping, ServiceBusMessage("real")])
        assert [str(m) for m in drain(sb, client, "q")] == ["real"]
        with client.get_queue_receiver("q") as receiver:
            assert receiver.peek_messages(10, sequence_number=1) == []


def test_an_unavailable_entity_fails_until_the_fault_is_cleared(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"), QueueSpec("other"))
    with client_for(sb, retry_total=0) as client:
        sb.make_unavailable("q")
        with pytest.raises(MessagingEntityDisabledError):
            client.get_queue_sender("q").send_messages(ServiceBusMessage("x"))
        client.get_queue_sender("other").send_messages(ServiceBusMessage("fine"))
        sb.clear_faults()
        client.get_queue_sender("q").send_messages(ServiceBusMessage("x"))
        assert [str(m) for m in drain(sb, client, "q")] == ["x"]


def test_a_throttled_entity_answers_server_busy(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb, retry_total=0) as client:
        sb.throttle("q")
        with pytest.raises(ServiceBusServerBusyError):
            client.get_queue_sender("q").send_messages(ServiceBusMessage("x"))
        sb.clear_faults()
        client.get_queue_sender("q").send_messages(ServiceBusMessage("x"))


def test_slow_replies_outlast_a_shorter_client_timeout(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"), QueueSpec("fast"))
    with client_for(sb, retry_total=0) as client, client.get_queue_sender("q") as sender:
        sender.send_messages(ServiceBusMessage("warm"))
        sb.slow_down(5, "q")
        # a reply held five seconds: a send that waits one gives up (no elapsed-time check:
        # the client's own timeout is the clock)
        with pytest.raises(OperationTimeoutError):
            sender.send_messages(ServiceBusMessage("slow"), timeout=1)
        # only that entity is slow
        with client.get_queue_sender("fast") as fast:
            fast.send_messages(ServiceBusMessage("quick"), timeout=30)
        sb.clear_faults()
        sender.send_messages(ServiceBusMessage("after"), timeout=30)


def test_dropped_connections_recover_on_the_next_call(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with client_for(sb) as client, client.get_queue_sender("q") as sender:
        sender.send_messages(ServiceBusMessage("before"))
        sb.drop_connections()
        wait_until(lambda: not sb.handler.connections, what="the connections to drop")
        sender.send_messages(ServiceBusMessage("after"))
        assert [str(m) for m in drain(sb, client, "q")] == ["before", "after"]


def test_a_message_id_is_kept_as_given(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    mid = str(uuid.uuid4())
    with client_for(sb) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a", message_id=mid))
        (m,) = drain(sb, client, "q")
    assert m.message_id == mid


def test_a_full_entity_refuses_more_with_quota_exceeded(
    servicebus_emulator: EmulatorFactory,
) -> None:
    from azure.servicebus.exceptions import ServiceBusQuotaExceededError

    sb = servicebus_emulator(QueueSpec("q", max_size_in_megabytes=1))
    with client_for(sb, retry_total=0) as client, client.get_queue_sender("q") as sender:
        for _ in range(5):  # 1,000,000 bytes of bodies: fits in 1 MiB
            sender.send_messages(ServiceBusMessage(b"x" * 200_000))
        with pytest.raises(ServiceBusQuotaExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * 200_000))


def test_auto_lock_renewer_keeps_a_message_past_its_lock(
    servicebus_emulator: EmulatorFactory,
) -> None:
    from azure.servicebus import AutoLockRenewer

    sb = servicebus_emulator(
        QueueSpec("q", lock_duration=timedelta(seconds=3)), clock=ManualClock()
    )
    renewer = AutoLockRenewer()
    with client_for(sb, retry_total=0) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("held"))
        with client.get_queue_receiver("q") as receiver:
            (msg,) = receiver.receive_messages(1, max_wait_time=2)
            first_lock = msg.locked_until_utc
            renewer.register(receiver, msg, max_lock_renewal_duration=30)
            # the renewer renews a 3-second lock on its first look (it renews what ends
            # within 10 s); twice the clock goes 2 s on and the renewer renews again, so
            # the message is held 4 s past its first lock
            for _ in range(2):
                held_until = msg.locked_until_utc
                sb.advance(2)
                wait_until(lambda held=held_until: msg.locked_until_utc > held, what="a renewal")
            assert msg.locked_until_utc > first_lock + timedelta(seconds=3)
            receiver.complete_message(msg)
    renewer.close()
    assert sb.broker.entity("q").messages == {}


def test_an_entity_that_fails_after_some_sends_refuses_the_rest_but_not_pings(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"), QueueSpec("other"))
    ping = ServiceBusMessage(
        b"", content_type="application/vnd.ms-servicebus-ping", time_to_live=timedelta(seconds=1)
    )
    with client_for(sb, retry_total=0) as client:
        sb.fail_sends_after("q", 2)
        sender = client.get_queue_sender("q")
        sender.send_messages(ServiceBusMessage("one"))
        sender.send_messages(ping)  # pings do not spend the budget
        sender.send_messages([ServiceBusMessage("two"), ServiceBusMessage("three")])  # one send
        with pytest.raises(MessagingEntityDisabledError):
            client.get_queue_sender("q").send_messages(ServiceBusMessage("four"))
        client.get_queue_sender("q").send_messages(ping)  # still answered
        client.get_queue_sender("other").send_messages(ServiceBusMessage("fine"))
        sb.clear_faults()
        client.get_queue_sender("q").send_messages(ServiceBusMessage("five"))
        assert [str(m) for m in drain(sb, client, "q")] == ["one", "two", "three", "five"]
