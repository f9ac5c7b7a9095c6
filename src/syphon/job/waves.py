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

A run whose source has such a queue drains it in one wave (:func:`one_wave`). A
partitioned queue is recognised by a message in a partition other than the first (a
peek from the second partition's first sequence number); one whose messages are all in
the first partition reads in order, and what arrives in the other partitions during the
run was enqueued after the run started, which no wave of the run takes.

A wave never takes a message enqueued after the run started (its watermark is at most
the run's start): a queue that keeps filling does not keep a run going; the next run
takes those messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from syphon.core.ledger import Timings
from syphon.core.naming import PARTITIONED_SEQUENCE, is_dead_letter_path
from syphon.job.request import StageResult, timed
from syphon.job.rows import utc
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.peek import first_sequence_number

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
        last: whether no wave follows (every queue read to its end, or the cut reached
            the run's start).
    """

    rows: DataFrame
    read: DataFrame
    reads: list[QueueRead]
    watermark: datetime | None
    limit: int
    last: bool

    def cursors(self, before: Mapping[str, int]) -> dict[str, int]:
        """The queues' cursors for the next wave (``before``: this wave's)."""
        return next_cursors(self.read, self.watermark, before, self.reads)


def read_wave(
    spark: SparkSession,
    access: Access,
    paths: list[str],
    cursors: Mapping[str, int],
    limit: int,
    before: datetime | None = None,
) -> WaveRead:
    """Reads the next wave of ``paths`` (each from its cursor; 1: its head), at most
    ``limit`` messages per queue and their fronts; twice the limit, again, while the
    cut would take nothing although a queue was not read to its end. The cut is at most
    ``before`` (the run's start; None: no bound).

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
        last = mark is None or (before is not None and mark >= before)
        cut = before if last else mark
        rows = read.where(in_wave(cut))
        if last or not rows.isEmpty():
            return WaveRead(rows, read, reads, cut, limit, last)
        limit *= 2


def one_wave(
    wave_messages: int, source_kind: str, queues: list[DiscoveredQueue], access: Access
) -> str | None:
    """Why a run drains ``queues`` in one wave, or None when it drains them in waves of
    at most ``wave_messages`` messages. One peek per queue when every other answer is
    no (whether a queue holds a partition's messages)."""
    if wave_messages <= 0:
        return "run.wave_messages is 0"
    if source_kind == "namespace":
        # a live entity counts every receive against its MaxDeliveryCount, and a
        # wave's settle receives again what an earlier wave left at the queue's head
        return "a namespace source's entities count each receive as a delivery"
    paths = [q.path for q in queues]
    if not time_ordered(paths):
        return "a dead-letter queue is not ordered by enqueue time"
    counts = [q.message_count for q in queues]
    if None not in counts and sum(c or 0 for c in counts) <= wave_messages:
        return "the source holds no more than one wave"
    for path in paths:
        if first_sequence_number(access, path, PARTITIONED_SEQUENCE) is not None:
            return f"{path} is partitioned: its sequence numbers are per partition"
    return None


@dataclass(kw_only=True)
class Wave(StageResult):
    """One wave's snapshot, as the plan takes it.

    Attributes:
        number: 1, 2, ... (a run of one wave: 1).
        snapshot: its messages (checkpointed, or lazy over a checkpoint).
        watermark: its cut (None: every queue to its end; always None in one wave).
        last: whether no wave follows.
        queues: how many queues it read.
    """

    number: int
    snapshot: DataFrame
    watermark: datetime | None
    last: bool
    queues: int


def read_waves(
    spark: SparkSession,
    access: Access,
    queues: list[DiscoveredQueue],
    wave_messages: int | None,
    split_messages: int,
    before: datetime,
) -> Iterator[Wave]:
    """The waves of ``queues`` (their readable, non-empty ones), each read when the one
    before it is done with (the cursors move by what it took): one wave of everything
    when ``wave_messages`` is None, else waves of at most about ``wave_messages``
    messages (a limit per queue of ``wave_messages`` over the queues, rounded up),
    none of them past ``before``."""
    from syphon.job.snapshot import read_snapshot

    readable = [q for q in queues if not q.empty and q.unreadable is None]
    if wave_messages is None:
        timings = Timings()
        with timed(timings, "snapshot"):
            snapshot = read_snapshot(spark, access, readable, split_messages)
        yield Wave(number=1, snapshot=snapshot, watermark=None, last=True,
                   queues=len(readable), timings=timings)  # fmt: skip
        return
    paths = [q.path for q in readable]
    limit = max(1, -(-wave_messages // max(1, len(paths))))
    cursors: dict[str, int] = {}
    number = 0
    while True:
        number += 1
        timings = Timings()
        with timed(timings, "snapshot"):
            read = read_wave(spark, access, paths, cursors, limit, before)
        wave = Wave(number=number, snapshot=read.rows, watermark=read.watermark,
                    last=read.last, queues=len(paths), timings=timings)  # fmt: skip
        if number > 1 and read.last and read.rows.isEmpty():
            return  # nothing before the run's start was left
        yield wave
        if read.last:
            return
        cursors = read.cursors(cursors)
