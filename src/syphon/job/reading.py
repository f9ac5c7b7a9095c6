"""How a run reads its source's messages into Spark: peeked by Spark tasks
(:class:`Peeking`: nothing locked, the settle receives each message again), or received
once under lock beside the driver (:class:`Receiving`: the settle completes what the
read holds; ``run.read: once``). A wave (:mod:`syphon.job.waves`) and a run of one wave
read through either alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from syphon.core.config import MESSAGES_PER_TASK_DEFAULT, BacklogConfig
from syphon.job.context import RunContext, keep, service_tasks
from syphon.job.held import HeldSource
from syphon.job.request import RunRequest
from syphon.job.snapshot import QueueRange, peek_frame, read_snapshot
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: ``run.read``'s value that reads once.
READ_ONCE = "once"


@dataclass(frozen=True)
class Peeking:
    """Read by peeking, in Spark tasks: a task per ``per_task`` messages at most the
    cores; a queue of more than ``split_messages`` as several ranges of sequence
    numbers (one wave only)."""

    spark: SparkSession
    access: Access
    split_messages: int = BacklogConfig.split_messages
    per_task: int = MESSAGES_PER_TASK_DEFAULT
    driver: bool = False  # peeked by the driver (syphon.job.where)

    def frame(self, ranges: list[QueueRange], messages: int) -> DataFrame:
        """The messages of ``ranges`` (about ``messages`` of them), lazy: every action
        peeks again (peeked by the driver: at once)."""
        tasks = service_tasks(self.spark, messages, self.per_task)
        return peek_frame(self.spark, self.access, ranges, tasks, driver=self.driver)

    def whole(self, queues: list[DiscoveredQueue]) -> tuple[DataFrame, int | None]:
        """Every message of ``queues``, checkpointed, and how many were read (None: not
        counted; the plan counts them)."""
        split, per_task = self.split_messages, self.per_task
        frame = read_snapshot(self.spark, self.access, queues, split, per_task, self.driver)
        return frame, None


@dataclass(frozen=True)
class Receiving:
    """Read once, under lock, by the run's :class:`~syphon.job.held.HeldSource`."""

    spark: SparkSession
    held: HeldSource

    def frame(self, ranges: list[QueueRange], messages: int) -> DataFrame:
        """The messages the queues of ``ranges`` hand out next (each range's limit),
        received now, and held; ``messages`` is unused (the driver receives)."""
        return self.held.frame(self.spark, ranges)

    def whole(self, queues: list[DiscoveredQueue]) -> tuple[DataFrame, int | None]:
        """Every message of ``queues`` that no one holds, received and checkpointed, and
        how many were received."""
        before = self.held.received
        frame = self.held.frame(self.spark, [QueueRange(q.path) for q in queues])
        return keep(frame), self.held.received - before


#: A run's way of reading.
Reading = Peeking | Receiving


def peeks_instead(ctx: RunContext, request: RunRequest) -> str | None:
    """Why a new run peeks its source instead of reading it once (None: it reads once).

    A namespace source's entities are live: each receive counts against an entity's
    MaxDeliveryCount, and a lock that lapses (a crashed run's) counts one more, so a
    message could be dead-lettered by the drain itself; and a session-requiring entity
    is received only by session. Such a source keeps the peek.
    """
    if ctx.config.run.read != READ_ONCE:
        return f"run.read is {ctx.config.run.read}"
    if request.source.kind == "namespace":
        return (
            "a namespace source's entities count each receive, and each lapsed lock, "
            "against their MaxDeliveryCount"
        )
    return None
