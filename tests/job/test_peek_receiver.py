"""The receiver syphon peeks with (:func:`syphon.servicebus.peek.peek_receiver`), against
the local Service Bus through the real SDK: it closes without waiting on a keep-alive
thread, and it never takes a message. Both rest on how the SDK treats ``prefetch_count``
and ``keep_alive``: this test fails if an upgrade changes that."""

from __future__ import annotations

import threading

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.sdk_threads import keep_alive_threads
from syphon.servicebus.peek import peek_receiver


def _started_since(before: set[threading.Thread]) -> set[threading.Thread]:
    # only threads that started since: an earlier test's clients in this worker may end
    # their keep-alive threads while this one runs, so counting all of them is flaky
    return keep_alive_threads() - before


def test_a_peek_receiver_starts_no_keep_alive_and_locks_nothing(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender("q", keep_alive=None) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}".encode()) for i in range(3)])
        before = keep_alive_threads()

        # the SDK's default receiver does start one: what this test would miss otherwise
        with client.get_queue_receiver("q") as plain:
            plain.peek_messages(1)
            assert len(_started_since(before)) == 1

        with peek_receiver(client, "q") as receiver:
            peeked = receiver.peek_messages(5)
            again = receiver.peek_messages(5, sequence_number=peeked[-1].sequence_number + 1)
            assert _started_since(before) == set()
    assert [b"".join(m.body) for m in peeked] == [b"m0", b"m1", b"m2"]
    assert again == []
    stored = sb.broker.entity("q").messages.values()
    assert [(m.delivery_count, m.lock_token) for m in stored] == [(0, None)] * 3
