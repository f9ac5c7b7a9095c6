"""The paired-namespace sender against two local Service Bus namespaces (seed 004)."""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityDisabledError, ServiceBusServerBusyError

from servicebus_emulator import Emulator
from support.paired_env import BACKLOG_QUEUES, PRIMARY, Pair
from support.python_rules import restore_from_backlog
from support.quick_client import QuickClient
from support.waiting import wait_until
from syphon.core.envelope import (
    PATH,
    SCHEDULED_ENQUEUE_TIME,
    SENDER_ID,
    SENDER_SEQUENCE,
    SESSION_ID,
    TIME_TO_LIVE,
)
from syphon.core.timespan import timedelta_to_ticks
from syphon.producer import (
    BacklogMessageTooLargeError,
    PairedClientClosedError,
)

pytestmark = pytest.mark.timeout(120)


def receive_all(sb: Emulator, queue: str, **kwargs: Any) -> list[Any]:
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver(queue, **kwargs) as receiver:
            got = receiver.receive_messages(100, max_wait_time=1)
            for m in got:
                receiver.complete_message(m)
            return got


def backlog_count(pair: Pair) -> int:
    """Messages stored in the backlog queues (read from the emulator's state)."""
    return sum(
        len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/{i}").messages)
        for i in range(BACKLOG_QUEUES)
    )


class ManualTimer:
    """``threading.Timer`` that fires when the test says so."""

    started: ClassVar[list[ManualTimer]] = []

    def __init__(self, interval: float, function: Any, args: tuple[Any, ...] = ()) -> None:
        self.interval, self.function, self.args = interval, function, args
        self.daemon = False
        self.cancelled = False

    def start(self) -> None:
        ManualTimer.started.append(self)

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.function(*self.args)


class ManualClock:
    """A monotonic clock that moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_healthy_primary_is_an_ordinary_send(pair: Pair) -> None:
    with pair.client() as paired, paired.get_queue_sender("orders") as sender:
        route = sender.send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        assert (route.target, route.count) == ("primary", 2)
        counters = paired.counters
    assert [str(m) for m in receive_all(pair.primary, "orders")] == ["a", "b"]
    assert backlog_count(pair) == 0
    assert (counters.primary_sends, counters.backlog_sends, counters.failovers) == (2, 0, 0)


def test_fails_over_only_after_the_interval(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="syphon")
    pair.primary.make_unavailable("orders")
    ManualTimer.started.clear()
    clock = ManualClock()
    with pair.client(
        failover_interval=timedelta(seconds=1.5), timer=ManualTimer, clock=clock
    ) as paired:
        sender = paired.get_queue_sender("orders")
        with pytest.raises(MessagingEntityDisabledError):
            sender.send_messages(ServiceBusMessage("first"))
        clock.advance(1.4)
        with pytest.raises(MessagingEntityDisabledError):  # inside the interval
            sender.send_messages(ServiceBusMessage("second"))
        assert not paired.is_failed_over("orders")
        (timer,) = ManualTimer.started  # one timer for the entity, of the interval
        assert timer.interval == 1.5
        clock.advance(0.1)
        timer.fire()
        assert paired.is_failed_over("orders")  # the timer expired with no success
        route = sender.send_messages(ServiceBusMessage("third", message_id="m3"))
        assert route.target == "backlog"
        assert route.queue == sender.backlog_queue
        assert paired.is_failed_over("orders")
        # a second sender of the same entity goes straight to the backlog
        other = paired.get_queue_sender("orders")
        assert other.send_messages(ServiceBusMessage("fourth")).target == "backlog"
        counters = paired.counters
        sender.close()
        other.close()
    assert counters.failovers == 1
    assert counters.primary_failures == 2  # failed over: the primary is not tried again
    assert counters.backlog_sends == 2
    assert backlog_count(pair) == 2
    assert "failed over" in caplog.text
    # the log names entities and error types, never a key or a message body
    assert "SAS_KEY_VALUE" not in caplog.text
    assert "third" not in caplog.text
    assert "fourth" not in caplog.text


def test_the_timer_fails_over_without_another_send(pair: Pair) -> None:
    pair.primary.make_unavailable("orders")
    options = {
        "failover_interval": timedelta(seconds=0.5),
        "ping_primary_interval": timedelta(seconds=0.2),
    }
    ManualTimer.started.clear()
    clock = ManualClock()
    with pair.client(timer=ManualTimer, clock=clock, **options) as paired:
        sender = paired.get_queue_sender("orders")
        with pytest.raises(MessagingEntityDisabledError):
            sender.send_messages(ServiceBusMessage("x"))
        assert not paired.is_failed_over("orders")
        clock.advance(0.5)
        (timer,) = ManualTimer.started
        timer.fire()
        assert paired.is_failed_over("orders")  # the timer, not a send, failed it over
        assert paired.counters.failovers == 1
        sender.close()


def test_a_success_resets_the_timer(pair: Pair) -> None:
    ManualTimer.started.clear()
    clock = ManualClock()
    with pair.client(
        failover_interval=timedelta(seconds=1), timer=ManualTimer, clock=clock
    ) as paired:
        sender = paired.get_queue_sender("orders")
        pair.primary.make_unavailable("orders")
        with pytest.raises(MessagingEntityDisabledError):
            sender.send_messages(ServiceBusMessage("x"))
        pair.primary.make_unavailable("orders", unavailable=False)
        assert sender.send_messages(ServiceBusMessage("ok")).target == "primary"
        clock.advance(1.1)
        ManualTimer.started[0].fire()  # the old timer expires after the success: nothing
        assert not paired.is_failed_over("orders")
        pair.primary.make_unavailable("orders")
        with pytest.raises(MessagingEntityDisabledError):  # a new timer, not the old one
            sender.send_messages(ServiceBusMessage("y"))
        assert not paired.is_failed_over("orders")
        assert len(ManualTimer.started) == 2
        sender.close()


def test_transient_errors_never_fail_over(pair: Pair) -> None:
    pair.primary.throttle("orders")
    with pair.client(failover_interval=timedelta(0)) as paired:
        sender = paired.get_queue_sender("orders")
        for _ in range(3):
            with pytest.raises(ServiceBusServerBusyError):
                sender.send_messages(ServiceBusMessage("x"))
        assert not paired.is_failed_over("orders")
        assert paired.counters.failovers == 0
        sender.close()
    assert backlog_count(pair) == 0


def test_backlog_choice_is_random_per_sender(pair: Pair) -> None:
    with pair.client() as paired:
        chosen = [paired.get_queue_sender("orders").backlog_queue for _ in range(6)]
    expected_rng = random.Random(7)
    expected = [
        f"{PRIMARY}/x-servicebus-transfer/{expected_rng.choice(range(4))}" for _ in range(6)
    ]
    assert chosen == expected
    assert len(set(chosen)) > 1


def test_a_failing_backlog_queue_leaves_the_rotation_for_every_sender(pair: Pair) -> None:
    pair.primary.make_unavailable("orders")
    with pair.client(failover_interval=timedelta(0)) as paired:
        first = paired.get_queue_sender("orders")
        second = paired.get_queue_sender("orders")
        while second.backlog_queue != first.backlog_queue:  # two senders sharing a queue
            second = paired.get_queue_sender("orders")
        broken = first.backlog_queue
        pair.secondary.make_unavailable(broken)
        route = first.send_messages(ServiceBusMessage("x", message_id="x"))
        assert route.target == "backlog"
        assert route.queue != broken
        assert broken not in paired.rotation
        assert second.backlog_queue != broken  # learned from the client
        assert second.send_messages(ServiceBusMessage("y")).queue != broken
        assert paired.counters.backlog_queues_removed == 1
        first.close()
        second.close()


def test_pings_until_the_primary_is_back_then_recovers(pair: Pair) -> None:
    pair.primary.make_unavailable("orders")
    options = {"failover_interval": timedelta(0), "ping_primary_interval": timedelta(seconds=0.3)}
    with pair.client(**options) as paired:
        sender = paired.get_queue_sender("orders")
        assert sender.send_messages(ServiceBusMessage("during")).target == "backlog"
        other = paired.get_queue_sender("orders")
        assert other.send_messages(ServiceBusMessage("during 2")).target == "backlog"
        pingers = [t for t in threading.enumerate() if t.name == "syphon-ping-orders"]
        assert len(pingers) == 1  # one ping task per entity per client
        other.close()
        deadline = time.monotonic() + 10
        while paired.counters.pings_failed < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert paired.counters.pings_failed >= 2
        assert paired.is_failed_over("orders")
        pair.primary.make_unavailable("orders", unavailable=False)
        deadline = time.monotonic() + 5
        while paired.is_failed_over("orders") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not paired.is_failed_over("orders")
        assert sender.send_messages(ServiceBusMessage("after")).target == "primary"
        pings = paired.counters.pings_sent
        # the pings stop: the entity's ping task ends after the ping that succeeded
        wait_until(
            lambda: not [t for t in threading.enumerate() if t.name == "syphon-ping-orders"],
            what="the ping task to end",
        )
        assert paired.counters.pings_sent == pings
        assert paired.counters.recoveries == 1
        sender.close()
    # consumers of the primary never see a ping
    assert [str(m) for m in receive_all(pair.primary, "orders")] == ["after"]
    assert backlog_count(pair) == 2


def test_backlog_envelope_field_by_field(pair: Pair) -> None:
    pair.primary.make_unavailable("sessions")
    pair.primary.make_unavailable("events")
    when = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    original = ServiceBusMessage(
        b"\x00body\xff",
        session_id="s-1",
        partition_key="s-1",
        message_id="m-1",
        time_to_live=timedelta(minutes=5),
        scheduled_enqueue_time_utc=when,
        content_type="application/json",
        correlation_id="c-1",
        subject="subj",
        to="to-x",
        reply_to="reply-x",
        application_properties={"k": "v", b"bk": b"bv", "n": 7},
    )
    with pair.client(failover_interval=timedelta(0)) as paired:
        with paired.get_queue_sender("sessions") as sender:
            assert sender.send_messages(original).target == "backlog"
        with paired.get_topic_sender("events") as sender:
            assert sender.send_messages(ServiceBusMessage("plain", message_id="p")).target == (
                "backlog"
            )
    stored = {m.message_id: m for msgs in pair.backlog().values() for m in msgs}
    copy, plain = stored["m-1"], stored["p"]
    props = copy.application_properties
    assert props[PATH.encode()] == b"sessions"
    assert props[SESSION_ID.encode()] == b"s-1"
    assert props[TIME_TO_LIVE.encode()] == timedelta_to_ticks(timedelta(minutes=5))
    # an AMQP timestamp (the SDK hands it back as epoch milliseconds)
    assert props[SCHEDULED_ENQUEUE_TIME.encode()] == int(when.timestamp() * 1000)
    assert props[b"k"] == b"v"
    assert props[b"bk"] == b"bv"
    assert props[b"n"] == 7
    assert copy.session_id is None
    assert copy.time_to_live is None  # the backlog copy never expires
    assert copy.scheduled_enqueue_time_utc is None  # visible in the backlog at once
    assert copy.partition_key == "s-1"
    assert (copy.content_type, copy.correlation_id, copy.subject) == (
        "application/json",
        "c-1",
        "subj",
    )
    assert (copy.to, copy.reply_to) == ("to-x", "reply-x")
    assert b"".join(copy.body) == b"\x00body\xff"
    restored = restore_from_backlog(props)
    assert (restored.destination, restored.session_id) == ("sessions", "s-1")
    assert restored.time_to_live == timedelta(minutes=5)
    assert restored.scheduled_enqueue_time_utc == when
    # each backlog copy carries the sender's stamp: one id, copies counted in send order
    stamps = [
        (
            m.application_properties[SENDER_ID.encode()],
            m.application_properties[SENDER_SEQUENCE.encode()],
        )
        for m in (copy, plain)
    ]
    assert stamps[0][0] == stamps[1][0]
    assert len(stamps[0][0]) == 32
    assert stamps[1][1] == stamps[0][1] + 1
    assert set(restored.application_properties) == {"k", "bk", "n"}  # the stamp: an alias
    assert set(plain.application_properties) == {
        PATH.encode(),
        SENDER_ID.encode(),
        SENDER_SEQUENCE.encode(),
    }
    assert plain.application_properties[PATH.encode()] == b"events"


def largest_body_that_fits(sb: Emulator, queue: str) -> int:
    """The largest body a message to ``queue`` may have, as the SDK measures it."""
    from azure.servicebus.exceptions import MessageSizeExceededError

    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            size = 256 * 1024
            while True:
                try:
                    sender.create_message_batch().add_message(ServiceBusMessage(b"x" * size))
                    return size
                except MessageSizeExceededError:
                    size -= 8


def test_a_message_too_large_for_the_backlog_form_fails_clearly(pair: Pair) -> None:
    body = b"x" * largest_body_that_fits(pair.primary, "orders")  # fits the primary
    pair.primary.make_unavailable("orders")
    with pair.client(failover_interval=timedelta(0)) as paired:
        sender = paired.get_queue_sender("orders")
        with pytest.raises(BacklogMessageTooLargeError, match=r"exceeds the 262144 bytes"):
            sender.send_messages(ServiceBusMessage(body))
        sender.close()
    assert backlog_count(pair) == 0


def test_a_closed_side_closes_its_partner_after_the_grace_period(pair: Pair) -> None:
    ManualTimer.started.clear()
    paired = pair.client(timer=ManualTimer)
    sender = paired.get_queue_sender("orders")
    sender.send_messages(ServiceBusMessage("before"))
    paired.close_primary()
    with pytest.raises(PairedClientClosedError, match="primary side"):
        sender.send_messages(ServiceBusMessage("x"))
    (watchdog,) = ManualTimer.started
    assert watchdog.interval == 5.0  # the default grace period
    # within the grace period only the primary side is closed
    with pytest.raises(PairedClientClosedError, match="primary side of the paired client is"):
        paired.check_open()
    watchdog.fire()  # the grace period is over and the secondary was not closed
    with pytest.raises(PairedClientClosedError, match="secondary side did not close within 5 s"):
        paired.get_queue_sender("orders")


def test_closing_both_sides_in_time_cancels_the_watchdog(pair: Pair) -> None:
    ManualTimer.started.clear()
    paired = pair.client(timer=ManualTimer)
    paired.close_primary()
    paired.close_secondary()
    (watchdog,) = ManualTimer.started
    assert watchdog.cancelled
    watchdog.fire()  # too late: nothing happens
    with pytest.raises(PairedClientClosedError, match="primary side of the paired client is"):
        paired.check_open()
    paired.close()


def test_closing_both_sides_in_time_is_a_clean_close(pair: Pair) -> None:
    ManualTimer.started.clear()
    paired = pair.client(partner_close_timeout=timedelta(seconds=0.5), timer=ManualTimer)
    paired.close_primary()
    paired.close_secondary()
    (watchdog,) = ManualTimer.started
    watchdog.fire()  # the grace period ends after both closed
    with pytest.raises(PairedClientClosedError) as info:
        paired.check_open()
    assert "did not close" not in str(info.value)


def test_a_faulted_side_takes_its_partner_down(pair: Pair) -> None:
    ManualTimer.started.clear()
    paired = pair.client(partner_close_timeout=timedelta(seconds=0.5), timer=ManualTimer)
    paired.fault("secondary", RuntimeError("lost"))
    with pytest.raises(
        PairedClientClosedError, match=r"secondary side of the paired client is faulted"
    ):
        paired.check_open()
    (watchdog,) = ManualTimer.started
    assert watchdog.interval == 0.5
    watchdog.fire()  # the grace period ends
    with pytest.raises(
        PairedClientClosedError, match=r"secondary side was faulted \(RuntimeError\)"
    ):
        paired.get_queue_sender("orders")
