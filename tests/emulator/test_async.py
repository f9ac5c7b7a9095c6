"""The async SDK (azure.servicebus.aio) against the local Service Bus."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessagingEntityNotFoundError

from servicebus_emulator import QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.waiting import POLL_SECONDS

pytestmark = pytest.mark.timeout(60)


def test_async_send_receive_and_settle(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))

    async def scenario() -> None:
        async with ServiceBusClient.from_connection_string(sb.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                batch = await sender.create_message_batch()
                for body in "abcd":
                    batch.add_message(ServiceBusMessage(body, application_properties={"k": body}))
                await sender.send_messages(batch)
            async with client.get_queue_receiver("q") as receiver:
                got = await receiver.receive_messages(4, max_wait_time=2)
                while len(got) < 4:
                    got += await receiver.receive_messages(4, max_wait_time=1)
                assert [str(m) for m in got] == list("abcd")
                assert got[0].application_properties == {b"k": b"a"}
                await receiver.complete_message(got[0])
                await receiver.abandon_message(got[1])
                await receiver.dead_letter_message(got[2], reason="r", error_description="d")
                await receiver.defer_message(got[3])
                (again,) = await receiver.receive_messages(1, max_wait_time=2)
                assert (str(again), again.delivery_count) == ("b", 1)
                await receiver.complete_message(again)
                (deferred,) = await receiver.receive_deferred_messages([got[3].sequence_number])
                await receiver.complete_message(deferred)
                peeked = await receiver.peek_messages(10, sequence_number=1)
                assert peeked == []
            async with client.get_queue_receiver(
                "q", sub_queue=ServiceBusSubQueue.DEAD_LETTER
            ) as dlq:
                (dead,) = await dlq.receive_messages(1, max_wait_time=2)
                assert (str(dead), dead.dead_letter_reason) == ("c", "r")
                await dlq.complete_message(dead)

    asyncio.run(scenario())


def test_async_sessions_and_scheduling(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("s", requires_session=True))

    async def scenario() -> None:
        async with ServiceBusClient.from_connection_string(sb.connection_string) as client:
            async with client.get_queue_sender("s") as sender:
                await sender.send_messages(
                    [ServiceBusMessage(str(i), session_id="x") for i in range(3)]
                )
                later = datetime.now(timezone.utc) + timedelta(hours=1)
                (seq,) = await sender.schedule_messages(
                    ServiceBusMessage("later", session_id="x"), later
                )
            async with client.get_queue_receiver("s", session_id="x") as receiver:
                await receiver.session.set_state(b"st")
                assert await receiver.session.get_state() == b"st"
                got = await receiver.receive_messages(10, max_wait_time=1)
                assert [str(m) for m in got] == ["0", "1", "2"]
                peeked = await receiver.peek_messages(10, sequence_number=seq)
                assert [str(m) for m in peeked] == ["later"]

    asyncio.run(scenario())


def test_async_missing_entity(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator()

    async def scenario() -> None:
        async with ServiceBusClient.from_connection_string(
            sb.connection_string, retry_total=0
        ) as client:
            with pytest.raises(MessagingEntityNotFoundError):
                async with client.get_queue_sender("nope") as sender:
                    await sender.send_messages(ServiceBusMessage("x"))

    asyncio.run(scenario())


def test_async_auto_lock_renewer_on_a_topic_subscription(
    servicebus_emulator: EmulatorFactory,
) -> None:
    from azure.servicebus.aio import AutoLockRenewer

    from servicebus_emulator import ManualClock, SubscriptionSpec, TopicSpec

    sb = servicebus_emulator(
        TopicSpec("t", subscriptions=(SubscriptionSpec("s", lock_duration=timedelta(seconds=3)),)),
        clock=ManualClock(),
    )

    async def scenario() -> None:
        renewer = AutoLockRenewer()
        async with ServiceBusClient.from_connection_string(sb.connection_string) as client:
            async with client.get_topic_sender("t") as sender:
                await sender.send_messages(ServiceBusMessage("held"))
            async with client.get_subscription_receiver("t", "s") as receiver:
                (msg,) = await receiver.receive_messages(1, max_wait_time=2)
                first_lock = msg.locked_until_utc
                renewer.register(receiver, msg, max_lock_renewal_duration=30)
                # twice the clock goes 2 s on and the renewer renews the 3-second lock
                # again (it renews what ends within 10 s): held 4 s past its first lock
                for _ in range(2):
                    held_until = msg.locked_until_utc
                    sb.advance(2)
                    while msg.locked_until_utc <= held_until:
                        await asyncio.sleep(POLL_SECONDS)
                assert msg.locked_until_utc > first_lock + timedelta(seconds=3)
                await receiver.complete_message(msg)
        await renewer.close()

    asyncio.run(scenario())
    assert sb.broker.subscription("t", "s").messages == {}
