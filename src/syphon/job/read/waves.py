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

A queue's cursor moves to its first message the wave did not take. What was read beyond
the watermark the next wave takes as read (:class:`Carried`), peeking each queue on after
the last message read for what its limit still allows: a peek costs a credit a message,
and each message of a run in waves is peeked once.

The first wave is small and the waves grow (:func:`syphon.job.read.wave_sizes.wave_limits`):
a wave is cut by time whatever its size, so a key keeps its order across waves of any
sizes, and the largest wave bounds the run's memory.

A wave always takes something when some queue holds a message before the watermark;
when none does (every message read shares the watermark's millisecond: a burst larger
than ``limit`` in one queue), the wave reads again with twice the limit.

Sources whose queues are not ordered by enqueue time cannot be cut by time:

- a dead-letter queue keeps each message's original enqueue time, not the time it was
  dead-lettered;
- a partitioned queue numbers each partition's messages on its own (the partition in
  the top bits of the sequence number), so reading by sequence number walks one
  partition after another.

A run whose source has such a queue drains it in one wave
(:func:`syphon.job.read.wave_sizes.one_wave`). A
partitioned queue is recognised by a message in a partition other than the first (a
peek from the second partition's first sequence number); one whose messages are all in
the first partition reads in order, and what arrives in the other partitions during the
run was enqueued after the run started, which no wave of the run takes.

A wave never takes a message enqueued after the run started (its watermark is at most
the run's start): a queue that keeps filling does not keep a run going; the next run
takes those messages.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from syphon.job.context import keep
from syphon.job.read.modes import Reading
from syphon.job.request import SnapshotRead
from syphon.job.rows import utc

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


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


def in_wave(cut: datetime | None) -> Column:
    """The condition of a message (a snapshot row) of the wave whose watermark is
    ``cut`` (None: every message read)."""
    from pyspark.sql import functions as F

    if cut is None:
        return F.lit(True)
    return F.col("enqueued_time") < F.lit(cut)


#: A message read: (queue, sequence number, enqueue time).
Mark = tuple[str, int, datetime]


@dataclass(frozen=True)
class Cut:
    """How a wave cuts what it read.

    Attributes:
        reads: what was read of each queue.
        watermark: the cut (None: every message read is taken).
        last: whether no wave follows (every queue read to its end, or the cut reached
            ``before``).
        taken: how many messages read are before the cut.
        cursors: each queue's cursor for the next wave: its first message not taken (one
            past the last read when all were taken; unchanged when none was read).
    """

    reads: list[QueueRead]
    watermark: datetime | None
    last: bool
    taken: int
    cursors: dict[str, int]


def cut_reads(
    marks: Iterable[Mark],
    paths: Iterable[str],
    cursors: Mapping[str, int],
    limit: int,
    before: datetime | None = None,
) -> Cut:
    """The cut of a wave that read ``marks`` from ``paths`` (each from its cursor, at most
    ``limit`` messages and one more); the cut is at most ``before``."""
    by_queue: dict[str, list[tuple[int, datetime]]] = {}
    for queue, seq, enqueued in marks:
        by_queue.setdefault(queue, []).append((int(seq), enqueued))
    reads = []
    for path in paths:
        got = sorted(by_queue.get(path, []))
        front = got[-1] if got else (None, None)
        reads.append(QueueRead(path, len(got), front[0], front[1], limit))
    mark = watermark(reads)
    last = mark is None or (before is not None and mark >= before)
    cut = before if last else mark
    taken = 0
    out = {}
    for r in reads:
        got = sorted(by_queue.get(r.queue, []))
        left = [seq for seq, enqueued in got if cut is not None and enqueued >= cut]
        taken += len(got) - len(left)
        if left:
            out[r.queue] = left[0]
        elif r.last_sequence is not None:
            out[r.queue] = r.last_sequence + 1
        else:
            out[r.queue] = cursors.get(r.queue, 1)
    return Cut(reads, cut, last, taken, out)


@dataclass(frozen=True)
class Carried:
    """What a wave read beyond its watermark (``rows``, lazy over its checkpointed read;
    their ``marks``), which the next wave takes as read, peeking each queue on from its
    ``next_sequence`` (the one after the last read)."""

    rows: DataFrame
    marks: list[Mark]
    next_sequence: dict[str, int]


@dataclass
class WaveRead:
    """A wave's messages and how they were cut.

    Attributes:
        rows: the wave's snapshot rows (lazy over ``read``, which is checkpointed).
        read: every message read, the wave's and those beyond its watermark.
        cut: how they were cut (the watermark, the next cursors, ...).
        limit: the limit per queue the cut was made with.
        handed_out: how many messages the wave's reads handed out (peeked or received,
            each a credit), every read of it counted (a read again with twice the limit
            included).
    """

    rows: DataFrame
    read: DataFrame
    cut: Cut
    limit: int
    handed_out: int = 0
    next_sequence: dict[str, int] | None = None

    @property
    def watermark(self) -> datetime | None:
        return self.cut.watermark

    def carried(self, marks: list[Mark]) -> Carried | None:
        """What the next wave takes as read of ``marks`` (every message this wave read):
        those at or after the watermark (None: the wave took everything read)."""
        cut = self.cut.watermark
        if cut is None:
            return None
        beyond = [m for m in marks if m[2] >= cut]
        rows = self.read.where(~in_wave(cut))
        return Carried(rows, beyond, dict(self.next_sequence or {}))

    @property
    def last(self) -> bool:
        return self.cut.last

    @property
    def reads(self) -> list[QueueRead]:
        return self.cut.reads


def read_wave(
    reading: Reading,
    paths: list[str],
    cursors: Mapping[str, int],
    limit: int,
    before: datetime | None = None,
    carried: Carried | None = None,
) -> tuple[WaveRead, Carried | None]:
    """Reads the next wave of ``paths`` (each from its cursor; 1: its head), at most
    ``limit`` messages per queue and their fronts, ``carried`` (the previous wave's read
    beyond its watermark) counted as read; twice the limit, again, while the cut would
    take nothing although a queue was not read to its end. The cut is at most ``before``
    (the run's start; None: no bound). Two Spark jobs per read: the read, and the
    (queue, sequence number, enqueue time) of what it read, which the driver cuts.
    Returns the wave and what the next one takes as read (None: nothing).

    Raises:
        ValueError: ``limit`` below 1.
    """
    from syphon.job.read.snapshot import QueueRange

    if limit < 1:
        raise ValueError("a wave's limit is at least one message per queue")
    have: DataFrame | None = None if carried is None else carried.rows
    marks: list[Mark] = [] if carried is None else list(carried.marks)
    after = {p: cursors.get(p, 1) for p in paths}
    if carried is not None:
        after.update(carried.next_sequence)
    handed_out = 0
    while True:
        have_read = Counter(q for q, _, _ in marks)
        ranges = [
            QueueRange(p, after[p], None, limit + 1 - have_read[p])
            for p in paths
            if limit + 1 - have_read[p] > 0
        ]
        fresh = reading.frame(ranges, (limit + 1) * len(paths))
        # on disk: a run in waves holds two waves' frames at a time (see keep)
        read = keep(fresh if have is None else have.unionByName(fresh), on_disk=True)
        had = len(marks)
        marks = [
            (r[0], r[1], utc(r[2]))
            for r in read.select("backlog_queue", "sequence_number", "enqueued_time").collect()
        ]
        handed_out += len(marks) - had
        for queue, seq, _ in marks:
            after[queue] = max(after[queue], int(seq) + 1)
        cut = cut_reads(marks, paths, cursors, limit, before)
        if cut.last or cut.taken:
            wave = WaveRead(read.where(in_wave(cut.watermark)), read, cut, limit, handed_out, after)
            return wave, (None if cut.last else wave.carried(marks))
        have, limit = read, limit * 2


@dataclass(kw_only=True)
class Wave(SnapshotRead):
    """One wave's snapshot, as the plan takes it (its ``snapshot`` and ``messages``).

    Attributes:
        number: 1, 2, ... (a run of one wave: 1).
        watermark: its cut (None: every queue to its end; always None in one wave).
        last: whether no wave follows.
        queues: how many queues it read.
        handed_out: how many messages its reads handed out (peeked or received), those
            beyond its watermark included (None: as many as it holds).
        many: whether it is one of several waves of its run (its rows in the ledger name
            it, and its frames are kept on disk).
    """

    number: int
    watermark: datetime | None
    last: bool
    queues: int
    handed_out: int | None = None
    many: bool = False
