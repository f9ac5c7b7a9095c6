"""``syphon run`` and ``syphon replay``: the wave loop, in the order that keeps
messages safe.

1. discover the source's queues; when every one is empty, record an ``empty`` run and
   stop — no Spark session is started;
2. take the lease (a run that finds another holding it records ``busy`` and stops); it is renewed
   in the background for the whole run; the Spark session starts in the background
   while the run opens its queues and lists the primaries (what needs no Spark), and
   the first thing that needs it waits for it;
3. list the primaries' entities once; then, wave after wave (:mod:`syphon.job.read.waves`:
   the messages enqueued before the wave's watermark, at most ``run.wave_messages``;
   one wave for sources that cannot be cut by time, or with ``run.wave_messages: 0``):

   a. plan (reconcile → audit, a ``planned`` row naming the wave and its watermark);
   b. probe the destinations no earlier wave probed;
   c. record ``replaying``, then send, each transfer journaled as it starts and ends
      (:mod:`syphon.job.replay.journal`); the outcomes are committed to the audit in one
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
from syphon.core.sessions import SessionFit
from syphon.job.context import RunContext
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan.planning import check_selection
from syphon.job.read.modes import Reading, reading_for
from syphon.job.read.reader import WaveReader
from syphon.job.read.wave_sizes import one_wave
from syphon.job.repair import check_repair
from syphon.job.request import RunRequest
from syphon.job.run.runner import WaveRunner
from syphon.job.run.stages import Discovered, discover, recover, resumed_plan
from syphon.job.settle.journal import recover_settles, settles_pending
from syphon.job.sources import RunSource
from syphon.job.where import check_before_reading
from syphon.obs import failpoints
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
            ledger.add(discovered, unread=discovered.unread)
            reading = reading_for(ctx, request, discovered.queues)
            if discovered.empty:
                if not settles_pending(ctx.store.files):
                    return ledger.result(Status.EMPTY)
                # an interrupted settle removed messages it never recorded: the run
                # records them under the lease, and reads nothing
                return _leased_run(ctx, request, ledger, reading, lambda runner: None)
            wave_messages = _wave_messages(ctx, request, discovered.queues)
            signs_in = [request.source.access, *ctx.namespaces.primaries.values()]
            fit = _fit(discovered, wave_messages, any(a.uses_azure_ad for a in signs_in))
            ctx.spark.fit(fit)  # before anything starts it

            def waves(runner: WaveRunner) -> None:
                _waves(runner, discovered.queues, wave_messages)

            return _leased_run(ctx, request, ledger, reading, waves)
        except Exception as exc:
            return ledger.failed(exc, request.source.access)


def _resume(ctx: RunContext, request: RunRequest) -> RunResult:
    """Resumes a planned run: reads its queues again, sends what its plan says and no
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
            reading = reading_for(ctx, request, [])
            return _leased_run(ctx, request, ledger, reading, _take_up)
        except Exception as exc:
            return ledger.failed(exc, request.source.access)


def _leased_run(
    ctx: RunContext, request: RunRequest, ledger: Ledger, reading: Reading, waves: Waves
) -> RunResult:
    """What a new run and a resumed one share: the primaries' credentials checked, the
    lease taken (a run that finds another holding it records ``busy``), the selection
    and the repair judged before anything is read, the interrupted runs' journals
    recovered before anything is planned; then the ``waves``, read through ``reading``
    (open for all of them), and the final status."""
    refused = _refused_primary(ctx, request.source)
    if refused is not None:
        return ledger.failed(*refused)
    with _leased(ctx, ledger) as lease:
        if isinstance(lease, LeaseState):
            return ledger.busy(lease, ctx.config.run.lease_seconds)
        # its start is no stage's time: the run goes on with what needs no Spark (its
        # queues opened, the primaries listed) until a stage asks for it
        ctx.spark.start_soon()
        check_before_reading(ctx)  # a task that cannot reach a namespace exits 2
        if request.selection is not None or request.repair is not None:
            # judged before anything is read: a bad --where or --set exits 2
            spark, redrive = ctx.spark(), request.source.redrive
            check_selection(spark, request.selection, redrive)
            request = replace(request, repair=check_repair(spark, request.repair, redrive))
        ledger.add(recover(ctx, request))  # what an interrupted run journaled
        ledger.add(recover_settles(ctx, request.source.access))
        runner = WaveRunner(ctx, request, ledger, lease, reading)
        with reading:
            waves(runner)
        return runner.finish()


def _take_up(runner: WaveRunner) -> None:
    """A resumed run's one wave: its plan read back and its queues read again."""
    resumed = resumed_plan(runner.ctx, runner.request, runner.reading)
    runner.resumed(resumed.wave)


def _fit(discovered: Discovered, wave_messages: int | None, azure_ad: bool) -> SessionFit:
    """What the run's session is fitted to: a wave's messages, at most, about what they
    take (the source's bytes in the share of its messages a wave reads), and whether its
    namespaces sign in with ``azure_ad``."""
    total, size = discovered.messages, discovered.size_bytes
    expected = total
    if expected is not None and wave_messages is not None:
        expected = min(expected, wave_messages)
    wave_bytes = None
    if size is not None and total and expected is not None:
        wave_bytes = -(-size * expected // total)
    waves = wave_messages is not None
    return SessionFit(expected, waves=waves, wave_bytes=wave_bytes, azure_ad=azure_ad)


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


def _waves(runner: WaveRunner, queues: list[DiscoveredQueue], wave_messages: int | None) -> None:
    """The waves of a new run, each planned, replayed and settled before the next is
    planned (the next is read meanwhile, through the runner's read); stops at a wave's
    end when the request bounds the run."""
    request = runner.request
    listed = runner.list_primaries()
    # the session, starting since the lease was taken: its start is no stage's time, and
    # no read locks a message before it is up (a session that cannot start ends the run
    # with nothing received)
    runner.ctx.spark()
    counts = [q.message_count for q in queues if q.unreadable is None]
    expected = None if None in counts else sum(c or 0 for c in counts)
    reader = WaveReader(runner.reading, queues, wave_messages, request.started, request.max_waves)
    with reader:
        while (wave := reader.next_wave()) is not None:
            runner.take(wave, reader, listed, expected)
            if runner.ended_by_fault or wave.last:
                break
            stopped = _stop(request, wave.number)
            if stopped:
                runner.stop(stopped)
                break


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
    if not state.belongs_to(lease.holder, datetime.now(timezone.utc)):
        yield state
        return
    lease.start_heartbeat()
    failpoints.check("after_lease")
    try:
        yield lease
    finally:
        lease.release()
