"""Partitioned entities (seed 001), through the real SDK."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage
from azure.servicebus.exceptions import (
    OperationTimeoutError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
)

from servicebus_emulator import Emulator, QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.model import PARTITION_SHIFT, partition_for_key
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient

pytestmark = pytest.mark.timeout(90)


def client_for(sb: Emulator) -> ServiceBusClient:
    return QuickClient.from_connection_string(sb.connection_string, retry_total=0)


def partition(seq: int) -> int:
    return seq >> PARTITION_SHIFT


def receive_all(client: ServiceBusClient, queue: str, expected: int) -> list[Any]:
    out: list[Any] = []
    with client.get_queue_receiver(queue) as receiver:
        while len(out) < expected and (batch := receiver.receive_messages(50, max_wait_time=2)):
            for m in batch:
                receiver.complete_message(m)
            out.extend(batch)
    return out


def test_keys_pin_messages_to_one_partition_in_order(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True))
    keys = [f"key-{i}" for i in range(6)]
    with client_for(sb) as client:
        with client.get_queue_sender("p") as sender:
            for n in range(5):
                for key in keys:
                    sender.send_messages(
                        ServiceBusMessage(f"{key}:{n}", partition_key=key, message_id=f"{key}:{n}")
                    )
        got = receive_all(client, "p", 30)
    assert len(got) == 30
    by_key: dict[str, list[Any]] = defaultdict(list)
    for m in got:
        by_key[m.partition_key].append(m)
    for key, msgs in by_key.items():
        assert {partition(m.sequence_number) for m in msgs} == {partition_for_key(key)}
        assert [m.message_id for m in msgs] == [f"{key}:{n}" for n in range(5)]
        assert [m.sequence_number for m in msgs] == sorted(m.sequence_number for m in msgs)
    # several partitions are in use, each with its own counter starting at 1
    used = {partition(m.sequence_number) for m in got}
    assert len(used) > 1
    assert all(m.sequence_number & ((1 << PARTITION_SHIFT) - 1) <= 30 for m in got)


def test_session_id_is_the_key_and_must_equal_partition_key(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True, requires_session=True))
    with client_for(sb) as client, client.get_queue_sender("p") as sender:
        sender.send_messages(ServiceBusMessage("ok", session_id="s1", partition_key="s1"))
        # the SDK refuses this combination itself; a raw AMQP message reaches the service
        raw = AmqpAnnotatedMessage(
            data_body=b"bad",
            properties={"group_id": "s1"},
            annotations={"x-opt-partition-key": "other"},
        )
        with pytest.raises(ServiceBusError, match="PartitionKey"):
            sender.send_messages(raw)
    (stored,) = sb.broker.entity("p").messages.values()
    assert partition(stored.seq) == partition_for_key("s1")


def test_batch_with_different_keys_is_rejected(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True))
    with client_for(sb) as client, client.get_queue_sender("p") as sender:
        batch = sender.create_message_batch()
        batch.add_message(ServiceBusMessage("a", partition_key="a"))
        batch.add_message(ServiceBusMessage("b", partition_key="b"))
        with pytest.raises(ServiceBusError, match="distinct SessionId or PartitionKey"):
            sender.send_messages(batch)
        same = sender.create_message_batch()
        for i in range(3):
            same.add_message(ServiceBusMessage(f"{i}", partition_key="a"))
        sender.send_messages(same)
    assert len(sb.broker.entity("p").messages) == 3


def test_duplicate_detection_uses_message_id_as_key(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec("p", enable_partitioning=True, requires_duplicate_detection=True)
    )
    with client_for(sb) as client, client.get_queue_sender("p") as sender:
        sender.send_messages(ServiceBusMessage("1", message_id="m1"))
        sender.send_messages(ServiceBusMessage("again", message_id="m1"))
        with pytest.raises(ServiceBusError, match="MessageId"):
            sender.send_messages(
                [ServiceBusMessage("2", message_id="m2"), ServiceBusMessage("3", message_id="m3")]
            )
    (stored,) = sb.broker.entity("p").messages.values()
    assert partition(stored.seq) == partition_for_key("m1")


def test_receive_gathers_from_every_partition(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True))
    with client_for(sb) as client:
        with client.get_queue_sender("p") as sender:
            for i in range(40):
                sender.send_messages(ServiceBusMessage(f"{i}", message_id=str(i)))
        got = receive_all(client, "p", 40)
    assert sorted(int(m.message_id) for m in got) == list(range(40))
    # keyless messages go round robin over all 16 partitions
    assert len({partition(m.sequence_number) for m in got}) == 16


def test_peek_returns_one_partition_at_a_time(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True))
    with client_for(sb) as client:
        with client.get_queue_sender("p") as sender:
            for i in range(32):
                sender.send_messages(ServiceBusMessage(f"{i}", message_id=str(i)))
        seen: list[int] = []
        with client.get_queue_receiver("p") as receiver:
            first = receiver.peek_messages(250)
            assert len(first) < 32  # asked for 250, got one partition's worth
            assert len({partition(m.sequence_number) for m in first}) == 1
            seen.extend(m.sequence_number for m in first)
            while page := receiver.peek_messages(250):
                assert len({partition(m.sequence_number) for m in page}) == 1
                seen.extend(m.sequence_number for m in page)
    assert len(seen) == len(set(seen)) == 32


def test_unavailable_partition(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True))
    down = partition_for_key("pinned")
    sb.make_partition_unavailable("p", down)
    with client_for(sb) as client, client.get_queue_sender("p") as sender:
        with pytest.raises(OperationTimeoutError):
            sender.send_messages(ServiceBusMessage("x", partition_key="pinned"))
        for i in range(32):
            sender.send_messages(ServiceBusMessage(f"{i}"))
        assert down not in {partition(m.seq) for m in sb.broker.entity("p").messages.values()}
        sb.make_partition_unavailable("p", down, unavailable=False)
        sender.send_messages(ServiceBusMessage("x", partition_key="pinned"))
    assert len(sb.broker.entity("p").messages) == 33


def test_each_partition_holds_the_declared_size(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("p", enable_partitioning=True, max_size_in_megabytes=1))
    body = b"x" * 200_000
    with client_for(sb) as client, client.get_queue_sender("p") as sender:
        for _ in range(5):  # 1 MB minus a little into one partition
            sender.send_messages(ServiceBusMessage(body, partition_key="k"))
        with pytest.raises(ServiceBusQuotaExceededError):
            sender.send_messages(ServiceBusMessage(body, partition_key="k"))
        for i in range(12):  # 2.4 MB spread over other partitions still fits
            sender.send_messages(ServiceBusMessage(body, partition_key=f"other-{i}"))
    assert sb.broker.entity("p").size_bytes > 2 * 1024 * 1024


def test_partitioned_topic(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        TopicSpec("t", enable_partitioning=True, subscriptions=(SubscriptionSpec("s"),))
    )
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            for i in range(4):
                sender.send_messages(ServiceBusMessage(f"{i}", partition_key="k"))
        with client.get_subscription_receiver("t", "s") as receiver:
            got = receiver.receive_messages(10, max_wait_time=2)
    assert [b"".join(m.body) for m in got] == [b"0", b"1", b"2", b"3"]
    assert {partition(m.sequence_number) for m in got} == {partition_for_key("k")}
