"""The stages of a run after its plan, each ``stage(ctx, request, inputs) -> result``.

:mod:`syphon.job.run.loop` calls the first three, and the run's
:class:`~syphon.job.run.runner.WaveRunner` the last three for each wave, in the order that
keeps messages safe, recording the ledger's statuses between them; each stage answers
what it produced with its own timings and operations (a
:class:`~syphon.job.request.StageResult`):

- :func:`discover`: the source's queues, without Spark;
- :func:`recover`: the outcomes an interrupted wave journaled, into the audit;
- :func:`resumed_plan`: a planned run's plan rows read back from the audit, what an
  earlier attempt already sent, and its queues read again (by the run's read);
- :func:`probe`: the destinations of what is still to send, probed without sending;
- :func:`send`: the replay (:mod:`syphon.job.replay.send`), its outcomes committed to the
  audit;
- :func:`settle`: the settle (by the run's read, :mod:`syphon.job.read.modes`), its
  outcomes committed to the audit.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from syphon.core.errors import SyphonError
from syphon.core.ledger import Operations, Timings
from syphon.core.naming import is_dead_letter_path
from syphon.core.render import spark_schema
from syphon.core.schema import PLACE, REPLAY_RESULT, Detail, Outcome, Stage, Status
from syphon.job.context import RunContext, fit_shuffle_partitions, keep, service_tasks
from syphon.job.ledger import record_recovered
from syphon.job.plan.facts import outcome_rows
from syphon.job.plan.planned import HeldBack, PlannedWave
from syphon.job.plan.planning import discovery_operations, unread
from syphon.job.plan.reconcile import wave_messages
from syphon.job.read.modes import Reading
from syphon.job.replay.journal import journal_folder, outcomes_commit, read_journal, remove_journal
from syphon.job.replay.lanes import ReplaySettings
from syphon.job.replay.send import credit_rates, replay_input, replay_messages, still_to_send
from syphon.job.request import RunRequest, StageResult, timed
from syphon.job.run.tally import Tally, tally
from syphon.job.settle.actions import Place, sent_places, settle_actions
from syphon.job.settle.journal import close_settle_journal, open_settle_journal, removals
from syphon.job.where import Spread, in_driver
from syphon.obs import failpoints, progress
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.sending import Destination, probe_destinations
from syphon.store import queries

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Discovered(StageResult):
    """The source's queues (empty ones included), and those that may hold messages
    syphon cannot read (path: why)."""

    queues: list[DiscoveredQueue]
    unread: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return all(q.empty for q in self.queues)

    @property
    def messages(self) -> int | None:
        """How many messages the readable queues hold (None: a count is unknown)."""
        counts = [q.message_count for q in self.queues if q.unreadable is None]
        return None if None in counts else sum(c or 0 for c in counts)

    @property
    def size_bytes(self) -> int | None:
        """The bytes the readable queues' messages take (None: a size is unknown)."""
        sizes = [q.size_bytes for q in self.queues if q.unreadable is None]
        return None if None in sizes else sum(s or 0 for s in sizes)


def discover(ctx: RunContext, request: RunRequest) -> Discovered:
    """The queues of the request's source, and what finding them cost."""
    result = Discovered(queues=[])
    with timed(result.timings, "discover"):
        result.queues = request.source.discover(ctx)
    result.operations = discovery_operations(ctx, result.queues, request.source)
    result.unread = unread(result.queues)
    return result


@dataclass(kw_only=True)
class Recovered(StageResult):
    """The interrupted runs whose journal was read into the audit (run id: messages it
    recorded an outcome for, and messages it left in doubt)."""

    runs: dict[str, tuple[int, int]] = field(default_factory=dict)


def recover(ctx: RunContext, request: RunRequest) -> Recovered:
    """Reads the journal of every interrupted run's last wave (:mod:`syphon.job.replay.journal`)
    into the audit, as that run's replay rows: each recorded outcome as recorded, each
    transfer started without one ``in_doubt`` / ``interrupted``; then records the wave
    ``replayed``. A message never started is then neither sent nor in doubt: the next
    plan sends it as any other. Runs without a journal stay interrupted (every message
    they planned and did not record is in doubt). Run under the lease."""
    from pyspark.sql import functions as F

    result = Recovered()
    records = ctx.store.runs()
    for run_id in queries.interrupted_runs(records):
        last = [r for r in records if r.run_id == run_id and r.status == Status.REPLAYING][-1]
        journal_id = journal_of(last.detail)
        journal = None if journal_id is None else read_journal(ctx.store.files, run_id, journal_id)
        if journal_id is None or journal is None:
            continue
        doubt = journal.in_doubt
        rows = [(q, s, o, d, 0, 0) for (q, s), (o, d) in sorted(journal.outcomes.items())]
        rows += [(q, s, Outcome.IN_DOUBT, Detail.INTERRUPTED, 0, 0) for q, s in sorted(doubt)]
        plan_rows = ctx.store.run_rows(run_id, Stage.PLAN)
        if rows and plan_rows is not None:
            frame = ctx.spark().createDataFrame(rows, spark_schema(REPLAY_RESULT))
            # what the attempt committed itself (cut off after its commit) is in already:
            # the commit's name skips it whole; an attempt of a syphon that did not name
            # its commits is told by its rows
            committed = ctx.store.run_rows(run_id, Stage.REPLAY)
            if committed is not None and last.recorded_at is not None:
                since = committed.where(committed["recorded_at"] >= F.lit(last.recorded_at))
                frame = frame.join(since.select(*PLACE), list(PLACE), "left_anti")
            now = datetime.now(timezone.utc)
            commit = outcomes_commit(run_id, journal_id)  # the wave's commit: made once
            ctx.store.append_outcomes(frame, plan_rows, run_id, Stage.REPLAY, now, commit)
        record_recovered(ctx, last, request.run_id)
        remove_journal(ctx.store.files, run_id)
        result.runs[run_id] = (len(journal.outcomes), len(doubt))
        log.info(
            "run %s: the journal of interrupted run %s recorded %d outcomes and left %d "
            "messages in doubt",
            request.run_id,
            run_id,
            len(journal.outcomes),
            len(doubt),
        )
    return result


def journal_of(detail: str | None) -> str | None:
    """The journal id a ``replaying`` row names (None: it names none)."""
    if detail and detail.startswith(JOURNAL_PREFIX):
        return detail[len(JOURNAL_PREFIX) :]
    return None


#: How a ``replaying`` row names its wave's journal: ``journal <id>``.
JOURNAL_PREFIX = "journal "


@dataclass(kw_only=True)
class Resumed(StageResult):
    """A planned run taken up again: its wave (its plan rows, checkpointed; its queues
    peeked again; what its earlier attempts recorded as replayed; its plan's counts by
    verdict)."""

    wave: PlannedWave


def resumed_plan(ctx: RunContext, request: RunRequest, reading: Reading) -> Resumed:
    """The plan of ``request.run_id`` read back from the audit (the rows it has not
    settled yet), its queues read again through ``reading``.

    Raises:
        SyphonError: the audit holds no plan of that run, or the run was planned from
            another source than the request's.
    """
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    spark = ctx.spark()
    source = request.source
    rows = ctx.store.run_rows(request.run_id, Stage.PLAN)
    if rows is None:
        raise SyphonError(f"no audit at {ctx.store.where}: run {request.run_id} has no plan")
    settled = ctx.store.run_rows(request.run_id, Stage.SETTLE)
    if settled is not None:  # what the run settled is done (a run of several waves: its
        # earlier waves), the rest is taken up; a settle row older than the
        # message's plan row (an earlier wave's pass that received it beyond its plan
        # and gave it back) does not count
        from pyspark.sql import functions as F

        p, s = rows.alias("p"), settled.alias("s")
        same = [F.col(f"p.{c}") == F.col(f"s.{c}") for c in PLACE]
        after = F.col("s.recorded_at") >= F.col("p.recorded_at")
        rows = p.join(s, [*same, after], "left_anti")
    rows = keep(rows)
    audit = rows.toArrow()  # the wave's plan rows in the driver, as a new plan's are
    verdicts = pc.value_counts(audit.column("verdict")).to_pylist()
    counts = {r["values"]: r["counts"] for r in verdicts}
    # not sized by its plan: fitted to it now
    fit_shuffle_partitions(spark, audit.num_rows, ctx.config.spark.conf)
    earlier = ctx.store.run_rows(request.run_id, Stage.REPLAY)
    if earlier is not None and earlier.limit(1).count() == 0:
        earlier = None
    paths = sorted(set(audit.column("backlog_queue").to_pylist()))
    recorded = set(audit.column("source").to_pylist()) - {None}  # None: a row without one
    if recorded:
        other = recorded != {source.name}
    else:
        other = any(is_dead_letter_path(p) for p in paths) != (source.kind == "dead_letter")
    if other:
        named = f" ({', '.join(sorted(recorded))})" if recorded else ""
        raise SyphonError(
            f"run {request.run_id} was planned from another source{named} than "
            f"{source.name}: name its source with --source"
        )
    queues = [DiscoveredQueue("", 0, p, None, False) for p in paths]
    snapshot, _ = reading.whole(queues)
    messages = wave_messages(snapshot, source.redrive, request.repair)
    return Resumed(wave=PlannedWave(rows, audit, messages, counts, earlier=earlier))


@dataclass(kw_only=True)
class Probed(StageResult):
    """The plan rows still to send (``todo``) and the probes' verdicts on their
    destinations: a destination mapped to a reason is skipped (None: it answered)."""

    todo: DataFrame
    skipped: dict[Destination, str | None]


def probe(ctx: RunContext, wave: PlannedWave, known: Mapping[Destination, str | None]) -> Probed:
    """Probes the destinations of the ``wave``'s rows that no earlier attempt of the run
    sent, sending nothing; those an earlier wave judged (``known``) are not probed
    again."""
    result = Probed(todo=still_to_send(wave.rows, wave.earlier), skipped={})
    with timed(result.timings, "replay", "replay_probes"):
        sending_to = wave.sending_to
        if sending_to is None or wave.earlier is not None:
            pairs = result.todo.select("primary", "destination").distinct().collect()
            sending_to = frozenset((r["primary"], r["destination"]) for r in pairs)
        destinations = sorted(d for d in sending_to if d not in known)
        progress.step(f"replay: probing {len(destinations)} destinations")
        result.skipped = probe_destinations(ctx.namespaces.primaries, destinations)
    result.operations.replay_probes = len(destinations)
    return result


@dataclass(kw_only=True)
class Sent(StageResult):
    """The replay's outcome rows (in the driver's memory: the sends happened once), the
    places it sent and their tally."""

    results: pa.Table
    sent: set[Place]
    tally: Tally


def send(
    ctx: RunContext,
    request: RunRequest,
    wave: PlannedWave,
    todo: DataFrame,
    back: HeldBack,
    journal_id: str | None = None,
) -> Sent:
    """Sends the ``wave``'s rows ``todo`` (the messages' bytes from its snapshot; those
    ``back`` in doubt marked as sent again), except what the run holds ``back`` (skipped
    destinations, broken lanes), then commits the outcomes of the wave's rows to the
    audit. Each transfer is journaled in the wave attempt's journal ``journal_id``
    (opened by the caller; None: not journaled), and the commit is named for it
    (:func:`syphon.job.replay.journal.outcomes_commit`). The messages the wave replays size the
    replay's tasks (:func:`syphon.job.context.service_tasks`)."""
    journal = None
    if journal_id is not None:
        journal = journal_folder(ctx.store.files, request.run_id, journal_id)
    budgets = ctx.config.replay.credits_per_second
    operations = Operations()
    timings = Timings()
    with timed(timings, "replay", "replay_sends"):
        progress.step("replay: sending")
        results = replay_messages(
            replay_input(
                wave.messages,
                todo,
                back.in_doubt,
            ),
            ctx.namespaces.primaries,
            back.skipped,
            ReplaySettings(credits_per_second=budgets),
            failpoint=failpoints.for_task("mid_replay"),
            broken=back.broken,
            journal=journal.for_tasks() if journal is not None else None,
            spread=Spread(
                service_tasks(ctx.spark(), wave.replays, ctx.config.run.messages_per_task),
                in_driver(ctx),
            ),
        )
        # the sends happen here, exactly once: their rows in the driver's memory
        done = results.toArrow()
    with timed(timings, "replay"):
        seconds = timings.replay_sends or 0.0
        operations.credit_rates = credit_rates(done, wave.audit, budgets, seconds)
        now = datetime.now(timezone.utc)
        commit = outcomes_commit(request.run_id, journal_id) if journal_id else None
        audited = outcome_rows(done, wave.audit, request.run_id, Stage.REPLAY, now)
        ctx.store.append_rows(audited, request.run_id, Stage.REPLAY, commit)
    replayed = tally(done, "transfers", "busy_retries")
    operations.replay_send_transfers = replayed.total("transfers")
    operations.replay_busy_retries = replayed.total("busy_retries")
    operations.replay_messages_sent = replayed.count(Outcome.SENT)
    return Sent(
        timings=timings,
        operations=operations,
        results=done,
        sent=sent_places(done),
        tally=replayed,
    )


@dataclass(kw_only=True)
class Settled(StageResult):
    """The settle's outcome rows (in the driver's memory) and their tally."""

    results: pa.Table
    tally: Tally


def settle(
    ctx: RunContext,
    request: RunRequest,
    wave: PlannedWave,
    sent: Set[Place],
    reading: Reading,
) -> Settled:
    """Settles the ``wave``'s rows in the source's queues by what the run ``sent`` (the
    places every attempt sent), through the run's ``reading`` (by the locks it keeps, or
    by receiving again), then commits the outcomes to the audit."""
    operations = Operations()
    timings = Timings()
    with timed(timings, "settle", "settle_passes"):
        progress.step("settle: completing and dead-lettering in the backlog queues")
        wanted = settle_actions(wave.audit, sent)
        journal = open_settle_journal(
            ctx.store.files, request.run_id, removals(wanted, request.run_id)
        )
        done = reading.settle(wanted, wave.size)  # in the driver's memory: settled once
    with timed(timings, "settle"):
        import pyarrow.compute as pc

        now = datetime.now(timezone.utc)
        # what the passes gave back without it being the wave's is counted, not audited
        kept = done.filter(pc.not_equal(done.column("outcome"), Outcome.GIVEN_BACK))
        audited = outcome_rows(kept, wave.audit, request.run_id, Stage.SETTLE, now)
        ctx.store.append_rows(audited, request.run_id, Stage.SETTLE)
        close_settle_journal(ctx.store.files, journal)
    settled = tally(done, "received", "abandoned", "requests")
    operations.settle_receives = settled.total("received")
    operations.settle_requests = settled.total("requests")
    operations.settle_completes = settled.count(Outcome.COMPLETED)
    operations.settle_dead_letters = settled.count(Outcome.DEAD_LETTERED)
    operations.settle_discards = settled.count(Outcome.DISCARDED)
    operations.settle_abandons = settled.total("abandoned")
    return Settled(timings=timings, operations=operations, results=done, tally=settled)
