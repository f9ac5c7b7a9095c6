"""What a run's waves add up to, and the final status it records."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from syphon.core.schema import Detail, Outcome, Status, Verdict
from syphon.job.context import RunContext
from syphon.job.failures import Failure, missing_destinations
from syphon.job.ledger import Ledger, RunResult
from syphon.job.plan.classify import DESTINATION_UNKNOWN
from syphon.job.plan.facts import dead_letters_waiting
from syphon.job.read.modes import ReadLocks
from syphon.job.replay.send import LeftBehind
from syphon.job.request import RunRequest
from syphon.job.run.tally import Tally, combined
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.sending import Destination

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

log = logging.getLogger(__name__)

_REPLAY_COLUMNS = ("transfers", "busy_retries")
#: Details that say a namespace failed mid-run (its clients were closed).
_FAULTS = frozenset({Detail.NAMESPACE_FAULT, *NAMESPACE_FAULTS})
_SETTLE_COLUMNS = ("received", "abandoned", "requests")


@dataclass(frozen=True)
class Waiting:
    """Dead letters a run left waiting for the operator (a duplicate of a delivered
    message, a conflict, an invalid one): how many, and how many of them an earlier run
    left waiting too (``kept``: the operator has let them stay)."""

    now: int = 0
    kept: int = 0


#: The columns of :func:`syphon.job.plan.facts.dead_letters_waiting`'s rows, for Spark.
WAITING = "backlog_queue string, sequence_number long, verdict string"


def waiting_dead_letters(
    ctx: RunContext, request: RunRequest, settled: pa.Table, plan: pa.Table
) -> Waiting:
    """The dead letters a wave left waiting for the operator (from its ``settled`` results
    and ``plan`` rows, in the driver), and how many of them an earlier run left waiting
    too (none for a source that reads no dead-letter queue)."""
    if not request.source.reads_dead_letters:
        return Waiting()
    waiting = dead_letters_waiting(settled, plan)
    if not waiting.num_rows:
        return Waiting()
    frame = ctx.spark().createDataFrame(waiting, schema=WAITING)
    return Waiting(waiting.num_rows, ctx.store.waiting_before(frame, request.run_id).count())


def unknown_destinations(plan: pa.Table) -> set[Destination]:
    """The (primary, destination) pairs the ``plan`` rows (in the driver) found no entity
    for (a resumed run's; a new plan's come with it: ``PlanResult.unknown``)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    invalid = pc.equal(plan.column("verdict"), Verdict.INVALID)
    unknown = plan.filter(pc.and_(invalid, pc.equal(plan.column("reason"), DESTINATION_UNKNOWN)))
    pairs = unknown.select(["primary", "destination"]).to_pylist()
    return {(r["primary"], r["destination"]) for r in pairs}


@dataclass(frozen=True)
class TooSoon:
    """Dead letters a run left because their destination would drop them as duplicates:
    how many, and when the last window passes (UTC, ISO 8601; None: none)."""

    count: int = 0
    until: str | None = None

    @classmethod
    def of(cls, plan: pa.Table) -> TooSoon:
        """Those of a wave's ``plan`` rows (in the driver)."""
        import pyarrow.compute as pc

        rows = plan.filter(pc.equal(plan.column("verdict"), Verdict.TOO_SOON))
        if not rows.num_rows:
            return cls()
        return cls(rows.num_rows, pc.max(rows.column("detail")).as_py())

    def __add__(self, other: TooSoon) -> TooSoon:
        until = max((u for u in (self.until, other.until) if u is not None), default=None)
        return TooSoon(self.count + other.count, until)

    def note(self) -> str | None:
        """The run's words for them (None: none)."""
        if not self.count:
            return None
        return (
            f"{self.count} dead letters wait for their destination's duplicate detection "
            "window (sent now, the destination would accept and drop them as duplicates); "
            f"the last window passes at {self.until}"
        )

    def fix(self) -> str | None:
        """The ``fix:`` part for them (None: none)."""
        if not self.count:
            return None
        return (
            f"rerun after {self.until}, or now with --new-message-ids to send them under "
            "new MessageIds derived from theirs (the original kept in the property "
            "syphon-original-message-id)"
        )


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
        sent, settled: each wave's replay and settle tallies.
        waiting: the dead letters the waves left waiting for the operator.
        planned: messages planned, all waves.
        stopped: why the run stopped taking waves before its source's end (None: it
            did not).
        left_destinations: the destinations a wave's sends found missing, disabled or
            failing (a subset of ``skipped``), with why.
        too_soon: the dead letters the plans left for their destinations' duplicate
            detection windows.
    """

    skipped: dict[Destination, str | None] = field(default_factory=dict)
    broken: dict[tuple[str, str, str], str] = field(default_factory=dict)
    unknown: set[Destination] = field(default_factory=set)
    sent: list[Tally] = field(default_factory=list)
    settled: list[Tally] = field(default_factory=list)
    waiting: Waiting = Waiting()
    planned: int = 0
    stopped: str | None = None
    left_destinations: dict[Destination, str] = field(default_factory=dict)
    too_soon: TooSoon = field(default_factory=lambda: TooSoon())

    @property
    def waves(self) -> int:
        """How many waves ran."""
        return len(self.sent)

    @property
    def home(self) -> int:
        """Messages sent to the primaries, all waves."""
        return sum(t.count(Outcome.SENT) for t in self.sent)

    def hold_back(self, lanes: Iterable[tuple[str, str, str]], why: str) -> None:
        """Holds ``lanes`` back for the rest of the run, with ``why`` (a lane held back
        already keeps its first reason)."""
        for lane in lanes:
            self.broken.setdefault(lane, why)

    def keys_held_back(self, why: str) -> int:
        """How many lanes are held back for ``why``."""
        return sum(1 for w in self.broken.values() if w == why)

    def add_wave(
        self,
        sent: Tally,
        settled: Tally,
        left: LeftBehind,
        waiting: Waiting,
        unknown: set[Destination],
    ) -> None:
        """Adds a wave's tallies and what it left behind."""
        self.sent.append(sent)
        self.settled.append(settled)
        self.waiting = Waiting(self.waiting.now + waiting.now, self.waiting.kept + waiting.kept)
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
        """A namespace failed mid-wave: no wave follows."""
        return any(t.any_detail(_FAULTS) for t in (*self.sent, *self.settled))


def finish(
    ledger: Ledger,
    drained: Drained,
    locks: ReadLocks | None = None,
    refused: Failure | None = None,
) -> RunResult:
    """Records the final status: ``failed`` when a namespace failed mid-run, ``partial``
    when work is left (messages that arrived after the snapshot are the next run's work,
    those the selection left out the operator's choice, and dead letters an earlier run
    already left waiting for the operator are kept by them: none of these is a
    left-over), the run stopped before its source's end, or a queue of the source holds
    messages syphon cannot read (the detail names them), else ``done``. ``refused``: the
    exit of a run whose primaries refused the credentials (before missing destinations:
    it blocks more). ``locks``: what a run that read its source once could not see or
    keep (None: nothing)."""
    replayed, settle = drained.replayed, drained.settle
    locks = locks or ReadLocks()
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
    left = settle.count(Outcome.LEFT, except_details=[Detail.NOT_SELECTED]) - drained.waiting.kept
    notes = []
    if drained.stopped:
        notes.append(drained.stopped)
    failed_keys = drained.keys_held_back(Detail.EARLIER_BATCH_FAILED)
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
    notes += locks.notes(
        drained.keys_held_back(Detail.EARLIER_MESSAGE_UNSEEN),
        drained.keys_held_back(Detail.EARLIER_MESSAGE_DEFERRED),
    )
    if ledger.unread:
        unread = ", ".join(f"{p} ({why})" for p, why in sorted(ledger.unread.items()))
        notes.append(f"not read: {unread}")
        log.warning("run %s: not read: %s", ledger.run_id, unread)
    if (too_soon := drained.too_soon.note()) is not None:
        notes.append(too_soon)
    if drained.waiting.now:
        notes.append(
            f"{drained.waiting.now} dead letters wait for the operator ({drained.waiting.kept} of "
            "them since an earlier run): discard them (--discard-duplicates, syphon "
            "discard) or send them again (--allow-resend)"
        )
    detail = "; ".join(notes) or None
    waiting = left or ledger.unread or drained.stopped or locks.waiting
    status = Status.PARTIAL if waiting else Status.DONE
    result = ledger.result(status, detail, outcomes)
    fixes = [f for f in (locks.fix(), drained.too_soon.fix()) if f is not None]
    if status == Status.PARTIAL and fixes:
        result.fix = "; ".join(fixes)
    skipped = drained.skipped
    missing = sorted(k for k, reason in skipped.items() if reason == Detail.DESTINATION_MISSING)
    failure = refused or missing_destinations(sorted(drained.unknown), missing)
    if failure is not None:
        result.code, result.fix = failure.code, failure.fix
    return result
