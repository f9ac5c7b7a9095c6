"""A read's handoff to Spark: received (or peeked) messages, as the service sent them,
turned into a DataFrame of the snapshot schema by Spark's tasks, not by the driver."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from syphon.core.peeked import snapshot_row
from syphon.core.render import arrow_schema, spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.job.read.snapshot import record_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: Messages per Arrow batch of a read's handoff to Spark.
_HANDOFF_ROWS = 4_096


def snapshot_frame(
    spark: SparkSession,
    pages: Iterable[tuple[str, list[bytes]]],
    give_back: Callable[[], None] | None = None,
) -> DataFrame:
    """(queue, encoded messages) ``pages`` as a DataFrame of the snapshot schema. The
    driver hands Spark the queue and the bytes of each message as Arrow, and Spark's tasks
    read the rest from the bytes (:func:`syphon.core.peeked.snapshot_row`), side by
    side, as a peek's tasks do: the driver does not parse a message. ``give_back`` (the
    session's, :meth:`syphon.job.context.SparkHandle.give_back`) is called once Spark
    holds the bytes: the read's threads freed them in arenas of their own."""
    import pyarrow as pa  # type: ignore[import-untyped]

    received = pa.schema([("backlog_queue", pa.string()), ("encoded", pa.binary())])
    batches = []
    queues: list[str] = []
    encoded: list[bytes] = []
    # a batch at a time: the received bytes are in the driver's memory once, as Arrow,
    # not also as a list of Python objects the size of the wave
    for queue, page in pages:
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
    parse = _Parse(arrow_schema(SNAPSHOT))
    frame = spark.createDataFrame(table)
    del table
    if give_back is not None:
        give_back()  # the read's bytes, now Spark's
    return frame.mapInArrow(parse, schema)


class _Parse:
    """What Spark's tasks run over the received messages (``mapInArrow``): a snapshot
    row of each, from its bytes."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            pairs = zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True)
            yield from record_batches((snapshot_row(m, q) for q, m in pairs), self.schema)
