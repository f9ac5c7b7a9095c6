"""Snapshot: peek every backlog queue into a DataFrame, through a Spark data source.

``spark.read.format("syphon-backlog")`` is registered by :func:`register_backlog_source`
with the secondary namespace's access (its secret read once, on the driver), kept inside
the registered class. It reaches the executors in the pickled task, never in the
read's options, so it shows in no query plan, log or Spark UI. An input partition
peeks one backlog queue (or one range of its sequence numbers) with
:func:`syphon.servicebus.peek.peek_rows` — nothing is locked or removed — or, with the
``tasks`` option, several of them side by side (a thread and a receiver each).

Options:

- ``queues`` (required): a JSON list whose items are a queue path, or an object
  ``{"queue": path, "from": first_seq, "until": last_seq}`` (``until`` may be null) to
  split a large queue into several partitions.
- ``page``: messages per peek (default 250).
- ``tasks``: at most this many input partitions; the ranges are dealt out among them
  and each partition peeks its ranges side by side (default: one partition per range).
  :func:`read_snapshot` sizes it to the cores: a receiver's link costs the SDK about
  half a second to open and close, mostly waiting, so ten small queues on two cores
  took five such waits one after another as ten tasks, and one as two.
"""

from __future__ import annotations

import json
import queue as queues_
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syphon.core.errors import ConfigError
from syphon.core.schema import SNAPSHOT, names, spark_schema
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.peek import PEEK_PAGE, first_sequence_number, peek_receiver, peek_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_NAME = "syphon-backlog"


@dataclass(frozen=True)
class QueueRange:
    """One input partition: a backlog queue, or a range of its sequence numbers."""

    queue: str
    first: int = 1
    last: int | None = None


def split_ranges(queue: str, first: int, count: int, size: int) -> list[QueueRange]:
    """A queue's sequence numbers cut into ranges of ``size``, the last one open.

    ``first`` is the queue's lowest sequence number and ``count`` how many messages it
    holds. Sequence numbers have gaps (removed messages), so the ranges only balance the
    work; the open last range makes sure nothing is missed however large the gaps.
    """
    if size < 1:
        raise ValueError("size must be positive")
    parts = max(1, -(-count // size))
    ranges = [QueueRange(queue, first + i * size, first + (i + 1) * size - 1) for i in
              range(parts - 1)]  # fmt: skip
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


def side_by_side(producers: list[Callable[[], Iterator[Any]]],
                 threads: int = PEEK_THREADS) -> Iterator[Any]:  # fmt: skip
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


def queues_option(ranges: list[QueueRange]) -> str:
    """The ``queues`` option for ranges (whole queues as plain paths)."""
    items: list[Any] = [
        r.queue if (r.first, r.last) == (1, None)
        else {"queue": r.queue, "from": r.first, "until": r.last}
        for r in ranges
    ]  # fmt: skip
    return json.dumps(items)


def parse_queues_option(text: str | None) -> list[QueueRange]:
    """The ``queues`` option as ranges.

    Raises:
        ConfigError: missing, not JSON, or items of the wrong shape.
    """
    if not text:
        raise ConfigError(f"{SOURCE_NAME}: the 'queues' option is required (a JSON list)")
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{SOURCE_NAME}: 'queues' is not JSON: {exc}") from None
    if not isinstance(items, list):
        raise ConfigError(f"{SOURCE_NAME}: 'queues' must be a JSON list")
    out = []
    for item in items:
        if isinstance(item, str) and item:
            out.append(QueueRange(item))
        elif isinstance(item, dict) and isinstance(item.get("queue"), str):
            first, last = item.get("from", 1), item.get("until")
            if not isinstance(first, int) or (last is not None and not isinstance(last, int)):
                raise ConfigError(f"{SOURCE_NAME}: 'from'/'until' must be integers: {item}")
            out.append(QueueRange(item["queue"], first, last))
        else:
            raise ConfigError(f"{SOURCE_NAME}: not a queue or a range: {item!r}")
    return out


def register_backlog_source(spark: SparkSession, access: Access) -> str:
    """Registers the data source for the backlog queues ``access`` reaches; returns its
    name."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    columns = names(SNAPSHOT)

    class _Partition(InputPartition):
        def __init__(self, ranges: list[QueueRange]) -> None:
            super().__init__(ranges)
            self.ranges = ranges

    class _Reader(DataSourceReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.ranges = parse_queues_option(options.get("queues"))
            self.page = int(options.get("page", PEEK_PAGE))
            self.tasks = int(options.get("tasks", 0))
            self.__access = access

        def partitions(self) -> list[Any]:
            return [_Partition(group) for group in deal(self.ranges, self.tasks)]

        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
            def peek(r: QueueRange) -> Callable[[], Iterator[dict[str, Any]]]:
                def rows() -> Iterator[dict[str, Any]]:
                    with (
                        self.__access.client() as client,
                        peek_receiver(client, r.queue) as receiver,
                    ):
                        yield from peek_rows(receiver, r.queue, r.first, r.last, self.page)

                return rows

            for row in side_by_side([peek(r) for r in partition.ranges]):
                yield tuple(row[c] for c in columns)

    class BacklogDataSource(DataSource):
        """Peeks backlog queues into rows of the snapshot schema."""

        @classmethod
        def name(cls) -> str:
            return SOURCE_NAME

        def schema(self) -> Any:
            return spark_schema(SNAPSHOT)

        def reader(self, schema: Any) -> Any:
            return _Reader(dict(self.options))

    spark.dataSource.register(BacklogDataSource)
    return SOURCE_NAME


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
    spark: SparkSession, access: Access, queues: list[DiscoveredQueue], split_messages: int
) -> DataFrame:
    """Peeks ``queues`` into a DataFrame, read exactly once.

    The rows are kept by Spark (``localCheckpoint``) so that every later use sees the
    same snapshot: a second read of the source would peek again and could see messages
    that arrived since.
    """
    if not queues:
        return spark.createDataFrame([], spark_schema(SNAPSHOT))
    name = register_backlog_source(spark, access)
    option = queues_option(snapshot_ranges(access, queues, split_messages))
    tasks = max(1, spark.sparkContext.defaultParallelism)
    read = spark.read.format(name).option("queues", option).option("tasks", str(tasks))
    return read.load().localCheckpoint(eager=True)
