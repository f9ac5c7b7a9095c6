"""The local Service Bus's sense of time: the wall clock, or a clock a test moves.

Everything the broker decides by time (lock expiry, time to live, scheduled enqueue
times, duplicate detection windows, session locks, entity timestamps) reads one
:class:`Clock`. A :class:`ManualClock` starts at the wall clock's time, so the
timestamps a client sees (``locked_until_utc``, ``enqueued_time_utc``) look like the
service's, and then moves only when told::

    clock = ManualClock()
    with Emulator(queues=[QueueSpec("q", lock_duration=timedelta(seconds=30))], clock=clock):
        ...  # receive a message
        clock.advance(31)  # its lock has expired; the next receive gets it again

The AMQP layer re-checks time-driven work every few milliseconds while receivers are
attached, so a message that comes due when the clock moves is delivered without any
other nudge.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """The wall clock."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)


class ManualClock:
    """A clock that stands still until :meth:`advance` moves it (thread-safe)."""

    def __init__(self, start_ms: int | None = None) -> None:
        self._lock = threading.Lock()
        self._now = SystemClock().now_ms() if start_ms is None else start_ms

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> int:
        """Moves the clock forward; returns the new time in epoch milliseconds."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._now += round(seconds * 1000)
            return self._now
