"""What a read once could not see: the gap check of each read of a queue.

A receive hands out what no one keeps locked, in sequence order, and skips what another
receiver keeps locked (a killed run's locks until they lapse, an explorer in peek-lock
mode, a stray consumer). A run that sent the later messages of such a message's key
would break the key's order. So each read of a queue checks its sequence numbers for
*gaps* (:meth:`Gaps.check`): every hole between the numbers the run received (and
before the first) is peeked, a peek shows locked messages too, and so is the queue's
tail when a receive came back empty before the run's start. What a peek finds there is
*unseen* (:attr:`Gaps.unseen`): the run holds back its keys for the rest of the run
(:mod:`syphon.job.plan.unseen`), and a later run, which sees everything, takes them in order.

On the normal path a peek of an empty hole (messages a run already removed) or of the
tail costs a message at most, a hole's unseen messages a credit each: the service numbers
a queue's messages without gaps, so a fresh backlog has no holes and the check costs a
credit or two a queue per wave.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone

from syphon.core.peeked import enqueued_time, sequence_number
from syphon.servicebus.locked import LockedQueue

#: The most messages one peek of the gap check asks for (it starts at one and doubles
#: while it finds unseen messages: an empty hole costs one).
_GAP_PEEK = 256


class Gaps:
    """The gap check of a run's queues (``queues``, by path), and what it found. ``before``:
    the run's start; the check of a queue's tail stops at the first message enqueued at
    or after it (None: at the queue's end). Its reads may run side by side: what it
    found is kept under a lock."""

    def __init__(self, queues: Mapping[str, LockedQueue], before: datetime | None) -> None:
        self.queues = queues
        self.before = before
        #: per queue, the messages the check found that the run could not receive (kept
        #: locked by another receiver), by sequence number, as the service holds them
        self.unseen: dict[str, dict[int, bytes]] = {}
        self._reported: set[tuple[str, int]] = set()
        #: per queue, the sequence number up to which the check looked
        self._checked: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Gaps({sum(len(m) for m in self.unseen.values())} unseen)"

    def was_unseen(self, path: str, seq: int) -> bool:
        """Whether ``seq`` is a message the check found unseen. A read checks for gaps
        once it has received all it takes, so such a message comes back in a later
        read, perhaps the read ahead of the next wave while this one's keys are still
        being held back: taken there, its key's later messages could go out in this wave
        before it. The caller keeps it locked and never takes it."""
        with self._lock:
            return seq in self.unseen.get(path, {})

    @contextlib.contextmanager
    def found_in(self, path: str) -> Iterator[dict[int, bytes]]:
        """What the check found unseen in ``path`` (sequence number: message), under the
        check's lock: the caller may remove what it takes after all (a deferred message
        it received by its sequence number)."""
        with self._lock:
            yield self.unseen.get(path, {})

    def take_new(self) -> list[tuple[str, bytes]]:
        """(queue, encoded message) of the unseen messages found since the last call."""
        with self._lock:
            out = [
                (p, m)
                for p, found in sorted(self.unseen.items())
                for seq, m in sorted(found.items())
                if (p, seq) not in self._reported
            ]
            self._reported.update((p, seq) for p, found in self.unseen.items() for seq in found)
        return out

    def check(self, path: str, taken: list[int], ended: bool) -> None:
        """The check of one read of ``path`` that took ``taken``: every hole between the
        sequence numbers taken, and before the first, is peeked, and the queue's tail
        when the read ``ended`` on an empty receive (up to the run's start)."""
        if not taken and not ended:
            return
        mark = self._checked.get(path, 0)
        for seq in sorted(taken):
            if seq > mark + 1:
                self._peek(path, mark + 1, seq)
            mark = max(mark, seq)
        if ended:
            self._peek(path, mark + 1, None)
        self._checked[path] = mark

    def _peek(self, path: str, start: int, end: int | None) -> None:
        """Peeks ``path`` from ``start`` up to (not including) ``end`` (None: to the
        run's start, or the queue's end) and records what it finds as unseen. A peek asks
        for one message first and twice as many each time it finds only unseen ones, so
        an empty hole costs one message, however wide."""
        queue = self.queues[path]
        ask = 1
        at = start
        while True:
            page = queue.peek(at, ask)
            if not page:
                return
            for encoded in page:
                seq = sequence_number(encoded)
                if end is not None and seq >= end:
                    return
                if end is None and self._not_the_runs(encoded):
                    return
                with self._lock:
                    self.unseen.setdefault(path, {})[seq] = encoded
                at = seq + 1
            ask = min(ask * 2, _GAP_PEEK)

    def _not_the_runs(self, encoded: bytes) -> bool:
        """Whether a message was enqueued at or after the run's start (no wave of the
        run takes it)."""
        if self.before is None:
            return False
        when = enqueued_time(encoded)
        if when is None:
            return False
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when >= self.before
