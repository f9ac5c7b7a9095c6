"""A run's source read once: every message received under lock beside the driver, held
until the run has settled it, and never read again.

A :class:`HeldSource` opens one :class:`~syphon.servicebus.locked.LockedQueue` per
source queue when the run starts and keeps it for the whole run, across the Spark
stages of every wave (a Spark task would close its receivers when it ends, and with
them what they hold). A wave's read receives from each queue (four queues at a time)
and hands the messages to Spark as Arrow (:meth:`HeldSource.frame`): a snapshot row per
message, made from the bytes the service sent, exactly as a peek's. A message stays
locked, so no later receive of the run sees it again, until the wave's outcomes are in
the audit and :mod:`syphon.job.settle_held` completes or dead-letters it by its lock
token; what the run leaves (failed sends, held-back keys, what was read beyond the last
wave) stays held until the run ends, and is then given back (abandoned) for the next run.

A thread renews every held lock, a page of tokens per request, at a third of the
queues' lock duration (the first message received tells it). A lock that lapses anyway
(the driver stalled, or the namespace refused the renewal) is recorded as lost: its
message is the queue's again, and the settle leaves it for a later run, which finds its
outcome in the audit (a message sent is then a duplicate, completed unsent). A later
wave of the same run that receives it again holds it without taking it: no wave plans
a message another wave of its run planned.

If the driver dies, its links die with it: what it held comes back when the locks lapse
(the queue's lock duration), and the next run reads it as any other message.

**What the run could not see.** A receive hands out what no one holds, in sequence
order, and skips what another receiver holds locked (a killed run's locks until they
lapse, an explorer in peek-lock mode, a stray consumer). A run that sent the later
messages of such a message's key would break the key's order. So each read of a queue
checks its sequence numbers for *gaps* (:meth:`HeldSource._check`): every hole between
the numbers the run received (and before the first) is peeked, a peek shows locked
messages too, and so is the queue's tail when a receive came back empty before the run's
start. What a peek finds there that the run does not hold is *unseen*
(:attr:`HeldSource.unseen`): the run holds back its keys for the rest of the run and a
later run, which sees everything, takes them in order. On the normal path a peek of an
empty hole (messages a run already removed) or of the tail costs a message at most, a
hole's unseen messages a credit each: the service numbers a queue's messages without
gaps, so a fresh backlog has no holes and the check costs a credit or two a queue per
wave.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

from syphon.core.errors import SyphonError
from syphon.core.naming import PARTITIONED_SEQUENCE
from syphon.core.peeked import enqueued_time, sequence_number
from syphon.job.handoff import snapshot_frame
from syphon.job.snapshot import QueueRange, side_by_side
from syphon.servicebus.access import Access
from syphon.servicebus.locked import LockedQueue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: How long a receive waits for a queue's next message before taking it as read to its
#: end (the service answers at once what is available).
RECEIVE_WAIT_SECONDS = 1.0
#: How long the receives wait, one after another, when a queue hands out nothing although
#: it holds messages the run counted and never took, before the read takes it as read to
#: its end (a queue answers at once what is available, but a busy one may be slower).
_SHORT_PAGE_WAITS = (2.0, 4.0, 8.0)
#: Queues a read receives from side by side. A receive decodes what it gets in this
#: process, under its one interpreter lock: on 2 cores, 20,000 messages of 1 KB from 10
#: queues took 2.2-2.9 s a thread a queue and 1.5-1.9 s with 2 or 4 threads, on loopback
#: and at 5 ms (tests/benchmarks/bench_receive.py); more threads only contend.
_READ_THREADS = 4
#: How often the renewal looks at the clock.
_RENEWAL_POLL_SECONDS = 0.1
#: Queues opened side by side.
_OPEN_THREADS = 16
#: The most messages one peek of the gap check asks for (it starts at one and doubles
#: while it finds unseen messages: an empty hole costs one).
_GAP_PEEK = 256


class HeldSource:
    """The run's queues of one source, each received once under lock and held (see the
    module docstring). Use it as a context manager: it opens every queue and starts the
    renewal, and on leaving gives back what is still held and closes them."""

    def __init__(
        self,
        access: Access,
        paths: list[str],
        counts: Mapping[str, int | None] | None = None,
        wait_seconds: float = RECEIVE_WAIT_SECONDS,
        before: datetime | None = None,
    ) -> None:
        """``counts``: how many messages each queue held when the run found it (None or
        missing: unknown); a queue's reads stop once they took that many, instead of
        waiting on an empty receive (what arrived since is the next run's). ``before``:
        the run's start; a message enqueued at or after it is not the run's, and the
        gap check of a queue's tail stops there (None: at the queue's end)."""
        self.__access = access
        self.paths = list(paths)
        self.counts = dict(counts or {})
        self.wait_seconds = wait_seconds
        self.before = before
        self._took: dict[str, int] = {}
        self.queues: dict[str, LockedQueue] = {}
        #: per queue, the sequence numbers received again after their lock lapsed (held
        #: again, not taken again)
        self.again: dict[str, set[int]] = {}
        #: per queue, the messages the gap check found that the run could not receive
        #: (held by another receiver), by sequence number, as the service holds them
        self.unseen: dict[str, dict[int, bytes]] = {}
        #: the unseen messages whose keys the run holds back (see :meth:`take_unseen`)
        self._reported: set[tuple[str, int]] = set()
        #: per queue, the sequence number up to which the gap check looked
        self._checked: dict[str, int] = {}
        #: renewals that failed (the namespace refused them), all queues
        self.renewals_failed = 0
        #: per queue, how many messages it held when the run found it that it never
        #: handed out (locked by another receiver, expired or removed): read no more
        self.short: dict[str, int] = {}
        self._highest: dict[str, int] = {}
        self._partitioned: dict[str, set[int]] = {}
        self._marks = threading.Lock()
        self._stop = threading.Event()
        self._renewal: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"HeldSource({len(self.paths)} queues)"

    def __enter__(self) -> HeldSource:
        def open_one(path: str) -> LockedQueue:
            return LockedQueue(self.__access, path).__enter__()

        with ThreadPoolExecutor(max_workers=max(1, min(_OPEN_THREADS, len(self.paths)))) as pool:
            opened = list(pool.map(open_one, self.paths))
        self.queues = dict(zip(self.paths, opened, strict=True))
        self._renewal = threading.Thread(
            target=self._renew_forever, name="syphon-lock-renewal", daemon=True
        )
        self._renewal.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._renewal is not None:
            self._renewal.join()
        again = sum(len(self.again.get(p, set()) & set(q.held)) for p, q in self.queues.items())
        for queue in self.queues.values():
            queue.__exit__(None, None, None)
        if self.given_back:
            log.info("gave back %d messages held, for the next run", self.given_back)
        if again:
            log.warning(
                "%d messages came back after their lock lapsed, and were given back for "
                "the next run, which finds their outcomes in the audit",
                again,
            )

    @property
    def received(self) -> int:
        """How many messages the queues handed out (each a credit): every receive,
        those received again after a lapse included."""
        return sum(q.received for q in self.queues.values())

    @property
    def peeked(self) -> int:
        """How many messages the gap check peeked (each a credit)."""
        return sum(q.peeked for q in self.queues.values())

    @property
    def given_back(self) -> int:
        """How many messages the run gave back (abandoned)."""
        return sum(q.given_back for q in self.queues.values())

    @property
    def give_back_requests(self) -> int:
        """How many requests gave messages back."""
        return sum(q.give_back_requests for q in self.queues.values())

    @property
    def lost(self) -> dict[str, int]:
        """Per queue, how many locks lapsed while the run held them (none: missing)."""
        return {p: len(q.lost) for p, q in self.queues.items() if q.lost}

    def queue(self, path: str) -> LockedQueue:
        """The queue ``path``'s receiver."""
        return self.queues[path]

    def pages(self, ranges: list[QueueRange]) -> Iterator[tuple[str, list[bytes]]]:
        """(queue, encoded messages) of what each range's queue hands out next that the
        run never took, a receive's worth at a time, at most the range's ``limit`` (None:
        to the queue's end), the queues four at a time. A range's sequence numbers do not
        bound a receive: the queue hands out what no one holds, in order."""

        def reader(r: QueueRange) -> Any:
            def pages() -> Iterator[tuple[str, list[bytes]]]:
                for page in self._fresh(r.queue, r.limit):
                    yield r.queue, page

            return pages

        yield from side_by_side([reader(r) for r in ranges], _READ_THREADS)

    def _fresh(self, path: str, limit: int | None) -> Iterator[list[bytes]]:
        """Up to ``limit`` messages of ``path`` the run never took (None: to the end), a
        receive's page at a time; then the gap check of what was received
        (:meth:`_check`).

        A message whose lock lapsed while the run held it is the queue's again, and a
        receive hands it out again, ahead of the rest. An earlier wave of the run took
        it, and its outcome is in the audit (or its wave's settle recorded it left): it
        is held again, given back when the run ends, and no wave takes it twice (a run
        would otherwise plan it again and again while its locks keep lapsing). A queue
        hands out its messages in sequence order, so one the run took has a sequence
        number at most the highest it received there; a partitioned queue (read in one
        wave) numbers each partition apart, and its own are remembered one by one. A
        message the gap check found unseen, received once its holder let it go, is
        held too and never taken: its key is held back for the rest of the run."""
        queue = self.queues[path]
        if path in self.short:  # it came up short: a later read would wait again
            return
        want = limit if limit is not None else 2**62
        count = self.counts.get(path)
        if count is not None:
            with self._marks:
                want = min(want, max(0, count - self._took.get(path, 0)))
        got = 0
        again: set[int] = set()
        taken: list[int] = []
        waits = iter(_SHORT_PAGE_WAITS if count is not None else ())
        wait = self.wait_seconds
        ended = False
        try:
            while got < want:
                asked = want - got
                page = queue.receive_numbered(asked, wait)
                fresh = []
                for seq, encoded in page:
                    if self._was_unseen(path, seq):
                        continue
                    if not self._taken(path, seq):
                        fresh.append(encoded)
                        taken.append(seq)
                    elif seq in again:  # back twice in one read: it would never end
                        raise SyphonError(
                            f"the locks of {path} lapse faster than the run reads it (a "
                            "message came back twice): check that the run can renew them, "
                            "or lengthen the queue's lock duration"
                        )
                    else:
                        again.add(seq)
                if fresh:
                    got += len(fresh)
                    yield fresh
                if len(page) < asked:  # a receive came back empty
                    # the queue had no more, or it was slow to hand out the next while it
                    # still holds what the run counted: wait longer before taking the
                    # queue as read to its end (which would leave those for the next run)
                    wait = next(waits, None) or 0.0
                    if not wait:
                        ended = True
                        if count is not None:
                            with self._marks:
                                self.short[path] = count - self._took.get(path, 0) - got
                        break
            self._check(path, taken, ended)
        finally:
            with self._marks:
                self.again.setdefault(path, set()).update(again)
                self._took[path] = self._took.get(path, 0) + got

    def _was_unseen(self, path: str, seq: int) -> bool:
        """Whether ``seq`` is a message the gap check found unseen (now received: held,
        never taken). A read checks for gaps once it has received all it takes, so such a
        message comes back in a later read, perhaps the read ahead of the next wave while
        this one's keys are still being held back: taken there, its key's later messages
        could go out in this wave before it."""
        with self._marks:
            return seq in self.unseen.get(path, {})

    def take_unseen(self) -> list[tuple[str, bytes]]:
        """(queue, encoded message) of the unseen messages found since the last call:
        the caller holds back their keys for the rest of the run."""
        with self._marks:
            out = [
                (p, m)
                for p, found in sorted(self.unseen.items())
                for seq, m in sorted(found.items())
                if (p, seq) not in self._reported
            ]
            self._reported.update((p, seq) for p, found in self.unseen.items() for seq in found)
        return out

    def _check(self, path: str, taken: list[int], ended: bool) -> None:
        """The gap check of one read of ``path`` that took ``taken``: every hole between
        the sequence numbers taken, and before the first, is peeked, and the queue's tail
        when the read ``ended`` on an empty receive (up to the run's start). What a peek
        finds there is unseen: the run does not hold it (see the module docstring)."""
        if not taken and not ended:
            return
        mark = self._checked.get(path, 0)
        for seq in sorted(taken):
            if seq > mark + 1:
                self._peek_gap(path, mark + 1, seq)
            mark = max(mark, seq)
        if ended:
            self._peek_gap(path, mark + 1, None)
        self._checked[path] = mark

    def _peek_gap(self, path: str, start: int, end: int | None) -> None:
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
                with self._marks:
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

    def _taken(self, path: str, seq: int) -> bool:
        """Whether the run took ``seq`` of ``path`` before (and remembers it now)."""
        with self._marks:
            if seq >= PARTITIONED_SEQUENCE:
                seen = self._partitioned.setdefault(path, set())
                if seq in seen:
                    return True
                seen.add(seq)
                return False
            if seq <= self._highest.get(path, 0):
                return True
            self._highest[path] = seq
            return False

    def frame(self, spark: SparkSession, ranges: list[QueueRange]) -> DataFrame:
        """:meth:`pages` as a DataFrame of the snapshot schema (kept by Spark: the caller
        checkpoints it; a second read would receive more): see :func:`snapshot_frame`."""
        return snapshot_frame(spark, self.pages(ranges))

    def _renew_forever(self) -> None:
        """Renews every held lock each third of the shortest lock duration (known from
        the first message received), from the run's start on."""
        last = time.monotonic()
        while not self._stop.wait(_RENEWAL_POLL_SECONDS):
            known = [q.lock_seconds for q in self.queues.values() if q.lock_seconds]
            if known and time.monotonic() - last >= min(known) / 3:
                last = time.monotonic()
                self._renew_once()

    def _renew_once(self) -> None:
        for path, queue in self.queues.items():
            try:
                lost = queue.renew()
            except Exception as exc:  # the namespace: the next renewal tries again
                log.warning("renewing the locks of %s failed: %s", path, type(exc).__name__)
                self.renewals_failed += 1
                continue
            if lost:
                log.warning("%d locks of %s lapsed while held", len(lost), path)
