"""How a run reads its source, as one object chosen once (:func:`reading_for`): peeked
by Spark tasks (:class:`Peeking`: nothing locked, the settle receives each message
again), or received once under lock beside the driver (:class:`Receiving`,
``run.read: once``: the settle completes what the read keeps locked). The run's waves
(:mod:`syphon.job.read.waves`), its runner and its settle use either alike
(:class:`Reading`), and never ask which it is.

A read object is a context manager: entered before the run's first wave, left after its
last (a read once then gives back what it still keeps locked), and then asked what it
did beyond the waves' counts (:meth:`Reading.closed`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from syphon.core.ledger import Operations
from syphon.core.render import arrow_schema, spark_schema
from syphon.core.schema import SETTLE_ACTION, SETTLE_RESULT
from syphon.job.context import RunContext, keep, service_tasks
from syphon.job.read.once import ReadOnce
from syphon.job.read.snapshot import QueueRange, peek_frame, read_snapshot
from syphon.job.request import RunRequest
from syphon.job.rows import arrow_rows
from syphon.job.settle.passes import settle_queues
from syphon.job.where import Spread, in_driver
from syphon.obs import failpoints
from syphon.servicebus.discovery import DiscoveredQueue

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: ``run.read``'s value that reads once.
READ_ONCE = "once"


@dataclass(frozen=True)
class ReadLocks:
    """What a run that read its source once under lock could not see or keep.

    Attributes:
        unseen: per queue, the messages another receiver kept locked, which the run
            could not receive (their keys were held back).
        lost: per queue, the locks that lapsed while the run kept them (its own: a
            message it took and received again).
        renewals_failed: renewal requests the namespace failed.
        lock_seconds: the queues' lock duration (None: no message was received).
        deferred: per queue, the messages a consumer deferred, which only a receive by
            sequence number takes (their keys were held back).
        gone: per queue, the messages the queue had when the run found it that were gone
            when it looked (completed by another receiver, or expired): nothing waits.
    """

    unseen: Mapping[str, int] = field(default_factory=dict)
    lost: Mapping[str, int] = field(default_factory=dict)
    renewals_failed: int = 0
    lock_seconds: float | None = None
    deferred: Mapping[str, int] = field(default_factory=dict)
    gone: Mapping[str, int] = field(default_factory=dict)

    @property
    def waiting(self) -> bool:
        """Whether a later run has work for what the read could not take."""
        return bool(self.unseen or self.deferred)

    def notes(self, keys: int, deferred_keys: int = 0) -> list[str]:
        """The run's words for it; ``keys``, ``deferred_keys``: the keys held back for
        the locked and for the deferred messages."""
        out = []
        for found, kept, what, later in (
            (self.unseen, keys, "locked by another receiver", "the next run takes them"),
            (
                self.deferred,
                deferred_keys,
                "deferred by a consumer",
                "only a receive by sequence number takes them",
            ),
        ):
            if not found:
                continue
            where = ", ".join(f"{p} ({n})" for p, n in sorted(found.items()))
            found_here = f"{sum(found.values())} messages are {what} in {where}"
            if kept:
                out.append(
                    f"{kept} keys held back: {found_here}, and nothing of their keys is sent "
                    f"before them: {later}"
                )
            else:
                out.append(f"{found_here} (none of them has a key): {later}")
        if self.lost:
            cause = (
                "the namespace failed renewals"
                if self.renewals_failed
                else "the run could not renew them in time: its driver stalled or was paused"
            )
            out.append(
                f"{sum(self.lost.values())} locks lapsed while the run kept them ({cause}); "
                "their messages wait for the next run, which finds their outcomes in the audit"
            )
        if self.gone:
            where = ", ".join(f"{p} ({n})" for p, n in sorted(self.gone.items()))
            out.append(
                f"{sum(self.gone.values())} messages counted when the run started were gone "
                f"when it looked, in {where}: completed by another receiver, or expired "
                "(nothing waits for them)"
            )
        return out

    def fix(self) -> str | None:
        """The ``fix:`` line of a run these locks left partial (None: nothing to say)."""
        parts = []
        if self.unseen:
            lapse = f" ({self.lock_seconds:.0f} s)" if self.lock_seconds is not None else ""
            parts.append(
                "rerun once the other receiver lets its messages go: a killed syphon run's "
                f"locks lapse after the queues' lock duration{lapse}; otherwise stop the "
                "receiver that holds them (an explorer in peek-lock mode, a consumer)"
            )
        if self.deferred:
            parts.append(
                "rerun with --take-deferred to bring the deferred messages home in order "
                "(syphon receives them by sequence number), or have the consumer that "
                "deferred them settle them"
            )
        if self.lost:
            parts.append(
                "check the secondary namespace and rerun"
                if self.renewals_failed
                else "rerun; give the driver the CPU it needs (it renews the locks every "
                "third of their duration), or lengthen the backlog queues' lock duration"
            )
        return "; ".join(parts) or None


@dataclass(frozen=True)
class ReadClosed:
    """What a read did beyond its waves' counts, once it is closed: its ``operations``
    (receives and peeks the waves did not count, the give-backs), what it could not see
    or keep (``locks``), and the queues it could not read whole (path: why)."""

    operations: Operations = field(default_factory=Operations)
    locks: ReadLocks = ReadLocks()
    unread: Mapping[str, str] = field(default_factory=dict)


class Reading(Protocol):
    """A run's read of its source (see the module docstring)."""

    def __enter__(self) -> Reading: ...

    def __exit__(self, *exc: object) -> None: ...

    def frame(self, ranges: list[QueueRange], messages: int) -> DataFrame:
        """The messages of ``ranges`` (about ``messages`` of them) the queues hold next
        (lazy over the read, or read at once: the caller checkpoints it)."""
        ...

    def whole(self, queues: list[DiscoveredQueue]) -> tuple[DataFrame, int | None]:
        """Every message of ``queues``, checkpointed, and how many were read (None: not
        counted; the plan counts them)."""
        ...

    def counted(self, queues: int, messages: int | None) -> Operations:
        """The operations of a wave that read ``messages`` from ``queues`` queues."""
        ...

    def unseen(self) -> list[tuple[str, bytes]]:
        """(queue, encoded message) of the messages found since the last call that the
        read could not take (another receiver keeps them locked): their keys wait."""
        ...

    def settle(self, wanted: list[tuple[Any, ...]], size: int) -> pa.Table:
        """Settles a wave's settle actions ``wanted`` (rows of
        :data:`~syphon.core.schema.SETTLE_ACTION`; the wave's plan holds ``size`` rows):
        its settle rows (:data:`~syphon.core.schema.SETTLE_RESULT`), in the driver's memory,
        so that the settlements happen once and counting them takes no Spark job."""
        ...

    def closed(self) -> ReadClosed:
        """What the read did beyond its waves' counts (asked once it is left)."""
        ...


class Peeking:
    """Read by peeking, in Spark tasks (or the driver, :mod:`syphon.job.where`): a task
    per ``run.messages_per_task`` messages at most the cores; a queue of more than
    ``backlog.split_messages`` as several ranges of sequence numbers (one wave only).
    The settle receives each message again, in tasks."""

    def __init__(self, ctx: RunContext, request: RunRequest) -> None:
        self.ctx = ctx
        self.request = request

    def __repr__(self) -> str:
        return f"Peeking(run_id={self.request.run_id!r})"

    def __enter__(self) -> Peeking:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def frame(self, ranges: list[QueueRange], messages: int) -> DataFrame:
        """Lazy: every action peeks again (peeked by the driver: at once)."""
        ctx, spark = self.ctx, self.ctx.spark()
        tasks = service_tasks(spark, messages, ctx.config.run.messages_per_task)
        access = self.request.source.access
        return peek_frame(spark, access, ranges, tasks, driver=in_driver(ctx))

    def whole(self, queues: list[DiscoveredQueue]) -> tuple[DataFrame, int | None]:
        ctx = self.ctx
        split, per_task = ctx.config.backlog.split_messages, ctx.config.run.messages_per_task
        access, driver = self.request.source.access, in_driver(ctx)
        return read_snapshot(ctx.spark(), access, queues, split, per_task, driver), None

    def counted(self, queues: int, messages: int | None) -> Operations:
        return Operations(snapshot_queues_peeked=queues, snapshot_messages_peeked=messages)

    def unseen(self) -> list[tuple[str, bytes]]:
        return []  # a peek sees what others keep locked: the settle leaves it

    def settle(self, wanted: list[tuple[Any, ...]], size: int) -> pa.Table:
        """In tasks (or the driver), each receiving its queues' messages again; their
        rows collected once."""
        ctx, spark = self.ctx, self.ctx.spark()
        tasks = service_tasks(spark, size, ctx.config.run.messages_per_task)
        todo = spark.createDataFrame(arrow_rows(wanted, SETTLE_ACTION), spark_schema(SETTLE_ACTION))
        results = settle_queues(
            todo,
            self.request.source.access,
            self.request.run_id,
            failpoints.for_task("mid_settle"),
            Spread(tasks, in_driver(ctx)),
        )
        return results.toArrow()

    def closed(self) -> ReadClosed:
        return ReadClosed()


class Receiving:
    """Read once, under lock, by a :class:`~syphon.job.read.once.ReadOnce` of the source's
    readable ``queues`` that lives from :meth:`__enter__` to :meth:`__exit__`; the settle
    settles by its locks, on the driver."""

    def __init__(self, ctx: RunContext, request: RunRequest, queues: list[DiscoveredQueue]) -> None:
        self.ctx = ctx
        self.run_id = request.run_id
        counts = {q.path: q.message_count for q in queues if not q.empty and q.unreadable is None}
        self.once = ReadOnce(
            request.source.access,
            list(counts),
            counts,
            before=request.started,
            take_deferred=request.take_deferred,
        )
        #: the messages the waves counted as received
        self._counted = 0

    def __repr__(self) -> str:
        return f"Receiving({self.once!r})"

    def __enter__(self) -> Receiving:
        self.once.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.once.__exit__(*exc)

    def frame(self, ranges: list[QueueRange], messages: int) -> DataFrame:
        """Received now, and kept locked; ``messages`` is unused (the driver receives)."""
        return self.once.frame(self.ctx.spark(), ranges, self.ctx.spark.give_back)

    def whole(self, queues: list[DiscoveredQueue]) -> tuple[DataFrame, int | None]:
        """Every message of ``queues`` that no one keeps locked."""
        before = self.once.taken
        ranges = [QueueRange(q.path) for q in queues]
        frame = keep(self.once.frame(self.ctx.spark(), ranges, self.ctx.spark.give_back))
        return frame, self.once.taken - before

    def counted(self, queues: int, messages: int | None) -> Operations:
        self._counted += messages or 0
        return Operations(
            snapshot_queues_peeked=queues,
            snapshot_messages_peeked=0,
            snapshot_messages_received=messages,
        )

    def unseen(self) -> list[tuple[str, bytes]]:
        return self.once.gaps.take_new()

    def settle(self, wanted: list[tuple[Any, ...]], size: int) -> pa.Table:
        """By the locks the read keeps, on the driver."""
        import pyarrow as pa

        rows = self.once.settle(wanted, self.run_id, failpoints.for_task("mid_settle"))
        return pa.Table.from_pylist(rows, schema=arrow_schema(SETTLE_RESULT))

    def closed(self) -> ReadClosed:
        """Every message the queues handed out beyond what the waves counted (those
        received again after a lapse, or read ahead of a wave that never ran), the gap
        check's peeks, the give-backs; and what the read could not see or keep."""
        once = self.once
        operations = Operations(
            snapshot_messages_received=once.received - self._counted,
            snapshot_messages_peeked=once.peeked,
            settle_abandons=once.given_back,
            settle_requests=once.give_back_requests,
            snapshot_deferred_received=once.deferred_taken if once.take_deferred else None,
        )
        deferred = once.deferred()
        unseen = {p: len(m) - deferred.get(p, 0) for p, m in once.gaps.unseen.items()}
        locks = ReadLocks(
            unseen={p: n for p, n in unseen.items() if n},
            lost=once.lost,
            renewals_failed=once.renewal.failed,
            lock_seconds=once.renewal.lock_seconds,
            deferred=deferred,
            gone=once.gone(),
        )
        return ReadClosed(operations, locks)


def reading_for(ctx: RunContext, request: RunRequest, queues: list[DiscoveredQueue]) -> Reading:
    """The read of a run of ``request`` over its source's ``queues``: once, under lock,
    when ``run.read`` is ``once`` and nothing stands against it (:func:`peeks_instead`),
    else by peeking."""
    why_not = peeks_instead(ctx, request)
    if why_not is None:
        return Receiving(ctx, request, queues)
    if ctx.config.run.read == READ_ONCE:
        log.info("run %s peeks its source: %s", request.run_id, why_not)
    return Peeking(ctx, request)


def peeks_instead(ctx: RunContext, request: RunRequest) -> str | None:
    """Why a run peeks its source instead of reading it once (None: it reads once).

    - A namespace source's entities are live: each receive counts against an entity's
      MaxDeliveryCount, and a lock that lapses (a crashed run's) counts one more, so a
      message could be dead-lettered by the drain itself; and a session-requiring
      entity is received only by session.
    - A resumed run (``syphon replay --run-id``) reads its plan's messages again by
      sequence number, most often after a crash whose locks may still keep some of
      them: a peek sees them, a receive would not.
    """
    if ctx.config.run.read != READ_ONCE:
        return f"run.read is {ctx.config.run.read}"
    if request.source.kind == "namespace":
        return (
            "a namespace source's entities count each receive, and each lapsed lock, "
            "against their MaxDeliveryCount"
        )
    if request.resume:
        return "a resumed run reads its plan's messages again, and a crash's locks may keep some"
    return None
