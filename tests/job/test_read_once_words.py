"""What a read once says of the messages it could not take is what the service did, against
the local Service Bus through the real SDK: a lapse is a lock of the run's own that it
lost; a message another receiver let go while the run read (a killed run's lock that
lapsed, an explorer that gave its messages back) is taken like any other, and the run
counts exactly what it took; a deferred message is named deferred; a message gone when
the run looked (completed by a competitor) is gone, not unseen."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import Emulator, ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.core.peeked import sequence_number
from syphon.job.read.modes import ReadLocks
from syphon.job.read.once import ReadOnce, Taken
from syphon.job.read.snapshot import QueueRange
from syphon.servicebus.access import Access

MESSAGES = 8


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that took fewer messages than it counted waits a little before it takes the
    queue as read (2, 4 and 8 s): a fraction of that here."""
    monkeypatch.setattr("syphon.job.read.once._SHORT_PAGE_WAITS", (0.5, 0.5))


def _access(sb: object) -> Access:
    return Access("s", "secondary", "localhost", connection_string=sb.connection_string)  # type: ignore[attr-defined]


def _fill(sb: object) -> None:
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:  # type: ignore[attr-defined]
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(MESSAGES)])


def _once_it_holds(once: ReadOnce, count: int, then: Callable[[], object]) -> None:
    """Calls ``then`` in a thread of its own once the read holds ``count`` messages locked."""

    def watch() -> None:
        deadline = time.monotonic() + 30
        while len(once.queue("q").locked) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        then()

    threading.Thread(target=watch, daemon=True).start()


def _first_two(servicebus_emulator: EmulatorFactory, settled: str) -> Emulator:
    """A queue of :data:`MESSAGES` whose first two a consumer received and settled
    (``settled``: ``defer`` or ``complete``)."""
    sb = servicebus_emulator(QueueSpec("q"))
    _fill(sb)
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as consumer:
            for m in consumer.receive_messages(max_message_count=2, max_wait_time=5):
                getattr(consumer, f"{settled}_message")(m)
    return sb


def _read_all(once: ReadOnce) -> list[int]:
    return [sequence_number(m) for _, page in once.pages([QueueRange("q")]) for m in page]


def test_messages_a_killed_runs_lapsed_locks_let_go_mid_read_are_taken_and_counted(
    servicebus_emulator: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A run that takes over after a crash receives what no one holds first; the killed
    run's locks lapse while it waits for the rest, and those messages come next, lower
    numbers after higher ones. They were never this run's: it takes them, counts them,
    and warns of no lapse (today's read took them for lapses of its own, and its plan
    then failed on its own count)."""
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=30)), clock=clock)
    _fill(sb)
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as killed:  # a killed run's locks: never settled
            held = killed.receive_messages(max_message_count=5, max_wait_time=5)
            assert len(held) == 5
            sb.advance(20)  # the killed run's locks end 10 s from now, the new run's later
            with ReadOnce(_access(sb), ["q"], counts={"q": MESSAGES}, wait_seconds=0.1) as once:
                # once it holds the three no one held, the killed run's locks lapse
                _once_it_holds(once, 3, lambda: sb.advance(11))
                with caplog.at_level(logging.INFO):
                    got = _read_all(once)
                assert sorted(got) == list(range(1, MESSAGES + 1))
                assert got[:3] == [6, 7, 8]  # what no one held came first
                assert once.taken == MESSAGES
                assert once.received == MESSAGES
                assert once.again == {"q": set()}
                assert once.lost == {}
                assert once.gaps.unseen == {}
                assert once.gone() == {}
    assert "lapsed" not in caplog.text


def test_an_explorer_that_gives_its_messages_back_mid_read_causes_no_lapse(
    servicebus_emulator: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=60)))
    _fill(sb)
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as explorer:
            held = explorer.receive_messages(max_message_count=3, max_wait_time=5)

            def give_back() -> None:
                for m in held:
                    explorer.abandon_message(m)

            with ReadOnce(_access(sb), ["q"], counts={"q": MESSAGES}, wait_seconds=0.1) as once:
                _once_it_holds(once, MESSAGES - 3, give_back)
                with caplog.at_level(logging.INFO):
                    got = _read_all(once)
                assert sorted(got) == list(range(1, MESSAGES + 1))
                assert once.taken == MESSAGES
                assert once.lost == {}
    assert "came back after their lock lapsed" not in caplog.text


def test_a_message_of_the_runs_own_received_again_after_a_lapse_is_a_lapse_and_not_taken(
    servicebus_emulator: EmulatorFactory,
) -> None:
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=10)), clock=clock)
    _fill(sb)
    with ReadOnce(_access(sb), ["q"], wait_seconds=0.1) as once:
        first = [sequence_number(m) for _, p in once.pages([QueueRange("q", limit=4)]) for m in p]
        assert first == [1, 2, 3, 4]
        sb.advance(11)  # the run's own locks lapse before the renewal
        rest = _read_all(once)
        assert rest == [5, 6, 7, 8]  # 1-4 came back first: kept locked, not taken again
        assert once.again["q"] == {1, 2, 3, 4}
        assert once.taken == MESSAGES


def test_deferred_messages_are_named_deferred_and_never_taken(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = _first_two(servicebus_emulator, "defer")
    with ReadOnce(_access(sb), ["q"], counts={"q": MESSAGES}, wait_seconds=0.1) as once:
        assert _read_all(once) == [3, 4, 5, 6, 7, 8]
        assert once.deferred() == {"q": 2}
        assert sorted(once.gaps.unseen["q"]) == [1, 2]
        assert once.gone() == {}


def test_deferred_messages_taken_by_their_numbers_are_the_reads_to_settle(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = _first_two(servicebus_emulator, "defer")
    with ReadOnce(
        _access(sb), ["q"], counts={"q": MESSAGES}, wait_seconds=0.1, take_deferred=True
    ) as once:
        assert _read_all(once) == [3, 4, 5, 6, 7, 8, 1, 2]
        assert once.deferred() == {}
        assert once.gone() == {}
        assert once.deferred_taken == 2
        assert once.taken == MESSAGES
        assert once.queue("q").locked == list(range(1, MESSAGES + 1))
        once.settle([("q", s, "complete", None, "replay") for s in (1, 2)], "r")
    assert sorted(sb.broker.entity("q").messages) == [3, 4, 5, 6, 7, 8]  # given back


def test_messages_a_competitor_completed_are_gone_not_unseen(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = _first_two(servicebus_emulator, "complete")  # by a competitor
    # the run counted the queue before the competitor took its two
    with ReadOnce(_access(sb), ["q"], counts={"q": MESSAGES}, wait_seconds=0.1) as once:
        assert _read_all(once) == [3, 4, 5, 6, 7, 8]
        assert once.gone() == {"q": 2}
        assert once.gaps.unseen == {}
        assert once.deferred() == {}


def test_gone_messages_leave_nothing_waiting_and_deferred_ones_say_how_to_take_them() -> None:
    gone = ReadLocks(gone={"q": 2})
    assert not gone.waiting
    assert gone.fix() is None
    assert gone.notes(0) == [
        "2 messages counted when the run started were gone when it looked, in q (2): "
        "completed by another receiver, or expired (nothing waits for them)"
    ]
    put_off = ReadLocks(deferred={"q": 3})
    assert put_off.waiting
    (line,) = put_off.notes(0, 3)
    assert line.startswith("3 keys held back: 3 messages are deferred by a consumer in q (3)")
    assert "locked" not in line
    assert "--take-deferred" in (put_off.fix() or "")
    assert "other receiver" not in (put_off.fix() or "")


def test_taken_numbers_are_kept_as_ranges() -> None:
    taken = Taken()
    for seq in (5, 6, 7, 1, 3, 2, 4, 100, 1 << 48):
        assert taken.add(seq)
    assert not taken.add(3)
    assert taken.ranges == 3
    assert len(taken) == 9
    assert 4 in taken
    assert 8 not in taken
    assert 99 not in taken
    assert (1 << 48) in taken
    assert taken.add(8)
    assert taken.add(99)
    assert taken.ranges == 3  # 1..8, 99..100, 2**48
