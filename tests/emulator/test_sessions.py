"""Sessions on the local Service Bus, through the real SDK."""

from __future__ import annotations

from datetime import timedelta

import pytest
from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessage
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    SessionCannotBeLockedError,
)

from servicebus_emulator import ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient

pytestmark = pytest.mark.timeout(60)


def test_a_session_queue_refuses_messages_without_a_session_id(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("s", requires_session=True))
    with QuickClient.from_connection_string(sb.connection_string, retry_total=0) as client:
        with pytest.raises(ServiceBusError, match="SessionId"):
            client.get_queue_sender("s").send_messages(ServiceBusMessage("x"))


def test_a_session_receiver_gets_only_its_session_in_order(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("s", requires_session=True))
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("s").send_messages(
            [ServiceBusMessage(f"{sid}{i}", session_id=sid) for i in range(3) for sid in "ab"]
        )
        with client.get_queue_receiver("s", session_id="b") as receiver:
            assert receiver.session.session_id == "b"
            got = receiver.receive_messages(10, max_wait_time=1)
            assert [str(m) for m in got] == ["b0", "b1", "b2"]
            assert all(m.session_id == "b" for m in got)
            for m in got:
                receiver.complete_message(m)
        with client.get_queue_receiver("s", session_id=NEXT_AVAILABLE_SESSION) as receiver:
            assert receiver.session.session_id == "a"
            assert [str(m) for m in receiver.receive_messages(10, max_wait_time=1)] == [
                "a0",
                "a1",
                "a2",
            ]


def test_a_locked_session_cannot_be_taken_by_another_receiver(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("s", requires_session=True))
    with QuickClient.from_connection_string(sb.connection_string, retry_total=0) as client:
        client.get_queue_sender("s").send_messages(ServiceBusMessage("x", session_id="a"))
        with client.get_queue_receiver("s", session_id="a") as first:
            first.receive_messages(1, max_wait_time=1)
            with pytest.raises(SessionCannotBeLockedError):
                with client.get_queue_receiver("s", session_id="a") as second:
                    second.receive_messages(1, max_wait_time=1)
        # released on close: the session can be taken again
        with client.get_queue_receiver("s", session_id="a") as third:
            assert [str(m) for m in third.receive_messages(1, max_wait_time=2)] == ["x"]


def test_next_available_with_no_session_times_out(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("s", requires_session=True))
    with QuickClient.from_connection_string(sb.connection_string, retry_total=0) as client:
        with pytest.raises(OperationTimeoutError):
            with client.get_queue_receiver(
                "s", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=1
            ) as receiver:
                receiver.receive_messages(1, max_wait_time=1)


def test_session_state_and_lock_renewal(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec("s", requires_session=True, lock_duration=timedelta(seconds=2)),
        clock=ManualClock(),
    )
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("s").send_messages(ServiceBusMessage("x", session_id="a"))
        with client.get_queue_receiver("s", session_id="a") as receiver:
            session = receiver.session
            assert session.get_state() is None
            session.set_state(b"checkpoint-1")
            assert session.get_state() == b"checkpoint-1"
            before = session.locked_until_utc
            sb.advance(0.5)
            after = session.renew_lock()
            assert before is not None
            assert after > before


def test_a_session_id_is_delivered_with_the_message(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("s", requires_session=True))
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("s").send_messages(ServiceBusMessage("x", session_id="Ünïcode"))
        with client.get_queue_receiver("s", session_id="Ünïcode") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            assert m.session_id == "Ünïcode"


def test_sessions_are_listed_by_messages_or_by_state_updates(
    servicebus_emulator: EmulatorFactory,
) -> None:
    from datetime import datetime, timezone

    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("s", requires_session=True), clock=clock)
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("s").send_messages(
            [ServiceBusMessage("x", session_id=sid) for sid in ("b", "a", "b")]
        )
        assert sorted(client.list_queue_sessions("s")) == ["a", "b"]
        with client.get_queue_receiver("s", session_id="a") as receiver:
            receiver.session.set_state(b"before the mark")
        mark = datetime.fromtimestamp(clock.now_ms() / 1000 + 1, timezone.utc)
        sb.advance(2)
        with client.get_queue_receiver("s", session_id="b") as receiver:
            receiver.session.set_state(b"s")
        assert list(client.list_queue_sessions("s", state_updated_after=mark)) == ["b"]
