"""When the local Service Bus does its time-driven work for attached receivers (an expired
lock's message, a scheduled message come due): at the next such moment, at least every
IDLE_TICK_SECONDS, and soon when connections are to be dropped; never every 20 ms for a
receiver that waits on nothing (servicebus_emulator.amqp.AmqpHandler.serve)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import ManualClock, QueueSpec
from servicebus_emulator.amqp import IDLE_TICK_SECONDS, TICK_SECONDS, AmqpHandler
from servicebus_emulator.pytest_plugin import EmulatorFactory

pytestmark = pytest.mark.timeout(120)


class _Task:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Container:
    """What the handler schedules its ticks on, recorded instead of run."""

    def __init__(self) -> None:
        self.tasks: list[_Task] = []

    def schedule(self, delay: float, handler: Any) -> _Task:
        self.tasks.append(_Task(delay))
        return self.tasks[-1]

    def pending(self) -> list[float]:
        return [round(t.delay, 3) for t in self.tasks if not t.cancelled]


class _Link:
    """An attached receiver's link, as the handler reads it."""

    def __init__(self, entity: str) -> None:
        self.state_info = type("State", (), {"entity": entity})()


def test_ticks_come_when_a_lock_expires_and_at_least_every_idle_tick(
    servicebus_emulator: EmulatorFactory,
) -> None:
    clock = ManualClock()
    sb = servicebus_emulator(
        QueueSpec("q", lock_duration=timedelta(seconds=5)), QueueSpec("idle"), clock=clock
    )
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("a"))
        with client.get_queue_receiver("q") as receiver:
            (_held,) = receiver.receive_messages(max_wait_time=5)
            locked_at = clock.now_ms()
            assert sb.broker.next_due_ms("q") == locked_at + 5_000
            assert sb.broker.next_due_ms("idle") is None
            assert sb.broker.next_due_ms("gone") is None

            handler = AmqpHandler(sb.broker, "127.0.0.1")
            container = _Container()
            handler.container = container
            handler.tick_when_due()  # no receiver attached: no tick
            assert container.pending() == []

            handler.out_links = {_Link("idle")}
            handler.tick_when_due()  # waits on nothing: the idle tick
            assert container.pending() == [IDLE_TICK_SECONDS]

            clock.advance(4.7)  # the lock on q expires in 0.3 s
            handler.out_links = {_Link("idle"), _Link("q")}
            handler.tick_when_due()  # sooner: the idle tick is given up for it
            assert container.pending() == [0.3]
            handler.tick_when_due()  # as soon: nothing changes
            assert container.pending() == [0.3]

            clock.advance(1.0)  # past due (not yet served): as soon as a tick may come
            handler.tick = None
            handler.tick_when_due()
            assert container.pending() == [0.3, TICK_SECONDS]

            handler.tick = None
            handler.drop_requested = True
            handler.out_links = set()
            handler.tick_when_due()  # connections to drop: soon, receivers or not
            assert container.pending()[-1] == TICK_SECONDS
