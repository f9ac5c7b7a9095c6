"""Snapshot: peek every backlog queue into a DataFrame.

Each Spark task peeks some backlog queues, or ranges of a large queue's sequence
numbers, with :func:`syphon.servicebus.peek.peek_queue` (nothing is locked or removed),
several side by side (a thread and a receiver each), and hands the rows to Spark as Arrow
record batches. :func:`read_snapshot` sizes the tasks to the messages, at most the cores
(:func:`syphon.job.context.service_tasks`): a receiver's link costs the SDK about half a
second to open and close, mostly waiting, so ten small queues on two cores took five such
waits one after another as ten tasks, and one as two; and a task peeks all of its queues
side by side, so a small snapshot needs no second one. The
secondary namespace's access (its secret read once, on the driver) reaches the executors
in the pickled task, so it shows in no query plan, log or Spark UI.
"""

from __future__ import annotations

import queue as queues_
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syphon.core.config import MESSAGES_PER_TASK_DEFAULT
from syphon.core.render import arrow_schema, spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.job.context import keep, service_tasks
from syphon.job.where import map_in_arrow
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.peek import PEEK_PAGE, first_sequence_number, peek_queue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class QueueRange:
    """One input partition: a backlog queue, or a range of its sequence numbers, or at
    most ``limit`` of its messages from ``first`` on."""

    queue: str
    first: int = 1
    last: int | None = None
    limit: int | None = None


def split_ranges(queue: str, first: int, count: int, size: int) -> list[QueueRange]:
    """A queue's sequence numbers cut into ranges of ``size``, the last one open.

    ``first`` is the queue's lowest sequence number and ``count`` how many messages it
    holds. Sequence numbers have gaps (removed messages), so the ranges only balance the
    work; the open last range makes sure nothing is missed however large the gaps.
    """
    if size < 1:
        raise ValueError("size must be positive")
    parts = max(1, -(-count // size))
    ranges = [
        QueueRange(queue, first + i * size, first + (i + 1) * size - 1) for i in range(parts - 1)
    ]
    ranges.append(QueueRange(queue, first + (parts - 1) * size, None))
    return ranges


def deal(ranges: list[QueueRange], tasks: int) -> list[list[QueueRange]]:
    """``ranges`` dealt out round-robin among at most ``tasks`` groups (``tasks`` below 1:
    a group per range)."""
    if tasks < 1 or tasks >= len(ranges):
        return [[r] for r in ranges]
    return [ranges[i::tasks] for i in range(tasks)]


#: Ranges one task peeks side by side, and rows the threads may hold before the task
#: takes them (a bound on the task's memory, whatever the queues hold).
PEEK_THREADS = 16
_BUFFERED_ROWS = 2_000
_DONE = object()


def side_by_side(
    producers: list[Callable[[], Iterator[Any]]], threads: int = PEEK_THREADS
) -> Iterator[Any]:
    """The items of every producer, each producer run in a thread of its own (at most
    ``threads`` at once), in the order they come. An error in a producer is raised here;
    closing the iterator early stops the producers at their next item."""
    if len(producers) == 1:
        yield from producers[0]()
        return
    handoff: queues_.Queue[Any] = queues_.Queue(maxsize=_BUFFERED_ROWS)
    stop = threading.Event()

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.2)
                return
            except queues_.Full:
                continue

    def run(producer: Callable[[], Iterator[Any]]) -> None:
        if stop.is_set():  # queued behind the running ones, and the reader is gone
            return
        try:
            for item in producer():
                if stop.is_set():
                    return
                put((None, item))
        except BaseException as exc:
            put((exc, None))
        finally:
            put(_DONE)

    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(producers)))) as pool:
        for producer in producers:
            pool.submit(run, producer)
        left = len(producers)
        try:
            while left:
                got = handoff.get()
                if got is _DONE:
                    left -= 1
                    continue
                error, item = got
                if error is not None:
                    raise error
                yield item
        finally:
            stop.set()


#: Rows a snapshot task hands Spark at a time (an Arrow record batch).
ARROW_ROWS = 1_000


class _PeekTask:
    """What each snapshot task runs (``mapInArrow`` over the ids of ``groups``): peeks the
    ranges of the groups its ids name, side by side, into Arrow record batches.

    The access (with its secret, read once on the driver) is kept in the instance: it
    reaches the executors in the pickled task, never in a query plan, log or the Spark UI.
    """

    def __init__(
        self, access: Access, groups: list[list[QueueRange]], page: int, schema: Any
    ) -> None:
        self.__access = access
        self.groups = groups
        self.page = page
        self.schema = schema

    def __repr__(self) -> str:
        return f"_PeekTask(groups={len(self.groups)})"

    def _peek(self, r: QueueRange) -> Callable[[], Iterator[dict[str, Any]]]:
        def rows() -> Iterator[dict[str, Any]]:
            yield from peek_queue(self.__access, r.queue, r.first, r.last, self.page, r.limit)

        return rows

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for group in batch.column(0).to_pylist():
                peeks = side_by_side([self._peek(r) for r in self.groups[group]])
                yield from record_batches(peeks, self.schema)


def record_batches(rows: Iterable[dict[str, Any]], schema: Any) -> Iterator[Any]:
    """``rows`` as Arrow record batches of ``schema``, :data:`ARROW_ROWS` rows at most
    each, as they come (what a task hands Spark)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= ARROW_ROWS:
            yield pa.RecordBatch.from_pylist(batch, schema=schema)
            batch = []
    if batch:
        yield pa.RecordBatch.from_pylist(batch, schema=schema)


def peek_frame(
    spark: SparkSession,
    access: Access,
    ranges: list[QueueRange],
    tasks: int = 0,
    page: int = PEEK_PAGE,
    driver: bool = False,
) -> DataFrame:
    """The messages of ``ranges`` as a DataFrame of the snapshot schema (lazy: every
    action peeks again; with ``driver``, peeked at once by the driver, its groups one
    after another, and handed to Spark).

    ``ranges`` are dealt out among at most ``tasks`` Spark tasks (below 1: a task per
    range); each task peeks its ranges side by side, a thread and a receiver each. A
    ``mapInArrow`` over a range of group ids, not a Python data source: registering and
    planning a data source start two Python processes of their own on the driver (about
    1.5 s of a run), and the rows reach Spark as Arrow batches either way.
    """
    schema = spark_schema(SNAPSHOT)
    if not ranges:
        return spark.createDataFrame([], schema)
    groups = deal(ranges, 1 if driver else tasks)  # the driver: every range side by side
    task = _PeekTask(access, groups, page, arrow_schema(SNAPSHOT))
    ids = spark.range(len(groups), numPartitions=len(groups))
    return map_in_arrow(ids, task, schema, driver)


def snapshot_ranges(
    access: Access, queues: list[DiscoveredQueue], split_messages: int
) -> list[QueueRange]:
    """The snapshot's input partitions: one per queue, several for a queue known to hold
    more than ``split_messages`` (its first sequence number costs one peek)."""
    ranges: list[QueueRange] = []
    for q in queues:
        first = None
        if (q.message_count or 0) > split_messages:
            first = first_sequence_number(access, q.path)
        if first is None:
            ranges.append(QueueRange(q.path))
        else:
            ranges.extend(split_ranges(q.path, first, q.message_count or 0, split_messages))
    return ranges


def read_snapshot(
    spark: SparkSession,
    access: Access,
    queues: list[DiscoveredQueue],
    split_messages: int,
    per_task: int = MESSAGES_PER_TASK_DEFAULT,
    driver: bool = False,
) -> DataFrame:
    """Peeks ``queues`` into a DataFrame, read exactly once, in a task per ``per_task``
    messages the queues hold (the cores when a count is unknown), or in the driver.

    The rows are kept by Spark (``localCheckpoint``) so that every later use sees the
    same snapshot: a second read of the source would peek again and could see messages
    that arrived since.
    """
    ranges = snapshot_ranges(access, queues, split_messages) if queues else []
    counts = [q.message_count for q in queues]
    messages = None if None in counts else sum(c or 0 for c in counts)
    tasks = service_tasks(spark, messages, per_task)
    return keep(peek_frame(spark, access, ranges, tasks, driver=driver))
