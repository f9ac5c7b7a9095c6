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
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any

from syphon.core.errors import SyphonError
from syphon.core.naming import PARTITIONED_SEQUENCE
from syphon.core.peeked import snapshot_row
from syphon.core.schema import SNAPSHOT, spark_schema
from syphon.job.snapshot import QueueRange, record_batches, side_by_side
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
#: Messages per Arrow batch of a read's handoff to Spark.
_HANDOFF_ROWS = 4_096


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
    ) -> None:
        """``counts``: how many messages each queue held when the run found it (None or
        missing: unknown); a queue's reads stop once they took that many, instead of
        waiting on an empty receive (what arrived since is the next run's)."""
        self.__access = access
        self.paths = list(paths)
        self.counts = dict(counts or {})
        self.wait_seconds = wait_seconds
        self._took: dict[str, int] = {}
        self.queues: dict[str, LockedQueue] = {}
        #: (queue, sequence number) of the messages whose lock lapsed while held
        self.lost: set[tuple[str, int]] = set()
        #: messages received again after their lock lapsed (held, not taken again)
        self.again = 0
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
        held = sum(len(q.held) for q in self.queues.values())
        for queue in self.queues.values():
            queue.__exit__(None, None, None)
        if held:
            log.info("gave back %d messages held, for the next run", held)
        if self.again:
            log.warning(
                "%d messages came back after their lock lapsed, and were left for the "
                "next run, which finds their outcomes in the audit",
                self.again,
            )

    @property
    def received(self) -> int:
        """How many messages the run received (each a credit)."""
        return sum(q.received for q in self.queues.values())

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
        receive's page at a time.

        A message whose lock lapsed while the run held it is the queue's again, and a
        receive hands it out again, ahead of the rest. An earlier wave of the run took
        it, and its outcome is in the audit (or its wave's settle recorded it left): it
        is held again, given back when the run ends, and no wave takes it twice (a run
        would otherwise plan it again and again while its locks keep lapsing). A queue
        hands out its messages in sequence order, so one the run took has a sequence
        number at most the highest it received there; a partitioned queue (read in one
        wave) numbers each partition apart, and its own are remembered one by one."""
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
        waits = iter(_SHORT_PAGE_WAITS if count is not None else ())
        wait = self.wait_seconds
        try:
            while got < want:
                asked = want - got
                page = queue.receive_numbered(asked, wait)
                fresh = []
                for seq, encoded in page:
                    if not self._taken(path, seq):
                        fresh.append(encoded)
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
                        if count is not None:
                            with self._marks:
                                self.short[path] = count - self._took.get(path, 0) - got
                        return
        finally:
            with self._marks:
                self.again += len(again)
                self._took[path] = self._took.get(path, 0) + got

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
        checkpoints it; a second read would receive more). The driver hands Spark the
        queue and the bytes of each message as Arrow, and Spark's tasks read the rest
        from the bytes (:func:`syphon.core.peeked.snapshot_row`), side by side, as a
        peek's tasks do: the driver does not parse a message."""
        import pyarrow as pa  # type: ignore[import-untyped]
        from pyspark.sql.pandas.types import to_arrow_schema

        received = pa.schema([("backlog_queue", pa.string()), ("encoded", pa.binary())])
        batches = []
        queues: list[str] = []
        encoded: list[bytes] = []
        # a batch at a time: the received bytes are in the driver's memory once, as Arrow,
        # not also as a list of Python objects the size of the wave
        for queue, page in self.pages(ranges):
            queues += [queue] * len(page)
            encoded += page
            if len(encoded) >= _HANDOFF_ROWS:
                batches.append(pa.record_batch([queues, encoded], schema=received))
                queues, encoded = [], []
        if encoded:
            batches.append(pa.record_batch([queues, encoded], schema=received))
        table = pa.Table.from_batches(batches, schema=received)
        del queues, encoded, batches
        schema = spark_schema(SNAPSHOT)
        parse = _Parse(to_arrow_schema(schema, timezone="UTC"))
        frame = spark.createDataFrame(table)
        del table
        _trim_freed_memory()
        return frame.mapInArrow(parse, schema)

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
                continue
            if lost:
                log.warning("%d locks of %s lapsed while held", len(lost), path)
                self.lost.update((path, seq) for seq in lost)


def _trim_freed_memory() -> None:
    """Has the C allocator hand the freed pages of a read back to the system: the read's
    threads allocate in arenas of their own, which keep what was freed (a wave's bytes)
    for the next wave otherwise. Nothing where the C library is not glibc (the process's
    own symbols: no library is looked up)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


class _Parse:
    """What Spark's tasks run over the received messages (``mapInArrow``): a snapshot
    row of each, from its bytes."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            pairs = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
            yield from record_batches((snapshot_row(m, q) for q, m in pairs), self.schema)
