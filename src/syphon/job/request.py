"""What a run is asked to do, and the shape of its stages' answers.

A :class:`RunRequest` is built once, at the entry point, beside the
:class:`~syphon.job.context.RunContext` (which says where things are): the run's id, the
source it drains, what it takes and what it may send again. Each stage of
:mod:`syphon.job.run.loop` takes ``(ctx, request, inputs)`` and answers a result that carries
its own :class:`~syphon.core.ledger.Timings` and :class:`~syphon.core.ledger.Operations`
(a :class:`StageResult`), which the run folds into its ledger.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from syphon.core.discard import Discard
from syphon.core.ledger import Operations, Timings
from syphon.core.repair import Repair
from syphon.core.selection import Selection
from syphon.job.context import RunContext
from syphon.job.sources import RunSource, run_source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class RunRequest:
    """One run's request.

    Attributes:
        run_id: the run's id (a resumed run's: the run it resumes).
        started: when the run started (a resumed run: when its attempt started).
        source: the source it drains.
        selection: what it takes (None: every message); the rest is ``unselected``.
        allow_resend: MessageIds to send again although an earlier run replayed them.
        discard: what it removes without sending (None: nothing).
        resume: whether it resumes a planned run (``syphon replay``) instead of
            planning a new one.
        max_waves: how many waves it takes at most (None: until the source's end); the
            rest is the next run's (status ``partial``).
        until: when it stops taking waves (None: never); checked at each wave's end.
        repair: what it changes in the messages it sends (None: nothing); a resumed
            run's is the one its plan recorded.
        job_run_id: the platform's job run that runs it (None: none), on its ledger rows
            and its plan's audit rows.
        new_message_ids: whether a re-driven dead letter its destination would drop as
            a duplicate is sent under a new MessageId instead of waiting for the
            destination's window (:mod:`syphon.core.dedupe`).
        take_deferred: whether a read once receives the deferred messages it finds by
            their sequence numbers and takes them (else their keys wait).
    """

    run_id: str
    started: datetime
    source: RunSource
    selection: Selection | None = None
    allow_resend: tuple[str, ...] = ()
    discard: Discard | None = None
    resume: bool = False
    max_waves: int | None = None
    until: datetime | None = None
    repair: Repair | None = None
    job_run_id: str | None = None
    new_message_ids: bool = False
    take_deferred: bool = False


def new_run_id(now: datetime) -> str:
    """A run id that sorts by its start: ``20261126T081500Z-<8 hex digits>``."""
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Asked:
    """What the operator asks of a run besides its source and id (each as
    :class:`RunRequest`'s attribute of the same name): what it takes, sends again,
    removes and changes, and when it stops taking waves."""

    selection: Selection | None = None
    allow_resend: tuple[str, ...] = ()
    discard: Discard | None = None
    repair: Repair | None = None
    max_waves: int | None = None
    until: datetime | None = None
    #: the platform's job run that runs the command (Databricks' ``{{job.run_id}}``)
    job_run_id: str | None = None
    new_message_ids: bool = False
    take_deferred: bool = False


def run_request(
    ctx: RunContext,
    run_id: str | None = None,
    source: RunSource | str | None = None,
    asked: Asked = Asked(),
    resume: bool = False,
) -> RunRequest:
    """The request of a run (a new id when ``run_id`` is None) of ``source`` (a source,
    its name, or None: the config's default), with what the operator ``asked`` of it;
    with ``resume``, of the planned run ``run_id`` (``syphon replay``).

    Raises:
        ConfigError: no source of that name.
        ValueError: a resumed run without its id; ``max_waves`` below 1.
    """
    if resume and run_id is None:
        raise ValueError("a resumed run needs the id of the run it resumes")
    if asked.max_waves is not None and asked.max_waves < 1:
        raise ValueError(f"--max-waves must be at least 1 (got {asked.max_waves})")
    started = datetime.now(timezone.utc)
    if not isinstance(source, RunSource):
        source = run_source(ctx, source)
    return RunRequest(
        run_id or new_run_id(started),
        started,
        source,
        asked.selection,
        tuple(asked.allow_resend),
        asked.discard,
        resume,
        asked.max_waves,
        asked.until,
        asked.repair,
        asked.job_run_id or None,
        new_message_ids=asked.new_message_ids,
        take_deferred=asked.take_deferred,
    )


@dataclass
class StageResult:
    """What every stage answers besides its own outputs: what it took (``timings``, in
    seconds by stage) and what it cost (``operations``); the run adds them to its
    ledger's (:meth:`syphon.core.ledger.Timings.add`)."""

    timings: Timings = field(default_factory=Timings)
    operations: Operations = field(default_factory=Operations)


@dataclass(kw_only=True)
class SnapshotRead(StageResult):
    """A read of the source, as a plan takes it: its messages (``snapshot``: checkpointed,
    or lazy over a checkpoint), how many (``messages``; None: not counted yet), and what
    the read took and cost."""

    snapshot: DataFrame
    messages: int | None = None


@contextlib.contextmanager
def timed(timings: Timings, *names: str) -> Iterator[None]:
    """Adds the wall time of the ``with`` block to each of ``names`` in ``timings`` (a
    stage's time and, named too, its part of an enclosing stage's); added, not set, so
    that a stage that runs once per wave sums its waves. The Spark jobs the block starts
    are described as ``syphon <name>`` (the first name), in the Spark UI and event log."""
    clock = time.monotonic()
    described = _describe_jobs(f"syphon {names[0]}") if names else None
    try:
        yield
    finally:
        if described is not None:
            described()
        spent = time.monotonic() - clock
        for name in names:
            setattr(timings, name, (getattr(timings, name) or 0.0) + spent)


def _describe_jobs(description: str) -> Callable[[], None] | None:
    """Describes this thread's next Spark jobs (when a session runs in this process);
    answers how to put the description back. Nothing while the session's context is
    still starting in another thread (:meth:`syphon.app.on_demand.SparkOnDemand.start_soon`):
    PySpark names it the active context before it has its JVM half."""
    pyspark = sys.modules.get("pyspark")
    sc = pyspark.SparkContext._active_spark_context if pyspark is not None else None
    if sc is None or getattr(sc, "_jsc", None) is None:
        return None
    key = "spark.job.description"
    before = sc.getLocalProperty(key)
    sc.setLocalProperty(key, description)
    return lambda: sc.setLocalProperty(key, before)
