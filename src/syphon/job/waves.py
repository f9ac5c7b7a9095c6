"""Waves: a source drained a bounded time cut at a time.

A wave takes, from every queue of the source, the messages enqueued before its
*watermark*, and nothing else. Within a queue the service gives each message a larger
sequence number and a later (or equal) enqueue time than the one before, so a time cut
is a prefix of every queue: each queue is read from its *cursor* (the first message no
earlier wave took) for at most ``limit`` messages **and one more**, the queue's *front*.
Every message of a queue that was not read was enqueued at or after its front, so

    watermark = the earliest front among the queues not read to their end

and the wave is every message read with an enqueue time before the watermark (every
message read, when each queue was read to its end). Nothing a later wave takes was
enqueued before the watermark, and nothing this wave takes after it: a key whose
messages are spread over several queues keeps its order (by enqueue time) across waves.

A queue's cursor moves to its first message the wave did not take. The messages read
beyond the watermark are read again by the next wave (a peek costs a credit each):
at most ``limit`` per queue and wave, few when the queues fill at similar rates.

A wave always takes something when some queue holds a message before the watermark;
when none does (every message read shares the watermark's millisecond: a burst larger
than ``limit`` in one queue), the wave reads again with twice the limit.

Sources whose queues are not ordered by enqueue time cannot be cut by time:

- a dead-letter queue keeps each message's original enqueue time, not the time it was
  dead-lettered;
- a partitioned queue numbers each partition's messages on its own (the partition in
  the top bits of the sequence number), so reading by sequence number walks one
  partition after another.

A run whose source has such a queue drains it in one wave (:func:`time_ordered`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from syphon.core.naming import PARTITIONED_SEQUENCE, is_dead_letter_path
from syphon.job.rows import utc
from syphon.servicebus.access import Access

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class QueueRead:
    """What a wave read of one queue.

    Attributes:
        queue: its path.
        read: how many messages were read (at most the limit and one more).
        last_sequence: the sequence number of the last one read (None: none).
        last_enqueued: its enqueue time (None: none read, or unknown).
        limit: the limit it was read with.
    """

    queue: str
    read: int
    last_sequence: int | None
    last_enqueued: datetime | None
    limit: int

    @property
    def ended(self) -> bool:
        """Whether the queue was read to its end (its front is not known)."""
        return self.read <= self.limit


def watermark(reads: Iterable[QueueRead]) -> datetime | None:
    """The earliest front (the last message read) among the queues not read to their
    end; None when every queue was (the wave takes everything read).

    Raises:
        ValueError: a queue's front has no enqueue time (the service always sets one).
    """
    fronts = []
    for r in reads:
        if r.ended:
            continue
        if r.last_enqueued is None:
            raise ValueError(f"the front of {r.queue} has no enqueue time")
        fronts.append(r.last_enqueued)
    return min(fronts) if fronts else None


def time_ordered(paths: Iterable[str], sequence_numbers: Iterable[int] = ()) -> bool:
    """Whether queues can be cut by time: none is a dead-letter queue and no sequence
    number read from them carries a partition."""
    if any(is_dead_letter_path(p) for p in paths):
        return False
    return all(n < PARTITIONED_SEQUENCE for n in sequence_numbers)


def in_wave(cut: datetime | None) -> Column:
    """The condition of a message (a snapshot row) of the wave whose watermark is
    ``cut`` (None: every message read)."""
    from pyspark.sql import functions as F

    if cut is None:
        return F.lit(True)
    return F.col("enqueued_time") < F.lit(cut)


def queue_reads(read: DataFrame, limit: int, paths: Iterable[str]) -> list[QueueRead]:
    """Per queue of ``paths``, what ``read`` (snapshot rows, each queue read for at most
    ``limit`` messages and one more) holds of it. One Spark job."""
    from pyspark.sql import functions as F

    last = F.max_by(F.struct("sequence_number", "enqueued_time"), F.col("sequence_number"))
    rows = {
        r["backlog_queue"]: r
        for r in read.groupBy("backlog_queue")
        .agg(F.count(F.lit(1)).alias("read"), last.alias("last"))
        .collect()
    }
    out = []
    for path in paths:
        r = rows.get(path)
        if r is None:
            out.append(QueueRead(path, 0, None, None, limit))
            continue
        seq, enqueued = r["last"]["sequence_number"], r["last"]["enqueued_time"]
        enqueued = utc(enqueued) if enqueued is not None else None
        out.append(QueueRead(path, int(r["read"]), seq, enqueued, limit))
    return out


def next_cursors(
    read: DataFrame, cut: datetime | None, cursors: Mapping[str, int], reads: list[QueueRead]
) -> dict[str, int]:
    """Each queue's cursor after the wave cut at ``cut``: the sequence number of its
    first message the wave did not take (one past the last read when it took them all).
    One Spark job."""
    from pyspark.sql import functions as F

    left = {
        r["backlog_queue"]: int(r["first"])
        for r in read.where(~in_wave(cut))
        .groupBy("backlog_queue")
        .agg(F.min("sequence_number").alias("first"))
        .collect()
    }
    out = {}
    for r in reads:
        if r.queue in left:
            out[r.queue] = left[r.queue]
        elif r.last_sequence is not None:
            out[r.queue] = r.last_sequence + 1
        else:
            out[r.queue] = cursors.get(r.queue, 1)
    return out


@dataclass
class WaveRead:
    """A wave's messages and how they were cut.

    Attributes:
        rows: the wave's snapshot rows (lazy over ``read``, which is checkpointed).
        read: every message read, the wave's and those beyond its watermark.
        reads: what was read of each queue.
        watermark: the cut (None: every queue was read to its end).
        limit: the limit per queue the cut was made with.
    """

    rows: DataFrame
    read: DataFrame
    reads: list[QueueRead]
    watermark: datetime | None
    limit: int

    @property
    def last(self) -> bool:
        """Whether the wave reached the end of every queue (no wave follows)."""
        return self.watermark is None

    def cursors(self, before: Mapping[str, int]) -> dict[str, int]:
        """The queues' cursors for the next wave (``before``: this wave's)."""
        return next_cursors(self.read, self.watermark, before, self.reads)


def read_wave(
    spark: SparkSession, access: Access, paths: list[str], cursors: Mapping[str, int], limit: int
) -> WaveRead:
    """Reads the next wave of ``paths`` (each from its cursor; 1: its head), at most
    ``limit`` messages per queue and their fronts; twice the limit, again, while the
    cut would take nothing although a queue was not read to its end.

    Raises:
        ValueError: ``limit`` below 1.
    """
    from syphon.job.snapshot import QueueRange, peek_frame

    if limit < 1:
        raise ValueError("a wave's limit is at least one message per queue")
    tasks = max(1, spark.sparkContext.defaultParallelism)
    while True:
        ranges = [QueueRange(p, cursors.get(p, 1), None, limit + 1) for p in paths]
        read = peek_frame(spark, access, ranges, tasks).localCheckpoint(eager=True)
        reads = queue_reads(read, limit, paths)
        mark = watermark(reads)
        rows = read.where(in_wave(mark))
        if mark is None or not rows.isEmpty():
            return WaveRead(rows, read, reads, mark, limit)
        limit *= 2
