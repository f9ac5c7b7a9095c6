"""Snapshot: peek every backlog queue into a DataFrame, through a Spark data source.

``spark.read.format("syphon-backlog")`` is registered by :func:`register_backlog_source`
with the secondary namespace's access (its secret read once, on the driver), kept inside
the registered class. It reaches the executors in the pickled task, never in the
read's options, so it shows in no query plan, log or Spark UI. Each input partition
peeks one backlog queue (or one range of its sequence numbers) with
:func:`syphon.servicebus.peek.peek_rows`: nothing is locked or removed.

Options:

- ``queues`` (required): a JSON list whose items are a queue path, or an object
  ``{"queue": path, "from": first_seq, "until": last_seq}`` (``until`` may be null) to
  split a large queue into several partitions.
- ``page``: messages per peek (default 250).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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
        def __init__(self, queue_range: QueueRange) -> None:
            super().__init__(queue_range)
            self.queue_range = queue_range

    class _Reader(DataSourceReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.ranges = parse_queues_option(options.get("queues"))
            self.page = int(options.get("page", PEEK_PAGE))
            self.__access = access

        def partitions(self) -> list[Any]:
            return [_Partition(r) for r in self.ranges]

        def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
            r: QueueRange = partition.queue_range
            with (
                self.__access.client() as client,
                peek_receiver(client, r.queue) as receiver,
            ):
                for row in peek_rows(receiver, r.queue, r.first, r.last, self.page):
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
    return spark.read.format(name).option("queues", option).load().localCheckpoint(eager=True)
