"""The waves' reader: a source's waves read one after the other, the next one read in
the background while the run replays and settles this one (:class:`WaveReader`).

A wave's cursors are known as soon as it is read, so the next wave can be read while the
caller replays and settles this one. When its read starts is the caller's to say:

- the plan (the reconcile's Spark jobs, built through py4j by the driver) is on the way
  to a wave's first message home, and a read beside it shares the cores and the driver's
  interpreter: from the second wave on, the next wave's read starts once the caller says
  it has planned the wave (:meth:`WaveReader.planned`);
- the first wave's replay is on that way too, and the second wave's read is the first
  large one: it starts when the caller asks for the second wave
  (:meth:`WaveReader.next_wave`).

A caller that never says it planned a wave gets the next one all the same, read when it
asks. The read of a wave taken when the caller stops early is thrown away (peeked:
nothing was locked; received: what it keeps locked is given back with the rest when the
run ends).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from types import TracebackType

from syphon.core.ledger import Timings
from syphon.job.read.modes import Reading
from syphon.job.read.wave_sizes import wave_limits
from syphon.job.read.waves import Carried, Wave, WaveRead, read_wave
from syphon.job.request import timed
from syphon.servicebus.discovery import DiscoveredQueue

_Read = tuple[WaveRead, Carried | None, float]


class WaveReader:
    """The waves of ``queues`` (their readable, non-empty ones), read through
    ``reading``: one wave of everything when ``wave_messages`` is None, else waves of at
    most about ``wave_messages`` messages (a limit per queue of ``wave_messages`` over
    the queues, rounded up), none of them past ``before``, at most ``max_waves`` (None:
    to the end). The waves grow from a small first one
    (:func:`syphon.job.read.wave_sizes.wave_limits`).

    It owns the one thread that reads ahead; :meth:`close` (or leaving its ``with``)
    ends it: a read still waiting to start never starts, and one under way is waited for.
    """

    def __init__(
        self,
        reading: Reading,
        queues: list[DiscoveredQueue],
        wave_messages: int | None,
        before: datetime,
        max_waves: int | None = None,
    ) -> None:
        self._reading = reading
        self._readable = [q for q in queues if not q.empty and q.unreadable is None]
        self._paths = [q.path for q in self._readable]
        self._limits: Iterator[int] | None = None
        if wave_messages is not None:
            self._limits = wave_limits(wave_messages, len(self._paths))
        self._before = before
        self._max_waves = max_waves
        self._number = 0
        self._ended = False
        self._closed = threading.Event()
        #: the next wave's read waits for this (set: it may start)
        self._go = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: Future[_Read | None] | None = None

    def __enter__(self) -> WaveReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WaveReader({len(self._paths)} queues, {self._number} waves read)"

    def next_wave(self) -> Wave | None:
        """The next wave (waiting for its read), or None when there is none: every queue
        was read to its end, ``max_waves`` were read, or nothing before ``before`` is
        left."""
        if self._ended or self._closed.is_set():
            return None
        if self._limits is None:
            self._ended = True
            return self._whole()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="syphon-wave-read")
            self._go.set()  # the first wave: at once
            self._ahead = self._pool.submit(self._read, {}, None, next(self._limits), self._go)
        assert self._ahead is not None  # a wave that ends the reads sets _ended
        self._number += 1
        self._go.set()  # a caller that never said it planned the wave before
        clock = time.monotonic()
        done = self._ahead.result()
        waited = time.monotonic() - clock
        assert done is not None  # only a closed reader reads nothing
        got, carry, spent = done
        if self._number > 1 and not got.cut.taken:
            self._ended, self._ahead = True, None
            return None  # nothing before the run's start was left
        more = not got.last and (self._max_waves is None or self._number < self._max_waves)
        self._go = threading.Event()
        self._ahead = None
        if more:
            limit = next(self._limits)
            self._ahead = self._pool.submit(self._read, got.cut.cursors, carry, limit, self._go)
        else:
            self._ended = True
        return Wave(
            number=self._number,
            snapshot=got.rows,
            watermark=got.watermark,
            last=got.last,
            queues=len(self._paths),
            messages=got.cut.taken,
            handed_out=got.handed_out,
            many=True,
            # the wave's snapshot time: what the caller waited for (the first wave: all
            # of its read)
            timings=Timings(snapshot=spent if self._number == 1 else waited),
        )

    def planned(self) -> None:
        """The caller has planned the wave it was last handed: from the second wave on,
        the next wave's read starts now (see the module docstring)."""
        if self._number > 1:
            self._go.set()

    def close(self) -> None:
        """Ends the reads: one waiting for its go never starts; one under way is waited
        for (its frames are Spark's to drop)."""
        self._closed.set()
        self._go.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _whole(self) -> Wave:
        """One wave of everything."""
        timings = Timings()
        with timed(timings, "snapshot"):
            snapshot, received = self._reading.whole(self._readable)
        return Wave(
            number=1,
            snapshot=snapshot,
            messages=received,  # None: the plan counts them
            watermark=None,
            last=True,
            queues=len(self._readable),
            handed_out=received,
            timings=timings,
        )

    def _read(
        self, cursors: Mapping[str, int], carried: Carried | None, limit: int, go: threading.Event
    ) -> _Read | None:
        go.wait()
        if self._closed.is_set():
            return None
        clock = time.monotonic()
        got, carry = read_wave(self._reading, self._paths, cursors, limit, self._before, carried)
        return got, carry, time.monotonic() - clock
