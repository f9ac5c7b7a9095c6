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
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from syphon.core.errors import SyphonError
from syphon.core.repair import Repair
from syphon.core.schema import Status
from syphon.core.sessions import SessionFit, is_connect
from syphon.job.context import RunContext, keep_on_disk
from syphon.job.finish import Drained
from syphon.job.held import HeldSource
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan import Listed, WaveMark, check_selection, list_primaries, plan_snapshot
from syphon.job.reading import READ_ONCE, Peeking, Reading, Receiving, peeks_instead
from syphon.job.repair import check_repair
from syphon.job.request import RunRequest
from syphon.job.runner import WaveRunner
from syphon.job.settle_journal import recover_settles, settles_pending
from syphon.job.sources import RunSource
from syphon.job.stages import Discovered, discover, recover, resumed_plan
from syphon.job.waves import Wave, one_wave, read_waves
from syphon.job.where import in_driver
from syphon.obs import failpoints, progress
from syphon.obs.logs import run_context
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.sending import refused_credentials
from syphon.store.lease import Lease, LeaseState

log = logging.getLogger(__name__)

#: What a run does once it holds its lease: its waves, handed to the run's runner.
Waves = Callable[[WaveRunner], None]


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
        ledger = Ledger(
            ctx, request.run_id, request.started, request.source.name, repair, request.job_run_id
        )
        try:
            discovered = discover(ctx, request)
            ledger.add(discovered)
            ledger.unread = discovered.unread
            if discovered.empty:
                if not settles_pending(ctx.store.files):
                    return ledger.result(Status.EMPTY)
                # an interrupted settle removed messages it never recorded: the run
                # records them under the lease, and reads nothing
                return _leased_run(ctx, request, ledger, lambda runner: None)
            wave_messages = _wave_messages(ctx, request, discovered.queues)
            ctx.spark.fit(_fit(discovered, wave_messages))  # before anything starts it

            def waves(runner: WaveRunner) -> None:
                _drain(runner, discovered.queues, wave_messages)

            return _leased_run(ctx, request, ledger, waves)
        except Exception as exc:
            return ledger.failed(exc, request.source.access)


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
        ledger = Ledger(
            ctx, request.run_id, started, request.source.name, repair, request.job_run_id
        )
        try:
            request = replace(request, repair=Repair.from_described(list(repair)))
            return _leased_run(ctx, request, ledger, _take_up)
        except Exception as exc:
            return ledger.failed(exc, request.source.access)


def _leased_run(ctx: RunContext, request: RunRequest, ledger: Ledger, waves: Waves) -> RunResult:
    """What a new run and a resumed one share: the primaries' credentials checked, the
    lease taken (a run that finds it held records ``busy``), the selection and the
    repair judged before anything is peeked, the interrupted runs' journals recovered
    before anything is planned; then the ``waves``, and the final status."""
    refused = _refused_primary(ctx, request.source)
    if refused is not None:
        return ledger.failed(*refused)
    with _leased(ctx, ledger) as lease:
        if isinstance(lease, LeaseState):
            return ledger.busy(lease, ctx.config.run.lease_seconds)
        spark = ctx.spark()  # its start is no stage's time
        progress.watch(spark)
        in_driver(ctx)  # where the Service Bus I/O runs: decided before anything is read
        redrive = request.source.redrive
        check_selection(spark, request.selection, redrive)
        # judged before any peek: a bad --set exits 2
        request = replace(request, repair=check_repair(spark, request.repair, redrive))
        ledger.add(recover(ctx, request))  # what an interrupted run journaled
        ledger.add(recover_settles(ctx, request.source.access))
        runner = WaveRunner(ctx, request, ledger, lease)
        waves(runner)
        return runner.finish()


def _take_up(runner: WaveRunner) -> None:
    """A resumed run's one wave: its plan read back and its queues peeked again."""
    resumed = resumed_plan(runner.ctx, runner.request)
    runner.replay_and_settle(runner.resumed(resumed.wave))


def _fit(discovered: Discovered, wave_messages: int | None) -> SessionFit:
    """What the run's session is fitted to: a wave's messages, at most, and about what
    they take (the source's bytes in the share of its messages a wave reads)."""
    total, size = discovered.messages, discovered.size_bytes
    expected = total
    if expected is not None and wave_messages is not None:
        expected = min(expected, wave_messages)
    wave_bytes = None
    if size is not None and total and expected is not None:
        wave_bytes = -(-size * expected // total)
    return SessionFit(expected, waves=wave_messages is not None, wave_bytes=wave_bytes)


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


def _drain(runner: WaveRunner, queues: list[DiscoveredQueue], wave_messages: int | None) -> None:
    """The waves of a new run, each planned, replayed and settled before the next is
    planned (the next is read meanwhile); stops at a wave's end when the request bounds
    the run. The source is peeked, or read once under lock (``run.read: once``) by
    receivers that live as long as the run."""
    ctx, request = runner.ctx, runner.request
    listed = list_primaries(ctx)
    runner.ledger.add(listed)
    keep_on_disk(ctx.spark(), wave_messages is not None)
    why_not = peeks_instead(ctx, request)
    if why_not is not None:
        reading: Reading = Peeking(
            ctx.spark(),
            request.source.access,
            ctx.config.backlog.split_messages,
            ctx.config.run.messages_per_task,
            in_driver(ctx),
        )
        if ctx.config.run.read == READ_ONCE:
            log.info("run %s peeks its source: %s", request.run_id, why_not)
        _waves(runner, reading, queues, wave_messages, listed)
        return
    readable = [q for q in queues if not q.empty and q.unreadable is None]
    counts = {q.path: q.message_count for q in readable}
    access = request.source.access
    with HeldSource(access, list(counts), counts, before=request.started) as held:
        runner.held = held
        try:
            _waves(runner, Receiving(ctx.spark(), held), queues, wave_messages, listed)
        finally:
            runner.held = None
        _not_handed_out(runner, held)
    runner.read_closed(held)


def _not_handed_out(runner: WaveRunner, held: HeldSource) -> None:
    """Names, as not read (the run ends partial), each queue that handed out fewer
    messages than it held when the run found it, beyond those the gap check found locked
    by another receiver (their keys were held back, and the partial line names them):
    they expired, or were removed, while the run read."""
    for path, missing in sorted(held.short.items()):
        missing -= len(held.unseen.get(path, {}))
        if missing > 0:
            runner.ledger.unread[path] = (
                f"{missing} of its messages were not handed out: locked by another "
                "receiver that let them go before the run looked, or expired"
            )


def _waves(
    runner: WaveRunner,
    reading: Reading,
    queues: list[DiscoveredQueue],
    wave_messages: int | None,
    listed: Listed,
) -> None:
    """Each wave read through ``reading``, then planned, replayed and settled."""
    request, drained = runner.request, runner.drained
    counts = [q.message_count for q in queues if q.unreadable is None]
    expected = None if None in counts else sum(c or 0 for c in counts)
    waves = read_waves(reading, queues, wave_messages, request.started, request.max_waves)
    for wave in waves:
        _wave(runner, wave, listed, many=wave_messages is not None)
        _progress(request, wave, drained, expected)
        if drained.ended_by_fault or wave.last:
            break
        drained.stopped = _stop(request, wave.number)
        if drained.stopped:
            log.info("run %s: %s", request.run_id, drained.stopped)
            break


def _wave(runner: WaveRunner, wave: Wave, listed: Listed, many: bool) -> None:
    """One wave: plan, probe, replay and settle (``many``: one of several waves, its
    rows in the ledger name it)."""
    ctx, request = runner.ctx, runner.request
    if wave.number > 1:
        _release_earlier_waves(ctx)
    if many:
        runner.ledger.wave, runner.ledger.watermark = wave.number, wave.watermark
        progress.step(f"wave {wave.number}: planning")
    mark = WaveMark(wave.number, wave.watermark, datetime.now(timezone.utc)) if many else None
    wave.operations.snapshot_queues_peeked = wave.queues
    if runner.held is not None:  # read once: received, not peeked
        wave.operations.snapshot_messages_peeked = 0
        wave.operations.snapshot_messages_received = wave.peeked
    else:
        wave.operations.snapshot_messages_peeked = wave.peeked
    planned = plan_snapshot(ctx, request, wave.snapshot, listed, mark, wave, wave.messages)
    planned_wave = runner.planned(planned, more=not wave.last)
    if runner.held is not None:  # before anything of the wave is sent
        runner.hold_unseen(listed)
    failpoints.check("after_plan")
    runner.replay_and_settle(planned_wave)


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
