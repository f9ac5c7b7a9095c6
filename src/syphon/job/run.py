"""``syphon run`` and ``syphon replay``: the wave loop, in the order that keeps
messages safe.

1. discover the source's queues; when every one is empty, record an ``empty`` run and
   stop — no Spark session is started;
2. take the lease (a run that finds it held records ``busy`` and stops); it is renewed
   in the background for the whole run;
3. list the primaries' entities once; then, wave after wave (:mod:`syphon.job.waves`:
   the messages enqueued before the wave's watermark, at most ``run.wave_messages``;
   one wave for sources that cannot be cut by time, or with ``run.wave_messages: 0``):

   a. plan (reconcile → audit, a ``planned`` row naming the wave and its watermark);
   b. probe the destinations no earlier wave probed;
   c. record ``replaying``, then send, each transfer journaled as it starts and ends
      (:mod:`syphon.job.journal`); the outcomes are committed to the audit in one
      append, then ``replayed`` is recorded. After a crash between the two, the next run
      (or ``syphon replay --run-id``) reads the journal into the audit first: a message
      whose transfer started and whose outcome was never journaled is in doubt, and is
      sent again marked ``resent_in_doubt``;
   d. settle from the committed outcomes only (completing or dead-lettering nothing
      whose outcome is not in the audit) and append the settlements;

   what a wave left unsent (a key's lane, a destination that failed) is held back by
   the later waves, for the next run to take in order;
4. record the final status: ``done`` (nothing left), ``partial`` (some messages stay for
   a later run, or ``--max-waves`` / ``--until`` stopped the run at a wave's end) or
   ``failed`` (an error stopped the run; ``detail`` names its class).

A run that lost its lease settles nothing: the new holder will.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from syphon.core.errors import SyphonError
from syphon.core.repair import Repair
from syphon.core.schema import Status, Verdict
from syphon.core.sessions import SessionFit, is_connect
from syphon.job.context import RunContext
from syphon.job.failures import refused_primaries
from syphon.job.finish import Drained, finish, held, unknown_destinations
from syphon.job.journal import new_journal_id, open_journal, remove_journal
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan import Listed, WaveMark, check_selection, list_primaries, plan_snapshot
from syphon.job.repair import check_repair
from syphon.job.replay import LeftBehind, left_behind
from syphon.job.request import RunRequest
from syphon.job.sources import RunSource
from syphon.job.stages import JOURNAL_PREFIX, discover, probe, recover, resumed_plan, send, settle
from syphon.job.waves import Wave, one_wave, read_waves
from syphon.obs import failpoints, progress
from syphon.obs.logs import run_context
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.sending import Destination, refused_credentials
from syphon.store.lease import Lease, LeaseState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def run(ctx: RunContext, request: RunRequest) -> RunResult:
    """Runs every stage (see the module docstring) of ``request``: a new run, or with
    ``request.resume`` the replay and settle of a planned run. Errors end the run as
    ``failed`` in the ledger and in the result, never as an exception.

    Raises:
        SyphonError: a resumed run that the ledger never saw planned.
    """
    if request.resume:
        return _resume(ctx, request)
    with run_context(request.run_id):  # every record of the run carries its id
        repair = tuple(request.repair.describe()) if request.repair else ()
        ledger = Ledger(ctx, request.run_id, request.started, request.source.name, repair)
        try:
            discovered = discover(ctx, request)
        except Exception as exc:
            return ledger.failed(exc, request.source.access)
        ledger.add(discovered)
        ledger.unread = discovered.unread
        try:
            if discovered.empty:
                return ledger.result(Status.EMPTY)
            refused = _refused_primary(ctx, request.source)
            if refused is not None:
                return ledger.failed(*refused)
            wave_messages = _wave_messages(ctx, request, discovered.queues)
            expected = discovered.messages  # a local session is fitted to a wave
            if expected is not None and wave_messages is not None:
                expected = min(expected, wave_messages)
            ctx.spark.fit(SessionFit(expected, waves=wave_messages is not None))
            if request.repair is not None:  # judged before any peek: a bad --set exits 2
                redrive = request.source.redrive  # (the session starts here, fitted)
                request = replace(
                    request, repair=check_repair(ctx.spark(), request.repair, redrive)
                )
            with _leased(ctx, ledger) as lease:
                if isinstance(lease, LeaseState):
                    return ledger.busy(lease, ctx.config.run.lease_seconds)
                return _drain(ctx, request, ledger, lease, discovered.queues, wave_messages)
        except Exception as exc:
            return ledger.failed(exc, request.source.access)


def _wave_messages(
    ctx: RunContext, request: RunRequest, queues: list[DiscoveredQueue]
) -> int | None:
    """The messages a wave of the run takes at most; None: one wave (logged, with why)."""
    readable = [q for q in queues if not q.empty and q.unreadable is None]
    size = ctx.config.run.wave_messages
    why = one_wave(size, request.source.kind, readable, request.source.access)
    if why is None:
        log.info("run %s drains its source in waves of at most %d messages", request.run_id, size)
        return size
    log.info("run %s drains its source in one wave: %s", request.run_id, why)
    return None


def _drain(
    ctx: RunContext,
    request: RunRequest,
    ledger: Ledger,
    lease: Lease,
    queues: list[DiscoveredQueue],
    wave_messages: int | None,
) -> RunResult:
    """The waves of a run, each planned, replayed and settled before the next is planned
    (the next is peeked meanwhile); stops at a wave's end when the request bounds the
    run."""
    spark = ctx.spark()  # its start is no stage's time
    progress.watch(spark)
    check_selection(spark, request.selection, request.source.redrive)
    ledger.add(recover(ctx, request))  # what an interrupted run journaled, before the plan
    listed = list_primaries(ctx)
    ledger.add(listed)
    drained = Drained(in_doubt=_in_doubt(ctx))
    counts = [q.message_count for q in queues if q.unreadable is None]
    expected = None if None in counts else sum(c or 0 for c in counts)
    waves = read_waves(
        spark,
        request.source.access,
        queues,
        wave_messages,
        ctx.config.backlog.split_messages,
        request.started,
        request.max_waves,
        ctx.config.run.messages_per_task,
    )
    for wave in waves:
        _wave(ctx, request, ledger, lease, wave, listed, drained, many=wave_messages is not None)
        _progress(request, wave, drained, expected)
        if drained.ended_by_fault or wave.last:
            break
        drained.stopped = _stop(request, wave.number)
        if drained.stopped:
            log.info("run %s: %s", request.run_id, drained.stopped)
            break
    refused = refused_primaries(drained.skipped, ctx.namespaces.primaries)
    return finish(ledger, drained, refused)


def _wave(
    ctx: RunContext,
    request: RunRequest,
    ledger: Ledger,
    lease: Lease,
    wave: Wave,
    listed: Listed,
    drained: Drained,
    many: bool,
) -> None:
    """One wave: plan, probe, replay and settle (``many``: one of several waves, its
    rows in the ledger name it)."""
    if wave.number > 1:
        _release_earlier_waves(ctx)
    if many:
        ledger.wave, ledger.watermark = wave.number, wave.watermark
        progress.step(f"wave {wave.number}: planning")
    mark = WaveMark(wave.number, wave.watermark, datetime.now(timezone.utc)) if many else None
    wave.operations.snapshot_queues_peeked = wave.queues
    wave.operations.snapshot_messages_peeked = wave.peeked
    planned = plan_snapshot(ctx, request, wave.snapshot, listed, mark, wave, wave.messages)
    ledger.add(planned)
    for verdict, n in planned.counts.items():
        ledger.counts[verdict] = ledger.counts.get(verdict, 0) + n
    drained.planned += sum(planned.counts.values())
    failpoints.check("after_plan")
    _replay_and_settle(
        ctx,
        request,
        ledger,
        lease,
        planned.rows,
        planned.snapshot,
        None,
        drained,
        planned.counts,
        more=not wave.last,
        unknown=planned.unknown,
        sending_to=planned.sending_to,
    )


def _release_earlier_waves(ctx: RunContext) -> None:
    """Lets Spark drop what earlier waves checkpointed: their frames are unreferenced
    once a wave is done, and Spark removes an RDD's blocks when the JVM collects it. Left
    to itself the JVM collects when its heap fills, and a run in waves keeps its heap
    close to what it holds (syphon.app.spark.WAVE_JAVA_OPTIONS): a full collection
    between waves (a fraction of a second) lets it give the last wave's memory back."""
    import gc

    gc.collect()  # the Python proxies, whose release lets the JVM collect the frames
    spark = ctx.spark()
    if is_connect(spark):  # the server releases what a client's plans no longer name
        return
    jvm = spark.sparkContext._jvm
    if jvm is not None:
        jvm.System.gc()


def _stop(request: RunRequest, waves: int) -> str | None:
    """Why the run takes no more waves after ``waves`` of them (None: it goes on)."""
    if request.max_waves is not None and waves >= request.max_waves:
        return f"stopped after {waves} waves (--max-waves): the rest is the next run's"
    if request.until is not None and datetime.now(timezone.utc) >= request.until:
        return (
            f"stopped after {waves} waves at {request.until:%Y-%m-%d %H:%M:%S} UTC "
            "(--until): the rest is the next run's"
        )
    return None


def _progress(request: RunRequest, wave: Wave, drained: Drained, expected: int | None) -> None:
    """One line per wave on the terminal and in the log (the JSON log: one record with
    the figures). ``expected``: the messages the discovery counted (None: unknown, a
    discovery by probing)."""
    left = None if expected is None else max(0, expected - drained.planned)
    cut = f"{wave.watermark:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC" if wave.watermark else "end"
    rest = "what is left is unknown" if left is None else f"about {left} left"
    line = (
        f"wave {wave.number}: watermark {cut}; {drained.planned} messages planned, "
        f"{drained.home} home so far; {rest}"
    )
    progress.step(line)
    log.info(
        "run %s %s",
        request.run_id,
        line,
        extra={
            "fields": {
                "wave": {
                    "number": wave.number,
                    "watermark": wave.watermark.isoformat() if wave.watermark else None,
                    "planned": drained.planned,
                    "home": drained.home,
                    "left_estimate": left,
                }
            }
        },
    )


def _resume(ctx: RunContext, request: RunRequest) -> RunResult:
    """Resumes a planned run: peeks its queues again, sends what its plan says and no
    earlier attempt of the run recorded as sent, then settles."""
    mine = [r for r in ctx.store.runs() if r.run_id == request.run_id]
    if not any(r.status == Status.PLANNED for r in mine):
        raise SyphonError(f"run {request.run_id} was never planned in {ctx.store.where}")
    with run_context(request.run_id):
        started = min(r.started_at for r in mine)
        # the repair its plan recorded, judged again: the replay computes it anew
        repair = next((r.repair for r in mine if r.status == Status.PLANNED), ())
        ledger = Ledger(ctx, request.run_id, started, request.source.name, repair)
        try:
            refused = _refused_primary(ctx, request.source)
            if refused is not None:
                return ledger.failed(*refused)
            with _leased(ctx, ledger) as lease:
                if isinstance(lease, LeaseState):
                    return ledger.busy(lease, ctx.config.run.lease_seconds)
                ledger.add(recover(ctx, request))
                recorded = Repair.from_described(list(repair))
                redrive = request.source.redrive
                request = replace(request, repair=check_repair(ctx.spark(), recorded, redrive))
                resumed = resumed_plan(ctx, request)
                ledger.counts = resumed.counts
                drained = Drained(in_doubt=_in_doubt(ctx))
                _replay_and_settle(
                    ctx,
                    request,
                    ledger,
                    lease,
                    resumed.rows,
                    resumed.snapshot,
                    resumed.earlier,
                    drained,
                    resumed.counts,
                )
                return finish(
                    ledger, drained, refused_primaries(drained.skipped, ctx.namespaces.primaries)
                )
        except Exception as exc:
            return ledger.failed(exc, request.source.access)


def _refused_primary(ctx: RunContext, source: RunSource) -> tuple[BaseException, Access] | None:
    """The error of the first primary the source sends to that refuses the credentials,
    with that primary; checked before the lease and Spark, as the secondary's are by the
    discovery: a wrong key is found in a second, not after the whole snapshot."""
    return refused_credentials([ctx.namespaces.primaries[n] for n in source.sends_to(ctx)])


@contextlib.contextmanager
def _leased(ctx: RunContext, ledger: Ledger) -> Iterator[Lease | LeaseState]:
    """The run's lease, renewed in the background and released at the end; the lease's
    state (who holds it, until when) when another run holds it."""
    lease = ctx.store.lease(ledger.run_id, timedelta(seconds=ctx.config.run.lease_seconds))
    state = lease.acquire()
    if not state.held_by(lease.holder, datetime.now(timezone.utc)):
        yield state
        return
    lease.start_heartbeat()
    failpoints.check("after_lease")
    try:
        yield lease
    finally:
        lease.release()


def _in_doubt(ctx: RunContext) -> DataFrame | None:
    """The messages earlier runs left in doubt, read once per run, before its first wave
    records ``replaying`` (which would make the run itself look cut off): a wave of this
    run that leaves a message in doubt leaves it in the backlog, where no later wave of
    the run reads it."""
    doubt = ctx.store.in_doubt()
    return None if doubt is None else doubt.localCheckpoint(eager=True)


def _replay_and_settle(
    ctx: RunContext,
    request: RunRequest,
    ledger: Ledger,
    lease: Lease,
    rows: DataFrame,
    snapshot: DataFrame,
    earlier: DataFrame | None,
    drained: Drained,
    counts: Mapping[str, int],
    more: bool = False,
    unknown: frozenset[Destination] | None = None,
    sending_to: frozenset[Destination] | None = None,
) -> None:
    """The replay and the settle of a planned wave: its plan ``rows`` (``counts``: how
    many of each verdict, which size the tasks), the ``snapshot`` that holds their
    bytes, and what an earlier attempt of the run recorded as replayed (``earlier``,
    None: nothing); what it did is added to ``drained``, whose skipped
    destinations and broken lanes it holds back (and, when ``more`` waves may follow,
    adds to). ``unknown``, ``sending_to``: the destinations the plan found no entity
    for and those it replays to (None: read from ``rows``)."""
    probed = probe(ctx, request, rows, earlier, known=drained.skipped, sending_to=sending_to)
    ledger.add(probed)
    drained.skipped.update(probed.skipped)
    journal_id = new_journal_id()
    open_journal(ctx.store.files, request.run_id, journal_id)
    lease.check()
    ledger.record(Status.REPLAYING, detail=JOURNAL_PREFIX + journal_id)
    failpoints.check("after_replaying")
    sent = send(
        ctx,
        request,
        rows,
        snapshot,
        probed.todo,
        drained.skipped,
        drained.broken,
        drained.in_doubt,
        journal_id,
        counts.get(Verdict.REPLAY, 0),
    )
    ledger.add(sent)
    failpoints.check("after_replay_commit")
    ledger.record(Status.REPLAYED)
    remove_journal(ctx.store.files, request.run_id)  # the outcomes are committed
    failpoints.check("after_replayed")

    lease.check()  # a run that lost its lease settles nothing: the holder will
    columns = ["backlog_queue", "sequence_number", "outcome"]
    all_sent = sent.results
    if earlier is not None:
        all_sent = earlier.select(*columns).unionByName(sent.results.select(*columns))
    settled = settle(ctx, request, rows, all_sent, sum(counts.values()))
    ledger.add(settled)
    failpoints.check("after_settle_commit")
    left = left_behind(sent.results, rows) if more else LeftBehind()
    drained.add_wave(
        sent.tally,
        settled.tally,
        left,
        held(ctx, request, settled.results, rows),
        set(unknown) if unknown is not None else unknown_destinations(rows),
    )
