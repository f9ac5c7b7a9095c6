"""Dealing a snapshot's ranges to tasks and peeking them side by side within a task, with
plain producers: no Spark, no Service Bus."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from syphon.job.read.snapshot import QueueRange, deal, side_by_side


def test_ranges_are_dealt_round_robin_to_at_most_the_tasks() -> None:
    ranges = [QueueRange(f"q{i}") for i in range(5)]
    assert deal(ranges, 2) == [[ranges[0], ranges[2], ranges[4]], [ranges[1], ranges[3]]]
    assert deal(ranges, 0) == [[r] for r in ranges]  # unset: a task per range
    assert deal(ranges, 9) == [[r] for r in ranges]
    assert deal(ranges, 1) == [ranges]


def counting(name: str, n: int) -> Callable[[], Iterator[str]]:
    return lambda: (f"{name}{i}" for i in range(n))


def test_every_item_of_every_producer_comes_once_each_producer_in_its_order() -> None:
    got = list(side_by_side([counting("a", 3000), counting("b", 5), counting("c", 0)]))
    assert sorted(got) == sorted([f"a{i}" for i in range(3000)] + ["b0", "b1", "b2", "b3", "b4"])
    assert [x for x in got if x.startswith("a")] == [f"a{i}" for i in range(3000)]


def test_the_producers_run_at_the_same_time() -> None:
    both = threading.Barrier(2, timeout=10)

    def meeting(name: str) -> Callable[[], Iterator[str]]:
        def produce() -> Iterator[str]:
            both.wait()  # breaks (and raises here) unless the other one is running too
            yield name

        return produce

    assert sorted(side_by_side([meeting("a"), meeting("b")])) == ["a", "b"]


def test_a_producers_error_is_raised_to_the_reader() -> None:
    def failing() -> Iterator[str]:
        yield "x"
        raise ConnectionResetError("the namespace went away")

    with pytest.raises(ConnectionResetError, match="went away"):
        list(side_by_side([failing, counting("b", 10)]))


def test_closing_the_reader_early_stops_the_producers() -> None:
    produced = {"n": 0}

    def endless() -> Iterator[int]:
        while True:
            produced["n"] += 1
            yield produced["n"]

    reader = side_by_side([endless, endless])
    assert next(reader) >= 1
    reader.close()  # returns only once both producers stopped (the pool is joined)
    assert produced["n"] < 10_000  # bounded by the hand-off buffer, not endless
