"""The backlog as a Spark data source: ``spark.read.format("syphon-backlog")``.

Registered by the job (or from a notebook) with :func:`register_backlog_source`, which
reads the secondary namespace's connection string on the driver and keeps it inside
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syphon.core.config import NamespaceConfig
from syphon.core.errors import ConfigError
from syphon.servicebus.access import resolve_access
from syphon.servicebus.peek import PEEK_PAGE, SNAPSHOT_COLUMNS, peek_rows, snapshot_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def register_backlog_source(
    spark: SparkSession,
    secondary: NamespaceConfig,
    dbutils_get: Callable[[str, str], str] | None = None,
) -> str:
    """Registers the data source for ``secondary``'s backlog queues; returns its name."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    access = resolve_access(secondary, dbutils_get)

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
                client.get_queue_receiver(r.queue) as receiver,
            ):
                for row in peek_rows(receiver, r.queue, r.first, r.last, self.page):
                    yield tuple(row[c] for c in SNAPSHOT_COLUMNS)

    class BacklogDataSource(DataSource):
        """Peeks backlog queues into rows of the snapshot schema."""

        @classmethod
        def name(cls) -> str:
            return SOURCE_NAME

        def schema(self) -> Any:
            return snapshot_schema()

        def reader(self, schema: Any) -> Any:
            return _Reader(dict(self.options))

    spark.dataSource.register(BacklogDataSource)
    return SOURCE_NAME
