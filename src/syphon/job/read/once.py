"""A run's source read once: every message received under lock beside the driver, kept
locked until the run has settled it, and never read again.

A :class:`ReadOnce` opens one :class:`~syphon.servicebus.locked.LockedQueue` per source
queue when the run starts and keeps it for the whole run, across the Spark stages of
every wave (a Spark task would close its receivers when it ends, and with them their
locks). A wave's read receives from each queue (four queues at a time) and hands the
messages to Spark as Arrow (:func:`syphon.job.read.handoff.snapshot_frame`): a snapshot row
per message, made from the bytes the service sent, exactly as a peek's. A message stays
locked, so no later receive of the run sees it again, until the wave's outcomes are in
the audit and :meth:`ReadOnce.settle` completes or dead-letters it by its lock token;
what the run leaves (failed sends, held-back keys, what was read beyond the last wave)
stays locked until the run ends, and is then given back (abandoned) for the next run.

A :class:`~syphon.servicebus.renewal.Renewal` renews every lock at a third of the
queues' lock duration. A lock that lapses anyway (the driver stalled, or the namespace
refused the renewal) is recorded as lost: its message is the queue's again, and the
settle leaves it for a later run, which finds its outcome in the audit (a message sent
is then a duplicate, completed unsent). A later wave of the same run that receives it
again keeps it locked without taking it: no wave plans a message another wave of its
run planned. Only such a message counts as a lapse: the run remembers every sequence
number it took, so a message it receives after another receiver let it go (an explorer,
a killed run whose locks lapsed) is simply taken, as any other.

If the driver dies, its links die with it: its locks lapse after the queue's lock
duration, and the next run reads those messages as any other.

Each read of a queue is checked for what it could not see (:mod:`syphon.job.read.gaps`):
what another receiver keeps locked is *unseen*, and the run holds back its keys.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from syphon.core.errors import SyphonError
from syphon.core.peeked import deferred
from syphon.job.read.gaps import Gaps
from syphon.job.read.handoff import snapshot_frame
from syphon.job.read.snapshot import QueueRange, side_by_side
from syphon.job.settle.actions import Action
from syphon.job.settle.by_locks import QueueSettle, SettledCount, stopped_by
from syphon.obs.failpoints import FailPoint
from syphon.servicebus.access import Access
from syphon.servicebus.locked import LockedQueue
from syphon.servicebus.renewal import Renewal

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
#: Queues a read receives from side by side: more threads only contend for the one
#: interpreter lock that decodes what they receive (tests/benchmarks/README.md, "Reading
#: once").
_READ_THREADS = 4
#: Queues opened, or settled, side by side.
_OPEN_THREADS = 16


class ReadOnce:
    """The run's queues of one source, each received once under lock and kept locked
    (see the module docstring). Use it as a context manager: it opens every queue and
    starts the renewal, and on leaving gives back what it still keeps locked and closes
    them."""

    def __init__(
        self,
        access: Access,
        paths: list[str],
        counts: Mapping[str, int | None] | None = None,
        wait_seconds: float = RECEIVE_WAIT_SECONDS,
        before: datetime | None = None,
        take_deferred: bool = False,
    ) -> None:
        """``counts``: how many messages each queue had when the run found it (None or
        missing: unknown); a queue's reads stop once they took that many, instead of
        waiting on an empty receive (what arrived since is the next run's). ``before``:
        the run's start; a message enqueued at or after it is not the run's, and the
        gap check of a queue's tail stops there (None: at the queue's end).
        ``take_deferred``: the deferred messages the gap check finds are received by
        their sequence numbers and taken with the read (else their keys wait)."""
        self.__access = access
        self.paths = list(paths)
        self.counts = dict(counts or {})
        self.wait_seconds = wait_seconds
        self.take_deferred = take_deferred
        #: how many deferred messages it received by their sequence numbers, and took
        self.deferred_taken = 0
        self._took: dict[str, int] = {}
        self.queues: dict[str, LockedQueue] = {}
        self.gaps = Gaps(self.queues, before)
        self.renewal = Renewal(self.queues)
        #: per queue, the sequence numbers received again after their lock lapsed (kept
        #: locked again, not taken again)
        self.again: dict[str, set[int]] = {}
        #: per queue, how many messages it had when the run found it that it never
        #: handed out (locked by another receiver, expired or removed): read no more
        self.short: dict[str, int] = {}
        #: per queue, the sequence numbers the run took (as ranges)
        self._numbers: dict[str, Taken] = {}
        self._marks = threading.Lock()

    def __repr__(self) -> str:
        return f"ReadOnce({len(self.paths)} queues)"

    def __enter__(self) -> ReadOnce:
        def open_one(path: str) -> LockedQueue:
            return LockedQueue(self.__access, path).__enter__()

        with ThreadPoolExecutor(max_workers=max(1, min(_OPEN_THREADS, len(self.paths)))) as pool:
            opened = list(pool.map(open_one, self.paths))
        self.queues.update(zip(self.paths, opened, strict=True))
        self.renewal.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.renewal.__exit__(None, None, None)
        again = sum(len(self.again.get(p, set()) & set(q.locked)) for p, q in self.queues.items())
        for queue in self.queues.values():
            queue.__exit__(None, None, None)
        if self.given_back:
            log.info("gave back %d messages kept locked, for the next run", self.given_back)
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
    def taken(self) -> int:
        """How many messages the run took (each once: never those it received again after
        a lapse of its own, nor those the gap check found unseen)."""
        with self._marks:
            return sum(self._took.values())

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
        """Per queue, how many locks lapsed while the run kept them (none: missing)."""
        return {p: len(q.lost) for p, q in self.queues.items() if q.lost}

    def queue(self, path: str) -> LockedQueue:
        """The queue ``path``'s receiver."""
        return self.queues[path]

    def frame(
        self,
        spark: SparkSession,
        ranges: list[QueueRange],
        give_back: Callable[[], None] | None = None,
    ) -> DataFrame:
        """:meth:`pages` as a DataFrame of the snapshot schema (kept by Spark: the caller
        checkpoints it; a second read would receive more): see :func:`snapshot_frame`."""
        return snapshot_frame(spark, self.pages(ranges), give_back)

    def pages(self, ranges: list[QueueRange]) -> Iterator[tuple[str, list[bytes]]]:
        """(queue, encoded messages) of what each range's queue hands out next that the
        run never took, a receive's worth at a time, at most the range's ``limit`` (None:
        to the queue's end), the queues four at a time. A range's sequence numbers do not
        bound a receive: the queue hands out what no one keeps locked, in order."""

        def reader(r: QueueRange) -> Any:
            def pages() -> Iterator[tuple[str, list[bytes]]]:
                for page in self._fresh(r.queue, r.limit):
                    yield r.queue, page

            return pages

        yield from side_by_side([reader(r) for r in ranges], _READ_THREADS)

    def _fresh(self, path: str, limit: int | None) -> Iterator[list[bytes]]:
        """Up to ``limit`` messages of ``path`` the run never took (None: to the end), a
        receive's page at a time; then the gap check of what was received.

        A message whose lock lapsed while the run kept it is the queue's again, and a
        receive hands it out again, ahead of the rest. An earlier wave of the run took
        it, and its outcome is in the audit (or its wave's settle recorded it left): it
        is locked again, given back when the run ends, and no wave takes it twice (a run
        would otherwise plan it again and again while its locks keep lapsing). The run
        knows it by its sequence number, which it remembers for every message it took. A
        message it never took is taken whatever its number: one another receiver let go
        (a killed run's, an explorer's) is the run's like any other. A message the gap
        check found unseen, received once its holder let it go, is locked too and never
        taken: its key is held back for the rest of the run."""
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
                page = queue.receive(asked, wait)
                fresh = []
                for seq, encoded in page:
                    if self.gaps.was_unseen(path, seq):
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
            self.gaps.check(path, taken, ended)
            if self.take_deferred and (put_off := self._deferred_of(path)):
                got += len(put_off)
                yield put_off
        finally:
            with self._marks:
                self.again.setdefault(path, set()).update(again)
                self._took[path] = self._took.get(path, 0) + got

    def _deferred_of(self, path: str) -> list[bytes]:
        """The deferred messages the gap check found in ``path`` (not taken yet),
        received by their sequence numbers and taken, in sequence order; none when the
        service refuses (one was settled meanwhile): their keys wait, as without
        ``take_deferred``."""
        with self.gaps.found_in(path) as found:
            seqs = sorted(seq for seq, m in found.items() if deferred(m))
            if not seqs:
                return []
            try:
                page = self.queues[path].receive_deferred(seqs)
            except Exception as exc:  # the service's refusal: the keys wait
                log.warning(
                    "the deferred messages of %s could not be received (%s): their keys wait",
                    path,
                    type(exc).__name__,
                )
                return []
            for seq, _ in page:
                found.pop(seq, None)
                self._taken(path, seq)
        with self._marks:  # counted when the queue was, and taken after all
            self.deferred_taken += len(page)
            if path in self.short:
                self.short[path] -= len(page)
        return [encoded for _, encoded in page]

    def _taken(self, path: str, seq: int) -> bool:
        """Whether the run took ``seq`` of ``path`` before (and remembers it now)."""
        with self._marks:
            return not self._numbers.setdefault(path, Taken()).add(seq)

    def gone(self) -> dict[str, int]:
        """Per queue that handed out fewer messages than it had when the run found it,
        beyond those the gap check found there (locked by another receiver, or
        deferred), how many: the gap check peeked every hole and the queue's tail and
        found nothing of them, so they were gone when the run looked (completed by
        another receiver, or expired). Nothing waits for them."""
        out = {}
        for path, missing in sorted(self.short.items()):
            missing -= len(self.gaps.unseen.get(path, {}))
            if missing > 0:
                out[path] = missing
        return out

    def deferred(self) -> dict[str, int]:
        """Per queue, how many of the messages the gap check found the service says are
        deferred (a consumer deferred them: only a receive by sequence number takes
        them)."""
        out = {}
        for path, found in sorted(self.gaps.unseen.items()):
            if n := sum(1 for m in found.values() if deferred(m)):
                out[path] = n
        return out

    def settle(
        self,
        actions: Iterable[tuple[str, int, str, str | None, str]],
        run_id: str,
        failpoint: FailPoint | None = None,
    ) -> list[dict[str, Any]]:
        """Settles each message of ``actions`` ((queue, sequence number, action, reason,
        verdict), as :func:`~syphon.job.settle.actions.settle_actions` says) by the lock
        the read keeps, the queues side by side; answers a settle row per message (its
        ``received`` 0: the read counted it). What the wave leaves stays locked, so no
        later wave receives it again; the run gives it back when it ends.
        ``failpoint``: the crash tests' ``mid_settle``, counting the messages settled."""
        todo: dict[str, dict[int, Action]] = {}
        for queue, seq, action, reason, verdict in actions:
            todo.setdefault(queue, {})[int(seq)] = (action, reason, verdict)
        if not todo:
            return []
        counter = SettledCount(failpoint)
        settles = [
            QueueSettle(self.queues[q], run_id, rows, counter) for q, rows in sorted(todo.items())
        ]
        with ThreadPoolExecutor(max_workers=min(_OPEN_THREADS, len(settles))) as pool:
            list(pool.map(_settle_all, settles))
        return [row for s in settles for row in s.out.values()]


def _settle_all(settle: QueueSettle) -> None:
    """One queue's settlements; a fault stops the queue, and the rest of it is left."""
    try:
        settle.settle(sorted(settle.todo))
    except Exception as exc:  # the namespace failed: the rest waits
        log.warning("settling %s stopped: %s", settle.locks.queue, type(exc).__name__)
        settle.stop(stopped_by(exc))
        return
    settle.stop(None)


class Taken:
    """Sequence numbers, kept as sorted ranges: a queue hands out its messages mostly in
    order, so the numbers a run took are a few ranges, however many messages."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []  # each range's last number

    def __contains__(self, seq: int) -> bool:
        i = bisect.bisect_right(self._starts, seq) - 1
        return i >= 0 and seq <= self._ends[i]

    def __len__(self) -> int:
        return sum(e - s + 1 for s, e in zip(self._starts, self._ends, strict=True))

    def add(self, seq: int) -> bool:
        """Adds ``seq``; False when it was there already."""
        if seq in self:
            return False
        i = bisect.bisect_right(self._starts, seq)  # the range after seq
        joins_before = i > 0 and self._ends[i - 1] == seq - 1
        joins_after = i < len(self._starts) and self._starts[i] == seq + 1
        if joins_before and joins_after:
            self._ends[i - 1] = self._ends[i]
            del self._starts[i], self._ends[i]
        elif joins_before:
            self._ends[i - 1] = seq
        elif joins_after:
            self._starts[i] = seq
        else:
            self._starts.insert(i, seq)
            self._ends.insert(i, seq)
        return True

    @property
    def ranges(self) -> int:
        """How many ranges hold the numbers."""
        return len(self._starts)
