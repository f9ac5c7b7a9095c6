"""A message a forward cannot deliver goes to the transfer dead-letter queue
(``<entity>/$Transfer/$DeadLetterQueue``), read through the real SDK's
``ServiceBusSubQueue.TRANSFER_DEAD_LETTER``."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient

pytestmark = pytest.mark.timeout(60)


def transfer_dead_letters(client: ServiceBusClient, **where: Any) -> list[Any]:
    sub_queue = ServiceBusSubQueue.TRANSFER_DEAD_LETTER
    receiver = (
        client.get_subscription_receiver(**where, sub_queue=sub_queue)
        if "topic_name" in where
        else client.get_queue_receiver(**where, sub_queue=sub_queue)
    )
    with receiver:
        got = receiver.receive_messages(10, max_wait_time=2)
        for m in got:
            receiver.complete_message(m)
        return got


def test_a_forward_to_a_missing_or_disabled_entity_lands_in_the_transfer_dead_letters(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(
        QueueSpec("to-nowhere", forward_to="missing"),
        QueueSpec("to-disabled", forward_to="off"),
        QueueSpec("off", status="Disabled"),
        TopicSpec("t", subscriptions=(SubscriptionSpec("s", forward_to="missing"),)),
    )
    with QuickClient.from_connection_string(sb.connection_string) as client:
        for queue in ("to-nowhere", "to-disabled"):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage(queue, message_id=queue))
        with client.get_topic_sender("t") as sender:
            sender.send_messages(ServiceBusMessage("via t", message_id="t1"))

        with ServiceBusAdministrationClient.from_connection_string(
            sb.admin_connection_string, connection_verify=sb.ca_bundle
        ) as admin:
            counts = admin.get_queue_runtime_properties("to-nowhere")
            assert (counts.active_message_count, counts.transfer_dead_letter_message_count) == (
                0,
                1,
            )

        (lost,) = transfer_dead_letters(client, queue_name="to-nowhere")
        assert (lost.message_id, lost.dead_letter_reason) == (
            "to-nowhere",
            "MessagingEntityNotFound",
        )
        (refused,) = transfer_dead_letters(client, queue_name="to-disabled")
        assert refused.dead_letter_reason == "MessagingEntityDisabled"
        (from_sub,) = transfer_dead_letters(client, topic_name="t", subscription_name="s")
        assert from_sub.message_id == "t1"
        # nothing stayed behind, nothing reached the plain dead-letter queues
        for queue in ("to-nowhere", "to-disabled"):
            with client.get_queue_receiver(queue) as receiver:
                assert receiver.peek_messages(10) == []
            with client.get_queue_receiver(
                queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER
            ) as receiver:
                assert receiver.peek_messages(10) == []


def test_a_message_forwarded_more_than_four_times_stops_at_the_fifth_entity(
    servicebus_emulator: EmulatorFactory,
) -> None:
    chain = ["a", "b", "c", "d", "e", "f"]
    sb = servicebus_emulator(
        *[QueueSpec(q, forward_to=nxt) for q, nxt in pairwise(chain)],
        QueueSpec("f"),
    )
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender("a") as sender:
            sender.send_messages(ServiceBusMessage("hop", message_id="m"))
        (stopped,) = transfer_dead_letters(client, queue_name="e")
        assert stopped.dead_letter_reason == "MaxTransferHopCountExceeded"
    assert sb.broker.entity("f").messages == {}
