"""When a namespace's reactor does its time-driven work for attached receivers.

What an event makes available (a send, a settlement) is served by that event. What time
makes available (a lock expiring, a scheduled message coming due) is served by a tick:
at that moment, :data:`TICK_SECONDS` at the soonest, and at least every
:data:`IDLE_TICK_SECONDS` while receivers are attached (what no event announces, a time
to live running out, is served then). A tick every 20 ms for every attached receiver
cost a test's process about 2% of a core per namespace while a run held its receivers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

TICK_SECONDS = 0.02
IDLE_TICK_SECONDS = 1.0


def next_tick(broker: Any, entities: Iterable[str], dropping: bool) -> float | None:
    """Seconds until the next tick: soon while connections are to be ``dropping``; else,
    for receivers attached to ``entities``, when time next makes a message of theirs
    available, at most :data:`IDLE_TICK_SECONDS`; None without receivers."""
    if dropping:
        return TICK_SECONDS
    entities = set(entities)
    if not entities:
        return None
    now: int = broker.clock.now_ms()
    dues: list[int] = [d for d in map(broker.next_due_ms, entities) if d is not None]
    if not dues:
        return IDLE_TICK_SECONDS
    return min(IDLE_TICK_SECONDS, max(TICK_SECONDS, (min(dues) - now) / 1000))


class Timer:
    """A reactor's one scheduled tick: moved sooner when asked, never later."""

    def __init__(self) -> None:
        self._task: Any = None
        self._at = 0.0

    def schedule(self, container: Any, delay: float, handler: Any) -> None:
        """The tick in ``delay`` seconds on ``container`` (``handler``'s timer event),
        unless one comes sooner already."""
        at = time.monotonic() + delay
        if self._task is not None:
            if self._at <= at:
                return
            self._task.cancel()
        self._task, self._at = container.schedule(delay, handler), at

    def ran(self) -> None:
        """The scheduled tick came."""
        self._task = None
