"""A queue read once under lock (:class:`syphon.servicebus.locked.LockedQueue`), against
the local Service Bus through the real SDK: the bytes it keeps are the bytes the
service holds (what a peek answers), its messages stay locked until it settles them by
token, a renewal keeps them past their lock, and a lapsed lock is reported lost."""

from __future__ import annotations

import threading
from datetime import timedelta

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import ManualClock, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.core.peeked import sequence_number, snapshot_row
from syphon.job.read.once import ReadOnce
from syphon.job.read.snapshot import QueueRange
from syphon.servicebus.access import Access
from syphon.servicebus.locked import COMPLETE, DEAD_LETTER, LockedQueue
from syphon.servicebus.peek import peek_queue


def _access(sb: object) -> Access:
    return Access("s", "secondary", "localhost", connection_string=sb.connection_string)  # type: ignore[attr-defined]


def _sans_lock(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if k not in ("encoded",)}


def _send(sb: object, queue: str, bodies: list[bytes]) -> None:
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:  # type: ignore[attr-defined]
        with client.get_queue_sender(queue) as sender:
            for i, b in enumerate(bodies):
                sender.send_messages(
                    ServiceBusMessage(b, application_properties={"n": i, "f": 0.5 + i})
                )


def test_a_receive_keeps_the_bytes_a_peek_answers_and_each_message_locked(
    servicebus_emulator: EmulatorFactory,
) -> None:
    # one message larger than the SDK's largest frame (1 MB): it comes in several frames
    sb = servicebus_emulator(QueueSpec("q", max_message_size_in_kilobytes=4096))
    bodies = [b"small", bytes(range(256)) * 6000, b"third"]
    _send(sb, "q", bodies)
    access = _access(sb)
    peeked = list(peek_queue(access, "q"))
    with LockedQueue(access, "q") as locked:
        got = [e for _, e in locked.receive(10, 1.0)]
        # what a snapshot reads of them is what it reads of a peek, in order: the same
        # rows but for the service's annotations of the receive (the lock's end), which
        # the replay drops with the others (syphon.core.rebuild)
        rows = [snapshot_row(e, "q") for e in got]
        assert [_sans_lock(r) for r in rows] == [_sans_lock(r) for r in peeked]
        assert bodies[1] in got[1]
        assert locked.locked == [sequence_number(e) for e in got]
        assert locked.lock_seconds is not None
        assert 0 < locked.lock_seconds <= 60
        stored = sb.broker.entity("q").messages.values()
        assert all(m.lock_token is not None for m in stored)
        # a second receive of the queue gets nothing: what is locked is invisible
        assert locked.receive(10, 0.3) == []
        assert locked.received == 3
        # the link does not remember what it handed out: those are settled by token,
        # never through the link, and a read's memory does not grow with its messages
        assert locked._receiver._handler._link._received_delivery_tags == set()


def test_locked_messages_are_settled_by_token_a_page_in_one_request(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    _send(sb, "q", [b"a", b"b", b"c", b"d"])
    with LockedQueue(_access(sb), "q") as locked:
        seqs = [seq for seq, _ in locked.receive(4, 1.0)]
        locked.settle(seqs[:2], COMPLETE)
        locked.settle([seqs[2]], DEAD_LETTER, "bad", "why")
        assert locked.locked == [seqs[3]]
        assert locked.requests == 2
    # the fourth was given back on leaving: available again, once more delivered
    q = sb.broker.entity("q")
    (left,) = q.messages.values()
    assert (left.seq, left.lock_token, left.delivery_count) == (seqs[3], None, 1)
    (dead,) = sb.broker.entity("q/$DeadLetterQueue").messages.values()
    assert dead.seq is not None


def test_a_renewal_keeps_the_locks_past_their_duration_and_a_lapsed_one_is_lost(
    servicebus_emulator: EmulatorFactory,
) -> None:
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=10)), clock=clock)
    _send(sb, "q", [b"a", b"b"])
    with LockedQueue(_access(sb), "q") as locked:
        seqs = [seq for seq, _ in locked.receive(2, 1.0)]
        sb.advance(8)
        assert locked.renew() == []
        sb.advance(8)  # 16 s after the receive: locked only thanks to the renewal
        locked.settle([seqs[0]], COMPLETE)
        sb.advance(11)  # past the renewed lock
        assert locked.renew() == [seqs[1]]
        assert locked.locked == []
        assert locked.lost == {seqs[1]}
        # a settle of a lapsed lock settles nothing and says so, whatever thread asks
        assert locked.settle([seqs[1]], COMPLETE) == [seqs[1]]
    # the lapsed one is available again; the completed one is gone
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as receiver:
            again = receiver.receive_messages(5, max_wait_time=1)
    assert [m.sequence_number for m in again] == [seqs[1]]


def test_a_read_waits_on_a_busy_queue_that_still_holds_what_the_run_counted(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """A receive that comes back empty while the queue holds messages the run counted
    does not end the read: a busy (throttling) queue hands them out a little later, and a
    read that took the empty receive as the queue's end would leave them for the next
    run while the run said it was done. A read of a queue of unknown count still ends at
    the first empty receive."""
    sb = servicebus_emulator(QueueSpec("q"))
    _send(sb, "q", [b"one", b"two", b"three"])
    sb.broker.set_fault("q", busy=True)
    # the throttling ends after a while: later than the first receive gives up waiting
    threading.Timer(0.5, sb.broker.clear_faults).start()
    with ReadOnce(_access(sb), ["q"], counts={"q": 3}, wait_seconds=0.1) as once:
        got = [body for _, page in once.pages([QueueRange("q")]) for body in page]
        assert len(got) == 3
        assert once.received == 3
    with ReadOnce(_access(sb), ["q"], wait_seconds=0.1) as once:
        sb.broker.set_fault("q", busy=True)  # unknown count: the empty receive ends it
        # the gap check's peek of the queue's tail, retried by the SDK, goes through
        # once the throttling ends
        threading.Timer(0.3, sb.broker.clear_faults).start()
        assert list(once.pages([QueueRange("q")])) == []


def test_a_lock_the_renewal_found_lapsed_is_settled_as_lock_lost_whichever_comes_first(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """The renewal drops a lapsed lock from what the queue holds a moment before the
    settle comes to it (they run on two threads): the settle row says ``lock_lost``,
    never ``not_received`` (the run did receive it) or a ``KeyError`` of the lookup."""
    clock = ManualClock()
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=10)), clock=clock)
    _send(sb, "q", [b"a", b"b", b"c"])
    with ReadOnce(_access(sb), ["q"], counts={"q": 3}, wait_seconds=0.1) as once:
        got = [m for _, page in once.pages([QueueRange("q")]) for m in page]
        seqs = [sequence_number(m) for m in got]
        sb.advance(11)
        # the renewal thread's work, as the queue does it: the locks are found lost and
        # dropped, before the renewal's caller learns of it
        assert once.queue("q").renew() == seqs
        rows = once.settle([("q", s, "complete", None, "replay") for s in seqs], "r")
    assert sorted((r["sequence_number"], r["outcome"], r["detail"]) for r in rows) == [
        (s, "left", "lock_lost") for s in seqs
    ]
    assert once.lost == {"q": 3}


def test_the_gap_check_finds_what_another_receiver_locks_and_peeks_an_empty_hole_once(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """Another receiver holds the second and third of six messages; the fifth was
    removed before the run. The read receives 1, 4 and 6; the gap check peeks the hole
    2..3 (finding both, locked) and the hole at 5 (empty: one message peeked, the one
    after it, which the run holds)."""
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=60)))
    _send(sb, "q", [b"1", b"2", b"3", b"4", b"5", b"6"])
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as other:
            first = other.receive_messages(max_message_count=5, max_wait_time=5)
            assert len(first) == 5
            other.abandon_message(first[0])
            other.abandon_message(first[3])
            other.complete_message(first[4])  # the fifth is gone
            locked_by_other = [first[1].sequence_number, first[2].sequence_number]
            with ReadOnce(_access(sb), ["q"], wait_seconds=0.1) as once:
                got = [m for _, page in once.pages([QueueRange("q")]) for m in page]
                assert [sequence_number(m) for m in got] == [1, 4, 6]
                assert sorted(once.gaps.unseen["q"]) == locked_by_other == [2, 3]
                # hole 2..3: a peek of one (2), then of two (3, and 4 ends it); hole 5:
                # one (6); the tail after 6: nothing
                assert sb.broker.messages_peeked["q"] == 1 + 2 + 1
                assert once.peeked == 4
                assert [q for q, _ in once.gaps.take_new()] == ["q", "q"]
                assert once.gaps.take_new() == []  # reported once
            for m in first[1:3]:
                other.abandon_message(m)


def test_a_message_found_unseen_is_never_taken_by_a_later_read_before_its_key_is_held_back(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """The read ahead of the next wave runs while this wave's keys are being held back:
    a message this wave's gap check found locked, let go and received by that read, is
    kept locked there and not taken, or its key's later messages in this wave would go out
    before it."""
    sb = servicebus_emulator(QueueSpec("q", lock_duration=timedelta(seconds=60)))
    _send(sb, "q", [b"1", b"2", b"3"])
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_receiver("q") as other:
            first, second = other.receive_messages(max_message_count=2, max_wait_time=5)
            other.abandon_message(first)
            with ReadOnce(_access(sb), ["q"], wait_seconds=0.1) as once:
                got = [m for _, page in once.pages([QueueRange("q")]) for m in page]
                assert [sequence_number(m) for m in got] == [1, 3]
                assert sorted(once.gaps.unseen["q"]) == [2]
                other.abandon_message(second)  # let go before the run held its key back
                assert list(once.pages([QueueRange("q")])) == []
                assert once.queue("q").locked == [1, 2, 3]  # received, locked, not taken
                assert [q for q, _ in once.gaps.take_new()] == ["q"]
