"""The replay and the settle of a run's planned waves, under its lease: one
:class:`WaveRunner` per run owns the ledger, the lease, the run's read and the running
totals, and takes each wave: a new one as the read hands it over (:meth:`WaveRunner.take`:
planned, then replayed and settled), or a resumed run's plan read back
(:meth:`WaveRunner.resumed`). :mod:`syphon.job.run.loop` is the loop that hands
them over, and reads the results from here."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from syphon.core.peeked import deferred
from syphon.core.schema import Detail, Status
from syphon.job.context import RunContext, keep
from syphon.job.failures import refused_primaries
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan.planned import HeldBack, PlannedWave
from syphon.job.plan.planning import Listed, PlanResult, WaveMark, list_primaries, plan_snapshot
from syphon.job.plan.unseen import unseen_lanes
from syphon.job.read.modes import Reading
from syphon.job.read.reader import WaveReader
from syphon.job.read.waves import Wave
from syphon.job.replay.journal import new_journal_id, open_journal, remove_journal
from syphon.job.replay.send import LeftBehind, left_behind
from syphon.job.request import RunRequest, StageResult
from syphon.job.run.finish import (
    Drained,
    TooSoon,
    finish,
    unknown_destinations,
    waiting_dead_letters,
)
from syphon.job.run.stages import JOURNAL_PREFIX, Sent, probe, send, settle
from syphon.job.settle.actions import earlier_sent
from syphon.obs import failpoints, progress
from syphon.store.lease import Lease

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class WaveRunner:
    """Replays and settles a run's waves one after the other, recording each stage in
    the ``ledger`` and checking the ``lease`` before each wave's replay and settle (a
    run that lost it settles nothing: the new holder will); its waves are read, and
    settled, through ``reading``. Made once the run has the lease and the interrupted runs'
    journals are recovered: it reads what earlier runs left in doubt then, before its
    first wave records ``replaying``."""

    def __init__(
        self, ctx: RunContext, request: RunRequest, ledger: Ledger, lease: Lease, reading: Reading
    ) -> None:
        self.ctx = ctx
        self.request = request
        self.reading = reading
        self._ledger = ledger
        self._lease = lease
        self._drained = Drained()
        #: the messages earlier runs left in doubt (read once per run)
        self._in_doubt = _in_doubt(ctx)

    def __repr__(self) -> str:
        return f"WaveRunner(run_id={self.request.run_id!r}, {self._drained.waves} waves)"

    @property
    def ended_by_fault(self) -> bool:
        """Whether a namespace failed mid-wave: no wave follows."""
        return self._drained.ended_by_fault

    def list_primaries(self) -> Listed:
        """The primaries' entities, listed once per run (and what it cost)."""
        listed = list_primaries(self.ctx)
        self._ledger.add(listed)
        return listed

    def stop(self, why: str) -> None:
        """Ends the run at this wave's end, for ``why`` (the partial line says it)."""
        log.info("run %s: %s", self.request.run_id, why)
        self._drained.stopped = why

    def take(self, wave: Wave, reader: WaveReader, listed: Listed, expected: int | None) -> None:
        """One wave as the ``reader`` handed it over: planned (the reader is told, and may
        read the next wave from then on), its unseen keys held back, probed, replayed and
        settled; then one line of progress (``expected``: the messages the discovery
        counted, None: unknown)."""
        ctx, request = self.ctx, self.request
        if wave.number > 1:
            ctx.spark.release()  # what earlier waves kept
        mark = None
        if wave.many:  # its rows in the ledger name it
            self._ledger.at_wave(wave.number, wave.watermark)
            progress.step(f"wave {wave.number}: planning")
            mark = WaveMark(wave.number, wave.watermark, datetime.now(timezone.utc))
        read = replace(wave, operations=self.reading.counted(wave.queues, wave.handed_out))
        planned = self._planned(plan_snapshot(ctx, request, read, listed, mark), wave)
        self._hold_unseen(listed)  # before anything of the wave is sent
        reader.planned()  # the next wave's read may start: the plan had the cores to itself
        failpoints.check("after_plan")
        self.replay_and_settle(planned)
        self._progress(wave, expected)

    def _planned(self, plan: PlanResult, wave: Wave) -> PlannedWave:
        """Adds a new plan's counts to the run's, as the ``wave`` it planned."""
        self._ledger.planned(plan, plan.counts)
        self._drained.planned += sum(plan.counts.values())
        return PlannedWave(
            plan.rows,
            plan.audit,
            plan.messages,
            plan.counts,
            more=not wave.last,
            unknown=plan.unknown,
            sending_to=plan.sending_to,
        )

    def _hold_unseen(self, listed: Listed) -> None:
        """Holds back, for the rest of the run, the keys of the messages the run's read
        found and could not take (another receiver keeps them locked, or a consumer
        deferred them; see :mod:`syphon.job.read.gaps`), those found since the last call:
        every message the run read up to its latest wave is checked by then."""
        new = self.reading.unseen()
        put_off = [m for m in new if deferred(m[1])]
        locked = [m for m in new if not deferred(m[1])]
        for found, why, what in (
            (locked, Detail.EARLIER_MESSAGE_UNSEEN, "locked by another receiver"),
            (put_off, Detail.EARLIER_MESSAGE_DEFERRED, "deferred by a consumer"),
        ):
            if not found:
                continue
            lanes = unseen_lanes(self.ctx, self.request, listed, found)
            log.warning(
                "run %s holds back %d keys: %d of their messages are %s",
                self.request.run_id,
                len(lanes),
                len(found),
                what,
            )
            self._drained.hold_back(lanes, why)

    def resumed(self, wave: PlannedWave) -> None:
        """A resumed run's one wave, its plan's counts the run's: replayed and settled."""
        self._ledger.resumed(wave.counts)
        self.replay_and_settle(wave)

    def replay_and_settle(self, wave: PlannedWave) -> None:
        """Probes the wave's destinations, sends it, settles it, and adds what it did to
        the run's totals (what it left unsent is held back by the later waves)."""
        sent = self._replay(wave)
        self._lease.check()  # a run that lost its lease settles nothing: the holder will
        places = sent.sent
        if wave.earlier is not None:
            places = places | earlier_sent(wave.earlier)
        settled = settle(self.ctx, self.request, wave, places, self.reading)
        self._ledger.add(settled)
        failpoints.check("after_settle_commit")
        left = left_behind(sent.results, wave.audit) if wave.more else LeftBehind()
        self._drained.too_soon += TooSoon.of(wave.audit)
        self._drained.add_wave(
            sent.tally,
            settled.tally,
            left,
            waiting_dead_letters(self.ctx, self.request, settled.results, wave.audit),
            set(wave.unknown) if wave.unknown is not None else unknown_destinations(wave.audit),
        )

    def _replay(self, wave: PlannedWave) -> Sent:
        """Probes, records ``replaying`` with the wave's journal, sends and commits the
        outcomes, then records ``replayed`` and removes the journal."""
        ctx, run_id, drained = self.ctx, self.request.run_id, self._drained
        probed = probe(ctx, wave, known=drained.skipped)
        self._ledger.add(probed)
        drained.skipped.update(probed.skipped)
        journal_id = new_journal_id()
        open_journal(ctx.store.files, run_id, journal_id)
        self._lease.check()
        self._ledger.record(Status.REPLAYING, detail=JOURNAL_PREFIX + journal_id)
        failpoints.check("after_replaying")
        back = HeldBack(drained.skipped, drained.broken, self._in_doubt)
        sent = send(ctx, self.request, wave, probed.todo, back, journal_id)
        self._ledger.add(sent)
        failpoints.check("after_replay_commit")
        self._ledger.record(Status.REPLAYED)
        remove_journal(ctx.store.files, run_id)  # the outcomes are committed
        failpoints.check("after_replayed")
        return sent

    def _progress(self, wave: Wave, expected: int | None) -> None:
        """One line per wave on the terminal and in the log (the JSON log: one record
        with the figures)."""
        drained = self._drained
        left = None if expected is None else max(0, expected - drained.planned)
        cut = f"{wave.watermark:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC" if wave.watermark else "end"
        rest = "what is left is unknown" if left is None else f"about {left} left"
        line = (
            f"wave {wave.number}: watermark {cut}; {drained.planned} messages planned, "
            f"{drained.home} home so far; {rest}"
        )
        progress.step(line)
        figures = {
            "number": wave.number,
            "watermark": wave.watermark.isoformat() if wave.watermark else None,
            "planned": drained.planned,
            "home": drained.home,
            "left_estimate": left,
        }
        log.info("run %s %s", self.request.run_id, line, extra={"fields": {"wave": figures}})

    def finish(self) -> RunResult:
        """Records the run's final status from what its waves did, and what its read
        did beyond them (asked once the read is closed)."""
        closed = self.reading.closed()
        self._ledger.add(StageResult(operations=closed.operations), unread=closed.unread)
        refused = refused_primaries(self._drained.skipped, self.ctx.namespaces.primaries)
        return finish(self._ledger, self._drained, closed.locks, refused)


def _in_doubt(ctx: RunContext) -> DataFrame | None:
    """The messages earlier runs left in doubt, read once per run, before its first wave
    records ``replaying`` (which would make the run itself look cut off): a wave of this
    run that leaves a message in doubt leaves it in the backlog, where no later wave of
    the run reads it."""
    doubt = ctx.store.in_doubt()
    return None if doubt is None else keep(doubt)
