"""The replay and the settle of a run's planned waves, under its lease: one
:class:`WaveRunner` per run owns the ledger, the lease and the running totals, and takes
each wave as a :class:`~syphon.job.planned.PlannedWave`, a new plan's or a resumed one's
alike (:mod:`syphon.job.run` is the loop that hands them over)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from syphon.core.ledger import Operations
from syphon.core.schema import Detail, Status
from syphon.job.context import RunContext, keep
from syphon.job.failures import refused_primaries
from syphon.job.finish import Drained, ReadLocks, finish, held, unknown_destinations
from syphon.job.held import HeldSource
from syphon.job.journal import new_journal_id, open_journal, remove_journal
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan import Listed, PlanResult
from syphon.job.planned import HeldBack, PlannedWave
from syphon.job.replay import LeftBehind, left_behind
from syphon.job.request import RunRequest, StageResult
from syphon.job.stages import JOURNAL_PREFIX, Sent, probe, send, settle
from syphon.job.unseen import unseen_lanes
from syphon.obs import failpoints
from syphon.store.lease import Lease

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: What the settle reads of every attempt's replay rows.
_SENT_COLUMNS = ("backlog_queue", "sequence_number", "outcome")


class WaveRunner:
    """Replays and settles a run's waves one after the other, recording each stage in
    the ``ledger`` and checking the ``lease`` before each wave's replay and settle (a
    run that lost it settles nothing: the new holder will). Made once the lease is held
    and the interrupted runs' journals are recovered: it reads what earlier runs left
    in doubt then, before its first wave records ``replaying``."""

    def __init__(self, ctx: RunContext, request: RunRequest, ledger: Ledger, lease: Lease) -> None:
        self.ctx = ctx
        self.request = request
        self.ledger = ledger
        self.lease = lease
        self.drained = Drained(in_doubt=_in_doubt(ctx))
        #: what the run's reads hold locked when it reads its source once (None: peeked)
        self.held: HeldSource | None = None

    def planned(self, plan: PlanResult, more: bool) -> PlannedWave:
        """Adds a new plan's counts to the run's, as a wave (``more``: waves may follow)."""
        self.ledger.add(plan)
        for verdict, n in plan.counts.items():
            self.ledger.counts[verdict] = self.ledger.counts.get(verdict, 0) + n
        self.drained.planned += sum(plan.counts.values())
        return PlannedWave(
            plan.rows,
            plan.messages,
            plan.counts,
            more=more,
            unknown=plan.unknown,
            sending_to=plan.sending_to,
        )

    def hold_unseen(self, listed: Listed) -> None:
        """Holds back, for the rest of the run, the keys of the messages the run's read
        found and could not receive (another receiver holds them locked; see
        :mod:`syphon.job.held`), those found since the last call: every message the
        run read up to its latest wave is checked by then."""
        assert self.held is not None
        new = self.held.take_unseen()
        if not new:
            return
        lanes = unseen_lanes(self.ctx, self.request, listed, new)
        log.warning(
            "run %s holds back %d keys: %d of their messages are locked by another receiver",
            self.request.run_id,
            len(lanes),
            len(new),
        )
        self.drained.hold_back(lanes, Detail.EARLIER_MESSAGE_UNSEEN)

    def read_closed(self, held: HeldSource) -> None:
        """Adds what the run's read once did beyond its waves' counts, once it gave back
        what it held: every message the queues handed out (those received again after a
        lapse, or read ahead of a wave that never ran, included), the gap check's peeks,
        the give-backs; and what it could not see or keep."""
        counted = self.ledger.operations.snapshot_messages_received or 0
        ops = Operations(
            snapshot_messages_received=held.received - counted,
            snapshot_messages_peeked=held.peeked,
            settle_abandons=held.given_back,
            settle_requests=held.give_back_requests,
        )
        self.ledger.add(StageResult(operations=ops))
        known = [q.lock_seconds for q in held.queues.values() if q.lock_seconds]
        self.drained.locks = ReadLocks(
            unseen={p: len(m) for p, m in held.unseen.items() if m},
            lost=held.lost,
            renewals_failed=held.renewals_failed,
            lock_seconds=min(known) if known else None,
        )

    def resumed(self, wave: PlannedWave) -> PlannedWave:
        """A resumed run's one wave: its plan's counts are the run's."""
        self.ledger.counts = dict(wave.counts)
        return wave

    def replay_and_settle(self, wave: PlannedWave) -> None:
        """Probes the wave's destinations, sends it, settles it, and adds what it did to
        the run's totals (what it left unsent is held back by the later waves)."""
        sent = self._replay(wave)
        self.lease.check()  # a run that lost its lease settles nothing: the holder will
        all_sent = sent.results
        if wave.earlier is not None:
            mine = sent.results.select(*_SENT_COLUMNS)
            all_sent = wave.earlier.select(*_SENT_COLUMNS).unionByName(mine)
        settled = settle(self.ctx, self.request, wave, all_sent, self.held)
        self.ledger.add(settled)
        failpoints.check("after_settle_commit")
        left = left_behind(sent.results, wave.rows) if wave.more else LeftBehind()
        self.drained.add_wave(
            sent.tally,
            settled.tally,
            left,
            held(self.ctx, self.request, settled.results, wave.rows),
            set(wave.unknown) if wave.unknown is not None else unknown_destinations(wave.rows),
        )

    def _replay(self, wave: PlannedWave) -> Sent:
        """Probes, records ``replaying`` with the wave's journal, sends and commits the
        outcomes, then records ``replayed`` and removes the journal."""
        ctx, run_id, drained = self.ctx, self.request.run_id, self.drained
        probed = probe(ctx, wave, known=drained.skipped)
        self.ledger.add(probed)
        drained.skipped.update(probed.skipped)
        journal_id = new_journal_id()
        open_journal(ctx.store.files, run_id, journal_id)
        self.lease.check()
        self.ledger.record(Status.REPLAYING, detail=JOURNAL_PREFIX + journal_id)
        failpoints.check("after_replaying")
        back = HeldBack(drained.skipped, drained.broken, drained.in_doubt)
        sent = send(ctx, self.request, wave, probed.todo, back, journal_id)
        self.ledger.add(sent)
        failpoints.check("after_replay_commit")
        self.ledger.record(Status.REPLAYED)
        remove_journal(ctx.store.files, run_id)  # the outcomes are committed
        failpoints.check("after_replayed")
        return sent

    def finish(self) -> RunResult:
        """Records the run's final status from what its waves did."""
        refused = refused_primaries(self.drained.skipped, self.ctx.namespaces.primaries)
        return finish(self.ledger, self.drained, refused)


def _in_doubt(ctx: RunContext) -> DataFrame | None:
    """The messages earlier runs left in doubt, read once per run, before its first wave
    records ``replaying`` (which would make the run itself look cut off): a wave of this
    run that leaves a message in doubt leaves it in the backlog, where no later wave of
    the run reads it."""
    doubt = ctx.store.in_doubt()
    return None if doubt is None else keep(doubt)
