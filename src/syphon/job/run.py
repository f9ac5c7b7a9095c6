"""``syphon run`` and ``syphon replay``: the stages in order.

The order is what keeps messages safe:

1. discover the backlog queues; when every one is empty, record an ``empty`` run and
   stop — no Spark session is started;
2. take the lease (a run that finds it held records ``busy`` and stops);
3. plan (snapshot → reconcile → audit, status ``planned``);
4. record ``replaying`` in the ledger, then send; the outcomes are committed to the audit
   in one append, then ``replayed`` is recorded. A crash between the two leaves the run's
   sends unknown: the next run sends those messages again and marks them
   ``resent_in_doubt``;
5. settle from the committed outcomes only (completing or dead-lettering nothing whose
   outcome is not in the audit), append the settlements, and record the final status:
   ``done`` (nothing left), ``partial`` (some messages stay for a later run) or
   ``failed`` (an error stopped the run; ``detail`` names its class).

A run that lost its lease settles nothing: the new holder will.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from syphon.core.discard import Discard
from syphon.core.errors import SyphonError
from syphon.core.naming import is_dead_letter_path
from syphon.core.schema import Detail, Outcome, Stage, Status, Verdict
from syphon.core.selection import Selection
from syphon.job.context import RunContext, fit_shuffle_partitions
from syphon.job.failures import Failure, missing_destinations, refused_primaries
from syphon.job.lanes import ReplaySettings
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan import discover, discovery_operations, new_run_id, plan, unread
from syphon.job.replay import credit_rates, replay_input, replay_messages, still_to_send
from syphon.job.restore import restore
from syphon.job.settle import settle_actions, settle_queues
from syphon.job.snapshot import read_snapshot
from syphon.job.sources import RunSource, run_source
from syphon.job.tally import Tally, tally
from syphon.obs import failpoints, progress
from syphon.obs.logs import run_context
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.sending import Destination, probe_destinations, refused_credentials
from syphon.store import queries
from syphon.store.lease import Lease, LeaseState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def run(ctx: RunContext, run_id: str | None = None, selection: Selection | None = None,
        source: RunSource | None = None, allow_resend: tuple[str, ...] = (),
        discard: Discard | None = None) -> RunResult:  # fmt: skip
    """Runs every stage (see the module docstring) on what ``selection`` takes (None:
    everything) of ``source`` (None: the config's default), sending again the MessageIds
    of ``allow_resend`` that earlier runs replayed, and removing without sending what
    ``discard`` takes. Errors end the run as ``failed`` in the ledger and in the result,
    never as an exception."""
    started = datetime.now(timezone.utc)
    run_id = run_id or new_run_id(started)
    source = source or run_source(ctx)
    with run_context(run_id):  # every record of the run carries its id
        ledger = Ledger(ctx, run_id, started, source.name)
        clock = time.monotonic()
        try:
            queues = discover(ctx, source)
        except Exception as exc:
            return ledger.failed(exc, source.access)
        ledger.timings.discover = time.monotonic() - clock
        ledger.operations = discovery_operations(ctx, queues, source)
        ledger.unread = unread(queues)
        try:
            if all(q.empty for q in queues):
                return ledger.result(Status.EMPTY)
            refused = _refused_primary(ctx, source)
            if refused is not None:
                return ledger.failed(*refused)
            counts = [q.message_count for q in queues if q.unreadable is None]
            if None not in counts:  # a local session is fitted to it
                ctx.spark.expected_messages = sum(c or 0 for c in counts)
            with _leased(ctx, ledger) as lease:
                if isinstance(lease, LeaseState):
                    return ledger.busy(lease, ctx.config.run.lease_seconds)
                planned = plan(ctx, run_id, started, queues, selection, source, allow_resend,
                               discard)  # fmt: skip
                ledger.counts = dict(planned.counts)
                planned.timings.discover = ledger.timings.discover
                ledger.timings, ledger.operations = planned.timings, planned.operations
                failpoints.check("after_plan")
                return _replay_and_settle(ctx, ledger, lease, planned.snapshot, source,
                                          planned.rows)  # fmt: skip
        except Exception as exc:
            return ledger.failed(exc, source.access)


def resume(ctx: RunContext, run_id: str, source: RunSource | None = None) -> RunResult:
    """Resumes a planned run: peeks its backlog queues again, sends what its plan says
    and no earlier attempt of the run recorded as sent, then settles.

    ``source``: the source it was planned from (None: the config's default).

    Raises:
        SyphonError: the ledger has no plan of that run.
    """
    source = source or run_source(ctx)
    mine = [r for r in ctx.store.runs() if r.run_id == run_id]
    if not any(r.status == Status.PLANNED for r in mine):
        raise SyphonError(f"run {run_id} was never planned in {ctx.store.where}")
    with run_context(run_id):
        ledger = Ledger(ctx, run_id, min(r.started_at for r in mine), source.name)
        try:
            refused = _refused_primary(ctx, source)
            if refused is not None:
                return ledger.failed(*refused)
            with _leased(ctx, ledger) as lease:
                if isinstance(lease, LeaseState):
                    return ledger.busy(lease, ctx.config.run.lease_seconds)
                return _replay_and_settle(ctx, ledger, lease, None, source)
        except Exception as exc:
            return ledger.failed(exc, source.access)


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


def _replay_and_settle(
    ctx: RunContext, ledger: Ledger, lease: Lease, snapshot: DataFrame | None, source: RunSource,
    planned: DataFrame | None = None,
) -> RunResult:  # fmt: skip
    """The replay and the settle of a planned run (``snapshot`` None: peek again), from
    its plan's audit rows: ``planned`` as the plan appended them, or read back."""
    spark = ctx.spark()
    progress.watch(spark)
    if planned is None:
        planned = ctx.store.run_rows(ledger.run_id, Stage.PLAN)
        if planned is None:
            raise SyphonError(f"no audit at {ctx.store.where}: run {ledger.run_id} has no plan")
        planned = planned.localCheckpoint(eager=True)
    earlier = None
    if snapshot is None:  # a resumed run: not sized by its plan, may have sent some, and
        # peeks its queues again
        fit_shuffle_partitions(spark, planned.count(), ctx.config.spark.conf)
        earlier = ctx.store.run_rows(ledger.run_id, Stage.REPLAY)
        if earlier is not None and earlier.limit(1).count() == 0:
            earlier = None
        found = planned.select("backlog_queue", "source").distinct().collect()
        paths = sorted({r["backlog_queue"] for r in found})
        recorded = {r["source"] for r in found} - {None}  # None: planned before sources
        other = (
            recorded != {source.name}
            if recorded
            else (any(is_dead_letter_path(p) for p in paths) != (source.kind == "dead_letter"))
        )
        if other:
            named = f" ({', '.join(sorted(recorded))})" if recorded else ""
            raise SyphonError(f"run {ledger.run_id} was planned from another source{named} "
                              f"than {source.name}: name its source with --source")  # fmt: skip
        queues = [DiscoveredQueue("", 0, p, None, False) for p in paths]
        snapshot = read_snapshot(spark, source.access, queues,
                                 ctx.config.backlog.split_messages)  # fmt: skip
    if not ledger.counts:
        ledger.counts = {r["verdict"]: int(r["count"])
                         for r in planned.groupBy("verdict").count().collect()}  # fmt: skip

    # replay
    clock = time.monotonic()
    todo = still_to_send(planned, earlier)
    destinations = sorted((r["primary"], r["destination"]) for r in
                          todo.select("primary", "destination").distinct().collect())  # fmt: skip
    progress.step(f"replay: probing {len(destinations)} destinations")
    skipped = probe_destinations(ctx.namespaces.primaries, destinations)
    ledger.operations.replay_probes = len(destinations)
    ledger.timings.replay_probes = time.monotonic() - clock
    in_doubt = ctx.store.in_doubt()  # read before this attempt records "replaying"
    lease.check()
    ledger.record(Status.REPLAYING)
    failpoints.check("after_replaying")
    sends = time.monotonic()
    progress.step("replay: sending")
    budgets = ctx.config.replay.credits_per_second
    results = replay_messages(replay_input(restore(snapshot, source.redrive), todo, in_doubt),
                              ctx.namespaces.primaries, skipped,
                              ReplaySettings(credits_per_second=budgets),
                              failpoint=failpoints.for_task("mid_replay"))  # fmt: skip
    results = results.localCheckpoint(eager=True)  # the sends happen here, exactly once
    ledger.timings.replay_sends = time.monotonic() - sends
    ledger.operations.credit_rates = credit_rates(results, planned, budgets,
                                                  ledger.timings.replay_sends)  # fmt: skip
    ctx.store.append_outcomes(results, planned, ledger.run_id, Stage.REPLAY,
                              datetime.now(timezone.utc))  # fmt: skip
    failpoints.check("after_replay_commit")
    ledger.timings.replay = time.monotonic() - clock
    replayed = tally(results, "transfers", "busy_retries")
    ledger.operations.replay_send_transfers = replayed.total("transfers")
    ledger.operations.replay_busy_retries = replayed.total("busy_retries")
    ledger.operations.replay_messages_sent = replayed.count(Outcome.SENT)
    ledger.record(Status.REPLAYED)
    failpoints.check("after_replayed")

    # settle
    lease.check()  # a run that lost its lease settles nothing: the holder will
    clock = time.monotonic()
    columns = ["backlog_queue", "sequence_number", "outcome"]
    all_sent = results if earlier is None else earlier.select(*columns).unionByName(
        results.select(*columns))  # fmt: skip
    progress.step("settle: completing and dead-lettering in the backlog queues")
    settled = settle_queues(settle_actions(planned, all_sent), source.access,
                            ledger.run_id, failpoints.for_task("mid_settle"))  # fmt: skip
    settled = settled.localCheckpoint(eager=True)
    ledger.timings.settle_passes = time.monotonic() - clock
    ctx.store.append_outcomes(settled, planned, ledger.run_id, Stage.SETTLE,
                              datetime.now(timezone.utc))  # fmt: skip
    failpoints.check("after_settle_commit")
    ledger.timings.settle = time.monotonic() - clock
    settle = tally(settled, "received", "abandoned", "requests")
    ledger.operations.settle_receives = settle.total("received")
    ledger.operations.settle_requests = settle.total("requests")
    ledger.operations.settle_completes = settle.count(Outcome.COMPLETED)
    ledger.operations.settle_dead_letters = settle.count(Outcome.DEAD_LETTERED)
    ledger.operations.settle_discards = settle.count(Outcome.DISCARDED)
    ledger.operations.settle_abandons = settle.total("abandoned")
    refused = refused_primaries(skipped, ctx.namespaces.primaries)
    held = _held(ctx, ledger.run_id, source, settled, planned)
    return _finish(ledger, _unknown_destinations(planned), skipped, replayed, settle, refused,
                   held)  # fmt: skip


def _held(ctx: RunContext, run_id: str, source: RunSource, settled: DataFrame,
          planned: DataFrame) -> Held:  # fmt: skip
    """The dead letters the run left waiting for the operator, and how many of them an
    earlier run left waiting too (none for a source that reads no dead-letter queue)."""
    if not source.reads_dead_letters:
        return Held(0, 0)
    held = queries.held_dead_letters(settled, planned).localCheckpoint(eager=True)
    now = held.count()
    return Held(now, ctx.store.held_before(held, run_id).count() if now else 0)


def _unknown_destinations(planned: DataFrame) -> list[Destination]:
    """The (primary, destination) pairs the plan found no entity for, sorted."""
    from pyspark.sql import functions as F

    unknown = planned.where((F.col("verdict") == Verdict.INVALID)
                            & (F.col("reason") == "destination_unknown"))  # fmt: skip
    pairs = unknown.select("primary", "destination").distinct().collect()
    return sorted((r["primary"], r["destination"]) for r in pairs)


@dataclass(frozen=True)
class Held:
    """Dead letters a run left waiting for the operator (a duplicate of a delivered
    message, a conflict, an invalid one): how many, and how many of them an earlier run
    left waiting too (``kept``: the operator has let them stay)."""

    now: int
    kept: int


def _finish(ledger: Ledger, unknown: list[Destination], skipped: dict[Destination, str | None],
            replayed: Tally, settle: Tally, refused: Failure | None = None,
            held: Held = Held(0, 0)) -> RunResult:  # fmt: skip
    """Records the final status: ``failed`` when a namespace failed mid-run, ``partial``
    when work is left (messages that arrived after the snapshot are the next run's work,
    those the selection left out the operator's choice, and dead letters an earlier run
    already left waiting for the operator are kept by them: none of these is a
    left-over) or a queue of the source holds messages syphon cannot read (the detail
    names them), else ``done``. ``unknown``: the destinations the plan found no
    entity for; ``skipped``: the probes' verdicts; ``refused``: the exit of a run whose
    primaries refused the credentials (before missing destinations: it blocks more)."""
    outcomes = {**{f"replay_{k}": v for k, v in replayed.by_outcome().items()},
                **{f"settle_{k}": v for k, v in settle.by_outcome().items()}}  # fmt: skip
    faults = {Detail.NAMESPACE_FAULT, *NAMESPACE_FAULTS}
    sides = [side for side, t in (("primary", replayed), ("secondary", settle))
             if t.any_detail(faults)]  # fmt: skip
    if sides:  # a namespace failed mid-run: its clients were closed, the rest waits
        return ledger.result(Status.FAILED, f"{Detail.NAMESPACE_FAULT}: " + ", ".join(sides),
                             outcomes)  # fmt: skip
    not_left_over = [Detail.ARRIVED_AFTER_SNAPSHOT, Detail.NOT_SELECTED]
    left = settle.count(Outcome.LEFT, except_details=not_left_over) - held.kept
    notes = []
    if ledger.unread:
        unread = ", ".join(f"{p} ({why})" for p, why in sorted(ledger.unread.items()))
        notes.append(f"not read: {unread}")
        log.warning("run %s: not read: %s", ledger.run_id, unread)
    if held.now:
        notes.append(
            f"{held.now} dead letters wait for the operator ({held.kept} of them since an "
            "earlier run): discard them (--discard-duplicates, syphon discard) or send "
            "them again (--allow-resend)"
        )
    detail = "; ".join(notes) or None
    status = Status.PARTIAL if left or ledger.unread else Status.DONE
    result = ledger.result(status, detail, outcomes)
    missing = sorted(k for k, reason in skipped.items() if reason == Detail.DESTINATION_MISSING)
    failure = refused or missing_destinations(unknown, missing)
    if failure is not None:
        result.code, result.fix = failure.code, failure.fix
    return result
