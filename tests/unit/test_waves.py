"""The waves' time cut (syphon.job.read.waves): every queue read from its cursor for at most
a limit and one more; the watermark is the earliest front among the queues not read to
their end; the wave is what was read before it. Checked here against queues simulated
in Python, whatever their contents: the wave is a prefix of every queue, holds every
message enqueued before the watermark in any queue, none after, and is never empty
while a queue holds a message before the earliest front."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.waiting import wait_until
from syphon.core.naming import PARTITIONED_SEQUENCE
from syphon.job.read.reader import WaveReader
from syphon.job.read.wave_sizes import FIRST_WAVE_MESSAGES, WAVE_GROWTH, time_ordered, wave_limits
from syphon.job.read.waves import Cut, QueueRead, WaveRead, cut_reads, watermark
from syphon.servicebus.discovery import DiscoveredQueue

T0 = datetime(2026, 11, 26, 8, 0, tzinfo=timezone.utc)

#: a queue: its messages' enqueue times (ms after T0), in sequence order
Queue = list[int]


def read(queue: Queue, cursor: int, limit: int) -> list[tuple[int, int]]:
    """(sequence number, ms) of what a wave reads: from the cursor, the limit and one."""
    return [(seq, ms) for seq, ms in enumerate(queue, start=1) if seq >= cursor][: limit + 1]


Wave = dict[str, list[tuple[int, int]]]


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def cut(queues: dict[str, Queue], cursors: dict[str, int], limit: int) -> tuple[Any, Wave]:
    """The watermark of a wave over ``queues`` (syphon.job.read.waves.cut_reads over what the
    wave reads) and what it takes of each; checks the cut's cursors and count too."""
    seen = {name: read(queue, cursors[name], limit) for name, queue in queues.items()}
    marks = [(name, s, at(ms)) for name, got in seen.items() for s, ms in got]
    result = cut_reads(marks, list(queues), cursors, limit)
    mark = result.watermark
    wave = {
        name: [(s, ms) for s, ms in got if mark is None or at(ms) < mark]
        for name, got in seen.items()
    }
    assert result.taken == sum(len(w) for w in wave.values())
    for name, got in seen.items():
        left = [s for s, ms in got if mark is not None and at(ms) >= mark]
        expected = left[0] if left else (got[-1][0] + 1 if got else cursors[name])
        assert result.cursors[name] == expected
    assert result.last == (mark is None)
    return mark, wave


def queues_strategy() -> st.SearchStrategy[dict[str, Queue]]:
    steps = st.lists(st.integers(0, 3), max_size=30)  # 0: the same millisecond as before

    def times(deltas: list[int]) -> Queue:
        out, now = [], 0
        for d in deltas:
            now += d
            out.append(now)
        return out

    return st.dictionaries(st.sampled_from("abcd"), steps.map(times), min_size=1)


@settings(max_examples=300, deadline=None)
@given(queues=queues_strategy(), limit=st.integers(1, 8), data=st.data())
def test_a_wave_is_a_time_cut_and_a_prefix_of_every_queue(
    queues: dict[str, Queue], limit: int, data: st.DataObject
) -> None:
    cursors = {
        n: data.draw(st.integers(1, len(q) + 1), label=f"cursor {n}") for n, q in queues.items()
    }
    mark, wave = cut(queues, cursors, limit)
    for name, queue in queues.items():
        rest = [(s, ms) for s, ms in enumerate(queue, start=1) if s >= cursors[name]]
        taken = wave[name]
        assert taken == rest[: len(taken)]  # a prefix of what is left in the queue
        before = [
            (s, ms) for s, ms in rest if mark is None or T0 + timedelta(milliseconds=ms) < mark
        ]
        assert taken == before  # every message enqueued before the watermark, none after
    fronts = [
        ms for name, q in queues.items() for s, ms in enumerate(q, start=1) if s >= cursors[name]
    ]
    if fronts and mark is not None:
        earliest = min(fronts)
        if at(earliest) < mark:
            assert any(wave.values())  # progress


def test_the_waves_of_a_backlog_take_each_message_once_in_time_order() -> None:
    """Waves one after another, cursors moved past what each took, doubling the limit
    when a burst leaves a wave empty: every message once, never an earlier one after a
    later one."""
    queues = {"a": [0, 1, 1, 1, 1, 1, 9, 10], "b": [2, 3, 4, 5, 6, 7, 8, 11], "c": [5]}
    cursors = {n: 1 for n in queues}
    taken: list[int] = []
    limit = waves = 0
    while any(cursors[n] <= len(q) for n, q in queues.items()):
        limit = limit or 2
        _, wave = cut(queues, cursors, limit)
        if not any(wave.values()):
            limit *= 2
            continue
        limit = 2
        waves += 1
        batch = sorted(ms for got in wave.values() for _, ms in got)
        assert not taken or batch[0] >= taken[-1]
        taken.extend(batch)
        for name, got in wave.items():
            if got:
                cursors[name] = got[-1][0] + 1
    assert taken == sorted(ms for q in queues.values() for ms in q)
    assert waves > 1


def test_a_queue_read_to_its_end_has_no_front() -> None:
    assert QueueRead("q", 3, 3, T0, limit=3).ended
    assert not QueueRead("q", 4, 4, T0, limit=3).ended
    assert watermark([QueueRead("q", 3, 3, T0, 3), QueueRead("r", 0, None, None, 3)]) is None
    later = T0 + timedelta(seconds=1)
    assert watermark([QueueRead("q", 4, 4, later, 3), QueueRead("r", 4, 9, T0, 3)]) == T0


def test_a_front_without_an_enqueue_time_is_refused() -> None:
    with pytest.raises(ValueError, match="front of q"):
        watermark([QueueRead("q", 4, 4, None, 3)])


def test_dead_letter_and_partitioned_queues_cannot_be_cut_by_time() -> None:
    assert time_ordered(["p/x-servicebus-transfer/0", "orders"], [1, 2, 3])
    assert not time_ordered(["orders/$DeadLetterQueue"])
    assert not time_ordered(["orders"], [1, PARTITIONED_SEQUENCE + 1])


def test_no_wave_takes_a_message_enqueued_after_the_run_started() -> None:
    """A queue read to its end still holds messages parked after the run started: the
    cut stops at the run's start, the wave is the last, the cursor stays on them."""
    marks = [("a", 1, at(0)), ("a", 2, at(5)), ("a", 3, at(9))]
    result = cut_reads(marks, ["a"], {"a": 1}, limit=10, before=at(5))
    assert (result.watermark, result.last, result.taken) == (at(5), True, 1)
    assert result.cursors == {"a": 2}


def test_waves_grow_from_a_small_first_one_to_the_runs_wave_size() -> None:
    """The first wave is small (its messages home in seconds), each next one WAVE_GROWTH
    times the one before, never past run.wave_messages over the queues."""
    limits = wave_limits(40_000, 10)
    got = [next(limits) for _ in range(5)]
    first = FIRST_WAVE_MESSAGES // 10
    assert got == [first, first * WAVE_GROWTH, min(4_000, first * WAVE_GROWTH**2), 4_000, 4_000]
    assert got == sorted(got)


def test_a_run_of_small_waves_takes_them_at_their_size_from_the_first() -> None:
    limits = wave_limits(6, 3)
    assert [next(limits) for _ in range(3)] == [2, 2, 2]
    one = wave_limits(5, 1)  # fewer than the first wave's messages in one queue
    assert [next(one) for _ in range(2)] == [5, 5]


def _waves_read_by(monkeypatch: pytest.MonkeyPatch, waves: int) -> list[int]:
    """Stands for each wave's read (syphon.job.read.waves.read_wave, as the reader calls
    it): ``waves`` waves of one message each; returns the list each read appends its
    wave's number to as it starts."""
    started: list[int] = []

    def read_wave(*args: Any) -> tuple[WaveRead, None]:
        started.append(len(started) + 1)
        last = len(started) == waves
        cut = Cut(reads=[], watermark=None, last=last, taken=1, cursors={})
        return WaveRead(rows=None, read=None, cut=cut, limit=1), None  # type: ignore[arg-type]

    monkeypatch.setattr("syphon.job.read.reader.read_wave", read_wave)
    return started


def _queue() -> DiscoveredQueue:
    return DiscoveredQueue("p", 0, "p/x-servicebus-transfer/0", 10, False)


def test_the_next_wave_is_read_once_the_caller_has_planned_this_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """syphon.job.read.reader.WaveReader: wave 3's read waits for wave 2's plan (the plan
    has the cores and the driver's interpreter to itself), then runs while the caller
    replays and settles wave 2; wave 2's read waits for the whole first wave (its replay
    is the way to the first message home), and a caller that never says it planned a
    wave gets the next one all the same."""
    started = _waves_read_by(monkeypatch, waves=4)
    with WaveReader(None, [_queue()], 2, T0) as reader:  # type: ignore[arg-type]
        first = reader.next_wave()
        assert first is not None
        assert first.number == 1
        reader.planned()
        time.sleep(0.2)  # time enough for a read that did not wait to start
        assert started == [1]  # the first wave is replayed with the cores to itself
        second = reader.next_wave()
        assert second is not None
        assert (second.number, started) == (2, [1, 2])
        time.sleep(0.2)
        assert started == [1, 2]
        reader.planned()
        wait_until(lambda: started == [1, 2, 3], timeout=10)  # before the caller asks
        third = reader.next_wave()
        assert third is not None
        assert third.number == 3
        time.sleep(0.2)
        assert started == [1, 2, 3]
        fourth = reader.next_wave()
        assert fourth is not None
        assert fourth.last
        assert started == [1, 2, 3, 4]
        assert reader.next_wave() is None
        assert reader.next_wave() is None


def test_a_caller_that_stops_leaves_no_read_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that stops after a wave (--max-waves, --until, a fault) closes the reader:
    the next wave's read, still waiting for the plan, never starts, and the close does
    not wait for it; a closed reader hands out no wave."""
    started = _waves_read_by(monkeypatch, waves=3)
    reader = WaveReader(None, [_queue()], 2, T0)  # type: ignore[arg-type]
    assert reader.next_wave() is not None
    closing = threading.Thread(target=reader.close)
    closing.start()
    closing.join(timeout=10)
    assert not closing.is_alive()
    assert started == [1]
    assert reader.next_wave() is None
