"""When the local Service Bus does its time-driven work for attached receivers
(servicebus_emulator.ticks): when a lock expires or a scheduled message comes due, at
least every IDLE_TICK_SECONDS, soon when connections are to be dropped; never every 20 ms
for a receiver that waits on nothing. And one tick at a time, moved sooner, never later."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from servicebus_emulator.ticks import IDLE_TICK_SECONDS, TICK_SECONDS, Timer, next_tick

pytestmark = pytest.mark.timeout(120)


def test_the_next_tick_comes_when_a_lock_expires_and_at_least_every_idle_tick(
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
            broker = sb.broker
            assert broker.next_due_ms("q") == clock.now_ms() + 5_000  # its lock
            assert broker.next_due_ms("idle") is None
            assert broker.next_due_ms("gone") is None

            assert next_tick(broker, [], dropping=False) is None  # no receiver
            assert next_tick(broker, ["idle"], dropping=False) == IDLE_TICK_SECONDS
            assert next_tick(broker, ["idle", "q"], dropping=False) == IDLE_TICK_SECONDS
            clock.advance(4.7)  # the lock on q expires in 0.3 s
            assert next_tick(broker, ["idle", "q"], dropping=False) == pytest.approx(0.3)
            clock.advance(1.0)  # past due, not yet served
            assert next_tick(broker, ["idle", "q"], dropping=False) == TICK_SECONDS
            assert next_tick(broker, [], dropping=True) == TICK_SECONDS


class _Task:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Container:
    """What a timer schedules on, recorded instead of run."""

    def __init__(self) -> None:
        self.tasks: list[_Task] = []

    def schedule(self, delay: float, handler: Any) -> _Task:
        self.tasks.append(_Task(delay))
        return self.tasks[-1]

    def pending(self) -> list[float]:
        return [t.delay for t in self.tasks if not t.cancelled]


def test_a_timer_keeps_one_tick_moved_sooner_never_later() -> None:
    timer, container = Timer(), _Container()
    timer.schedule(container, IDLE_TICK_SECONDS, None)
    assert container.pending() == [IDLE_TICK_SECONDS]
    timer.schedule(container, 0.3, None)  # sooner: the idle tick is given up for it
    assert container.pending() == [0.3]
    timer.schedule(container, IDLE_TICK_SECONDS, None)  # later: the sooner one stays
    assert container.pending() == [0.3]
    timer.ran()
    timer.schedule(container, IDLE_TICK_SECONDS, None)  # after it came: the next one
    assert container.pending() == [0.3, IDLE_TICK_SECONDS]
