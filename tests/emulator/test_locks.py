"""Message locks of the local Service Bus, as the service has them, through the real SDK:
a lock lasts the entity's lock duration from the receive (or the last renewal); it is a
message's, not a link's: a link that closes (or a client that dies) without settling
leaves its messages locked until the lock lapses, then they are delivered again with
one more delivery; while locked, a message is settled by its lock token from any client
of the namespace (the management operation, as the Go SDK's settle by lock token does).

Sources: the service's "Message transfers, locks, and settlement" article (a lock that
lapses makes the message available again and counts a delivery); the Python SDK's own
receiver, which drains and releases what it never handed out before it closes "so they
are not left locked at the broker until lock expiry" (azure-servicebus 7.15.0,
``ServiceBusReceiver._close_handler``), which is what a closed link leaves otherwise.
A session's lock is released when its link closes (not covered here: syphon reads no
session entity under lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

from azure.servicebus import ServiceBusMessage

from servicebus_emulator import ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient
from syphon.servicebus.access import Access
from syphon.servicebus.locked import COMPLETE, LockedQueue


def test_a_lock_lasts_the_queues_lock_duration_from_the_receive(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=45)))
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as receiver:
            before = datetime.now(timezone.utc)
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            after = datetime.now(timezone.utc)
            until = m.locked_until_utc.replace(tzinfo=timezone.utc)
            assert before + timedelta(seconds=44) <= until <= after + timedelta(seconds=46)
            receiver.complete_message(m)


def test_a_closed_links_messages_stay_locked_until_the_lock_lapses(
    servicebus_emulator: EmulatorFactory,
) -> None:
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=30)), clock=clock)
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("q").send_messages([ServiceBusMessage("a"), ServiceBusMessage("b")])
        with client.get_queue_receiver("q") as first:
            got = first.receive_messages(2, max_wait_time=2)
            assert len(got) == 2
        # the link is closed and nothing was settled: still locked, no one else gets them
        with client.get_queue_receiver("q") as second:
            assert second.receive_messages(2, max_wait_time=0.5) == []
            sb.advance(31)  # the locks lapse: delivered again, one more delivery each
            again = second.receive_messages(2, max_wait_time=2)
            assert sorted(str(m) for m in again) == ["a", "b"]
            assert {m.delivery_count for m in again} == {1}
            for m in again:
                second.complete_message(m)


def test_a_locked_message_is_settled_by_its_token_from_another_client(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """What a read-once run relies on after its receiver's link dropped: the lock is the
    message's, and its token settles it from a new link of another connection."""
    sb = servicebus_emulator(QueueSpec("q"))
    access = Access("s", "secondary", "localhost", connection_string=sb.connection_string)
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
    with LockedQueue(access, "q") as held:
        (seq,) = [m.seq for m in sb.broker.entity("q").messages.values()]
        assert held.receive(1, 2.0)
        token = held._tokens[seq]
        with LockedQueue(access, "q") as other:
            other._tokens[seq] = token  # the token alone, on another connection's link
            other.settle([seq], COMPLETE)
        held.forget(seq)
    assert sb.broker.entity("q").messages == {}


def test_a_killed_clients_locks_hold_until_they_lapse(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """A process that dies holding locks (its connection severed, no detach) leaves them
    to lapse, as a closed link does."""
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=30)), clock=clock)
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("a"))
    script = textwrap.dedent(
        """
        import os, sys, time
        from azure.servicebus import ServiceBusClient
        client = ServiceBusClient.from_connection_string(os.environ["SB"])
        receiver = client.get_queue_receiver("q")
        assert receiver.receive_messages(1, max_wait_time=5)
        print("held", flush=True)
        time.sleep(60)
        """
    )
    env = {**os.environ, "SB": sb.connection_string}
    child = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    (stored,) = sb.broker.entity("q").messages.values()
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as receiver:
            assert receiver.receive_messages(1, max_wait_time=0.5) == []
            assert stored.lock_token is not None
            sb.advance(31)
            (again,) = receiver.receive_messages(1, max_wait_time=2)
            assert again.delivery_count == 1
            receiver.complete_message(again)
