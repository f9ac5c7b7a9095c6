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
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from syphon.core.errors import SyphonError
from syphon.core.schema import Detail, Outcome, Status, Verdict
from syphon.job.context import RunContext
from syphon.job.failures import Failure, missing_destinations, refused_primaries
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan import plan
from syphon.job.request import RunRequest
from syphon.job.sources import RunSource
from syphon.job.stages import discover, probe, resumed_plan, send, settle
from syphon.job.tally import Tally
from syphon.obs import failpoints
from syphon.obs.logs import run_context
from syphon.servicebus.access import Access
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.sending import Destination, refused_credentials
from syphon.store import queries
from syphon.store.lease import Lease, LeaseState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def run(ctx: RunContext, request: RunRequest) -> RunResult:
    """Runs every stage (see the module docstring) of ``request``: a new run, or with
    ``request.resume`` the replay and settle of a planned one. Errors end the run as
    ``failed`` in the ledger and in the result, never as an exception.

    Raises:
        SyphonError: a resumed run that the ledger never saw planned.
    """
    if request.resume:
        return _resume(ctx, request)
    with run_context(request.run_id):  # every record of the run carries its id
        ledger = Ledger(ctx, request.run_id, request.started, request.source.name)
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
            if discovered.messages is not None:  # a local session is fitted to it
                ctx.spark.expected_messages = discovered.messages
            with _leased(ctx, ledger) as lease:
                if isinstance(lease, LeaseState):
                    return ledger.busy(lease, ctx.config.run.lease_seconds)
                planned = plan(ctx, request, discovered.queues)
                ledger.counts = dict(planned.counts)
                planned.timings.discover = ledger.timings.discover
                ledger.timings, ledger.operations = planned.timings, planned.operations
                failpoints.check("after_plan")
                return _replay_and_settle(
                    ctx, request, ledger, lease, planned.rows, planned.snapshot
                )
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
        ledger = Ledger(ctx, request.run_id, started, request.source.name)
        try:
            refused = _refused_primary(ctx, request.source)
            if refused is not None:
                return ledger.failed(*refused)
            with _leased(ctx, ledger) as lease:
                if isinstance(lease, LeaseState):
                    return ledger.busy(lease, ctx.config.run.lease_seconds)
                resumed = resumed_plan(ctx, request)
                ledger.counts = resumed.counts
                return _replay_and_settle(
                    ctx, request, ledger, lease, resumed.rows, resumed.snapshot, resumed.earlier
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


def _replay_and_settle(
    ctx: RunContext,
    request: RunRequest,
    ledger: Ledger,
    lease: Lease,
    rows: DataFrame,
    snapshot: DataFrame,
    earlier: DataFrame | None = None,
) -> RunResult:
    """The replay and the settle of a planned run: its plan ``rows``, the ``snapshot``
    that holds their bytes, and what an earlier attempt of the run recorded as replayed
    (``earlier``, None: nothing)."""
    probed = probe(ctx, request, rows, earlier)
    ledger.add(probed)
    in_doubt = ctx.store.in_doubt()  # read before this attempt records "replaying"
    lease.check()
    ledger.record(Status.REPLAYING)
    failpoints.check("after_replaying")
    sent = send(ctx, request, rows, snapshot, probed, in_doubt)
    ledger.add(sent)
    failpoints.check("after_replay_commit")
    ledger.record(Status.REPLAYED)
    failpoints.check("after_replayed")

    lease.check()  # a run that lost its lease settles nothing: the holder will
    columns = ["backlog_queue", "sequence_number", "outcome"]
    all_sent = sent.results
    if earlier is not None:
        all_sent = earlier.select(*columns).unionByName(sent.results.select(*columns))
    settled = settle(ctx, request, rows, all_sent)
    ledger.add(settled)
    failpoints.check("after_settle_commit")
    refused = refused_primaries(probed.skipped, ctx.namespaces.primaries)
    held = _held(ctx, request, settled.results, rows)
    unknown = _unknown_destinations(rows)
    return _finish(ledger, unknown, probed.skipped, sent.tally, settled.tally, refused, held)


def _held(ctx: RunContext, request: RunRequest, settled: DataFrame, rows: DataFrame) -> Held:
    """The dead letters the run left waiting for the operator, and how many of them an
    earlier run left waiting too (none for a source that reads no dead-letter queue)."""
    if not request.source.reads_dead_letters:
        return Held(0, 0)
    held = queries.held_dead_letters(settled, rows).localCheckpoint(eager=True)
    now = held.count()
    return Held(now, ctx.store.held_before(held, request.run_id).count() if now else 0)


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
