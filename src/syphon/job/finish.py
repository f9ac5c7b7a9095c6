"""What a run's waves add up to, and the final status it records."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from syphon.core.schema import Detail, Outcome, Status, Verdict
from syphon.job.classify import DESTINATION_UNKNOWN
from syphon.job.context import RunContext, keep
from syphon.job.failures import Failure, missing_destinations
from syphon.job.ledger import Ledger, RunResult
from syphon.job.replay import LeftBehind
from syphon.job.request import RunRequest
from syphon.job.tally import Tally, combined
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.sending import Destination
from syphon.store import queries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

_REPLAY_COLUMNS = ("transfers", "busy_retries")
#: Details that say a namespace failed mid-run (its clients were closed).
_FAULTS = frozenset({Detail.NAMESPACE_FAULT, *NAMESPACE_FAULTS})
_SETTLE_COLUMNS = ("received", "abandoned", "requests")


@dataclass(frozen=True)
class Held:
    """Dead letters a run left waiting for the operator (a duplicate of a delivered
    message, a conflict, an invalid one): how many, and how many of them an earlier run
    left waiting too (``kept``: the operator has let them stay)."""

    now: int = 0
    kept: int = 0


def held(ctx: RunContext, request: RunRequest, settled: DataFrame, rows: DataFrame) -> Held:
    """The dead letters a wave left waiting for the operator, and how many of them an
    earlier run left waiting too (none for a source that reads no dead-letter queue)."""
    if not request.source.reads_dead_letters:
        return Held()
    waiting = keep(queries.held_dead_letters(settled, rows))
    now = waiting.count()
    return Held(now, ctx.store.held_before(waiting, request.run_id).count() if now else 0)


def unknown_destinations(planned: DataFrame) -> set[Destination]:
    """The (primary, destination) pairs the plan found no entity for (a resumed run's,
    read from its audit rows; a new plan's come with it: ``PlanResult.unknown``)."""
    from pyspark.sql import functions as F

    unknown = planned.where(
        (F.col("verdict") == Verdict.INVALID) & (F.col("reason") == DESTINATION_UNKNOWN)
    )
    return {
        (r["primary"], r["destination"])
        for r in unknown.select("primary", "destination").distinct().collect()
    }


@dataclass(frozen=True)
class ReadLocks:
    """What a run that read its source once under lock could not see or keep.

    Attributes:
        unseen: per queue, the messages another receiver held locked, which the run
            could not receive (their keys were held back).
        lost: per queue, the locks that lapsed while the run held them.
        renewals_failed: renewal requests the namespace failed.
        lock_seconds: the queues' lock duration (None: no message was received).
    """

    unseen: Mapping[str, int] = field(default_factory=dict)
    lost: Mapping[str, int] = field(default_factory=dict)
    renewals_failed: int = 0
    lock_seconds: float | None = None

    def notes(self, keys: int) -> list[str]:
        """The partial line's words for it; ``keys``: the keys held back for the
        unseen messages."""
        out = []
        if self.unseen:
            where = ", ".join(f"{p} ({n})" for p, n in sorted(self.unseen.items()))
            locked = (
                f"{sum(self.unseen.values())} messages are locked by another receiver in {where}"
            )
            if keys:
                out.append(
                    f"{keys} keys held back: {locked}, and nothing of their keys is sent "
                    "before them: the next run takes them in order"
                )
            else:
                out.append(f"{locked} (none of them has a key): the next run takes them")
        if self.lost:
            cause = (
                "the namespace failed renewals"
                if self.renewals_failed
                else "the run could not renew them in time: its driver stalled or was paused"
            )
            out.append(
                f"{sum(self.lost.values())} locks lapsed while the run held them ({cause}); "
                "their messages wait for the next run, which finds their outcomes in the audit"
            )
        return out

    def fix(self) -> str | None:
        """The ``fix:`` line of a run these locks left partial (None: nothing to say)."""
        parts = []
        if self.unseen:
            lapse = f" ({self.lock_seconds:.0f} s)" if self.lock_seconds is not None else ""
            parts.append(
                "rerun once the other receiver lets its messages go: a killed syphon run's "
                f"locks lapse after the queues' lock duration{lapse}; otherwise stop the "
                "receiver that holds them (an explorer in peek-lock mode, a consumer)"
            )
        if self.lost:
            parts.append(
                "check the secondary namespace and rerun"
                if self.renewals_failed
                else "rerun; give the driver the CPU it needs (it renews the locks every "
                "third of their duration), or lengthen the backlog queues' lock duration"
            )
        return "; ".join(parts) or None


@dataclass
class Drained:
    """What a run's waves did, added up; what one wave left behind is what the later
    waves of the run hold back (``skipped`` destinations, ``broken`` lanes).

    Attributes:
        skipped: per destination the probes or a wave's sends judged, why it is
            skipped (None: it answered).
        broken: the lanes (primary, destination, partition key) held back, each with
            why: a wave left one of its messages unsent (``earlier_batch_failed``), or
            the run could not read one (``earlier_message_unseen``).
        unknown: destinations the plans found no entity for.
        waves: how many waves ran.
        planned: messages planned, all waves.
        home: messages sent to the primaries, all waves.
        stopped: why the run stopped taking waves before its source's end (None: it
            did not).
        ended_by_fault: a namespace failed mid-wave: no wave follows.
        left_destinations: the destinations a wave's sends found missing, disabled or
            failing (a subset of ``skipped``), with why.
        in_doubt: the messages earlier runs left in doubt (read once per run).
        locks: what a run that read its source once could not see or keep.
    """

    skipped: dict[Destination, str | None] = field(default_factory=dict)
    broken: dict[tuple[str, str, str], str] = field(default_factory=dict)
    unknown: set[Destination] = field(default_factory=set)
    sent: list[Tally] = field(default_factory=list)
    settled: list[Tally] = field(default_factory=list)
    held: Held = Held()
    waves: int = 0
    planned: int = 0
    home: int = 0
    stopped: str | None = None
    left_destinations: dict[Destination, str] = field(default_factory=dict)
    in_doubt: DataFrame | None = None
    locks: ReadLocks = ReadLocks()

    def hold_back(self, lanes: Iterable[tuple[str, str, str]], why: str) -> None:
        """Holds ``lanes`` back for the rest of the run, with ``why`` (a lane held back
        already keeps its first reason)."""
        for lane in lanes:
            self.broken.setdefault(lane, why)

    def keys_held(self, why: str) -> int:
        """How many lanes are held back for ``why``."""
        return sum(1 for w in self.broken.values() if w == why)

    def add_wave(
        self, sent: Tally, settled: Tally, left: LeftBehind, held: Held, unknown: set[Destination]
    ) -> None:
        """Adds a wave's tallies and what it left behind."""
        self.waves += 1
        self.sent.append(sent)
        self.settled.append(settled)
        self.home += sent.count(Outcome.SENT)
        self.held = Held(self.held.now + held.now, self.held.kept + held.kept)
        self.unknown |= unknown
        self.hold_back(left.lanes, Detail.EARLIER_BATCH_FAILED)
        for dest, why in left.destinations.items():
            if self.skipped.get(dest) is None:
                self.skipped[dest] = why
                self.left_destinations[dest] = why

    @property
    def replayed(self) -> Tally:
        return combined(self.sent, _REPLAY_COLUMNS)

    @property
    def settle(self) -> Tally:
        return combined(self.settled, _SETTLE_COLUMNS)

    @property
    def ended_by_fault(self) -> bool:
        return any(t.any_detail(_FAULTS) for t in (*self.sent, *self.settled))


def finish(ledger: Ledger, drained: Drained, refused: Failure | None = None) -> RunResult:
    """Records the final status: ``failed`` when a namespace failed mid-run, ``partial``
    when work is left (messages that arrived after the snapshot are the next run's work,
    those the selection left out the operator's choice, and dead letters an earlier run
    already left waiting for the operator are kept by them: none of these is a
    left-over), the run stopped before its source's end, or a queue of the source holds
    messages syphon cannot read (the detail names them), else ``done``. ``refused``: the
    exit of a run whose primaries refused the credentials (before missing destinations:
    it blocks more)."""
    replayed, settle = drained.replayed, drained.settle
    outcomes = {
        **{f"replay_{k}": v for k, v in replayed.by_outcome().items()},
        # a given_back line counts queues, not messages: its receives are in operations
        **{f"settle_{k}": v for k, v in settle.by_outcome().items() if k != Outcome.GIVEN_BACK},
    }
    sides = [
        side for side, t in (("primary", replayed), ("secondary", settle)) if t.any_detail(_FAULTS)
    ]
    if sides:  # a namespace failed mid-run: its clients were closed, the rest waits
        return ledger.result(
            Status.FAILED, f"{Detail.NAMESPACE_FAULT}: " + ", ".join(sides), outcomes
        )
    left = settle.count(Outcome.LEFT, except_details=[Detail.NOT_SELECTED]) - drained.held.kept
    notes = []
    if drained.stopped:
        notes.append(drained.stopped)
    failed_keys = drained.keys_held(Detail.EARLIER_BATCH_FAILED)
    if drained.waves > 1 and (failed_keys or drained.left_destinations):
        parts = []
        if failed_keys:
            parts.append(f"{failed_keys} keys")
        if drained.left_destinations:
            parts.append(f"{len(drained.left_destinations)} destinations")
        notes.append(
            f"{' and '.join(parts)} that failed in a wave were held back in the later "
            "waves: the next run takes them, in order"
        )
    notes += drained.locks.notes(drained.keys_held(Detail.EARLIER_MESSAGE_UNSEEN))
    if ledger.unread:
        unread = ", ".join(f"{p} ({why})" for p, why in sorted(ledger.unread.items()))
        notes.append(f"not read: {unread}")
        log.warning("run %s: not read: %s", ledger.run_id, unread)
    if drained.held.now:
        notes.append(
            f"{drained.held.now} dead letters wait for the operator ({drained.held.kept} of "
            "them since an earlier run): discard them (--discard-duplicates, syphon "
            "discard) or send them again (--allow-resend)"
        )
    detail = "; ".join(notes) or None
    waiting = left or ledger.unread or drained.stopped or drained.locks.unseen
    status = Status.PARTIAL if waiting else Status.DONE
    result = ledger.result(status, detail, outcomes)
    if status == Status.PARTIAL and (fix := drained.locks.fix()) is not None:
        result.fix = fix
    skipped = drained.skipped
    missing = sorted(k for k, reason in skipped.items() if reason == Detail.DESTINATION_MISSING)
    failure = refused or missing_destinations(sorted(drained.unknown), missing)
    if failure is not None:
        result.code, result.fix = failure.code, failure.fix
    return result
