"""A run's rows in the ledger, and what the run tells its caller."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from types import MappingProxyType

from syphon.core.errors import ExitCode
from syphon.core.ledger import Operations, RunRecord, Timings
from syphon.core.schema import Status
from syphon.job.context import RunContext
from syphon.job.failures import Failure, explain
from syphon.job.request import RunRequest, StageResult
from syphon.servicebus.access import Access
from syphon.store.lease import LeaseState

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What a run did.

    Attributes:
        outcomes: messages by ``replay_<outcome>`` and ``settle_<outcome>``.
        detail: the error class of a failed run, or why a run did not start.
        fix: one line naming what to do, when there is something to do.
        code: an exit code more precise than the status's (see :attr:`exit_code`).
        report: where the run's HTML report was written.
        why: what failed, in syphon's words, for the status line (never the ledger's).
    """

    run_id: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    operations: Operations = field(default_factory=Operations)
    timings: Timings = field(default_factory=Timings)
    detail: str | None = None
    fix: str | None = None
    code: ExitCode | None = None
    report: str | None = None
    why: str | None = None

    @property
    def exit_code(self) -> ExitCode:
        if self.code is not None:
            return self.code
        return {
            Status.DONE: ExitCode.DONE,
            Status.EMPTY: ExitCode.DONE,
            Status.PARTIAL: ExitCode.PARTIAL,
            Status.BUSY: ExitCode.BUSY,
        }.get(self.status, ExitCode.FAILED)


class Ledger:
    """Appends a run's status rows, carrying its counts, operations and timings
    forward. The run hands it what happened (a stage's result, a wave's plan, what its
    read could not see) and it decides what its rows say: nothing of it is set from
    outside."""

    def __init__(
        self,
        ctx: RunContext,
        run_id: str,
        started: datetime,
        source: str | None = None,
        repair: tuple[str, ...] = (),
        job_run_id: str | None = None,
    ) -> None:
        self._ctx = ctx
        self._job_run_id = job_run_id
        self._run_id = run_id
        self._started = started
        self._source = source
        self._repair = repair
        self._counts: dict[str, int] = {}
        self._operations = Operations()
        self._timings = Timings()
        #: the source's queues that hold messages syphon cannot read (path: why)
        self._unread: dict[str, str] = {}
        #: the wave the next rows record, and its cut (None: a run of one wave)
        self._wave: int | None = None
        self._watermark: datetime | None = None

    @property
    def run_id(self) -> str:
        return self._run_id

    @property
    def unread(self) -> Mapping[str, str]:
        """The source's queues that hold messages syphon cannot read (path: why)."""
        return MappingProxyType(self._unread)

    def add(self, stage: StageResult, unread: Mapping[str, str] | None = None) -> None:
        """Adds a stage's timings and operations to the run's, and the queues it found
        that hold messages syphon cannot read (``unread``, path: why)."""
        self._timings.add(stage.timings)
        self._operations.add(stage.operations)
        self._unread.update(unread or {})

    def planned(self, plan: StageResult, counts: Mapping[str, int]) -> None:
        """Adds a wave's plan: its timings and operations, and its ``counts`` by verdict
        to the run's."""
        self.add(plan)
        for verdict, n in counts.items():
            self._counts[verdict] = self._counts.get(verdict, 0) + n

    def resumed(self, counts: Mapping[str, int]) -> None:
        """A resumed run's one wave: its plan's ``counts`` are the run's."""
        self._counts = dict(counts)

    def at_wave(self, number: int, watermark: datetime | None) -> None:
        """The rows from here on record wave ``number`` of a run in waves, cut at
        ``watermark``."""
        self._wave, self._watermark = number, watermark

    def record(self, status: str, detail: str | None = None, final: bool = False) -> None:
        self._ctx.store.append_run(
            RunRecord(
                run_id=self._run_id,
                status=status,
                started_at=self._started,
                finished_at=datetime.now(timezone.utc) if final else None,
                config_fingerprint=self._ctx.config.fingerprint(),
                counts=self._counts,
                operations=self._operations,
                timings=self._timings,
                detail=detail,
                source=self._source,
                wave=None if final else self._wave,
                watermark=None if final else self._watermark,
                repair=self._repair,
                job_run_id=self._job_run_id,
            )
        )

    def result(
        self, status: str, detail: str | None = None, outcomes: dict[str, int] | None = None
    ) -> RunResult:
        """Records the final row and returns the result."""
        self.record(status, detail=detail, final=True)
        return RunResult(
            self.run_id,
            status,
            dict(self._counts),
            outcomes or {},
            self._operations,
            self._timings,
            detail,
        )

    def busy(self, state: LeaseState, lease_seconds: int) -> RunResult:
        """Ends a run that found another holding the lease (its ``state``): ``busy``, with
        a fix line that says until when (a crashed holder's lease expires then)."""
        detail = f"another run holds the lease: {state.holder or '?'}"
        log.warning("run %s did not start: %s", self.run_id, detail)
        result = self.result(Status.BUSY, detail)
        until = f" at {state.expires_at:%Y-%m-%d %H:%M:%S} UTC" if state.expires_at else ""
        result.fix = (
            f"wait for that run to end; if it crashed, its lease expires{until} "
            f"(run.lease_seconds, {lease_seconds} s, after its last renewal) and the next "
            "run takes over"
        )
        return result

    def failed(self, exc: BaseException, namespace: Access | None = None) -> RunResult:
        """Ends the run as ``failed`` (recorded when the ledger can still be written)."""
        failure: Failure = explain(exc, namespace)
        log.error("run %s failed: %s", self.run_id, failure.detail)
        log.debug("run %s failed", self.run_id, exc_info=exc)  # the trace, at DEBUG only
        try:
            self.record(Status.FAILED, detail=failure.detail, final=True)
        except Exception as again:
            log.error(
                "run %s: the failure could not be recorded in the ledger (%s)",
                self.run_id,
                explain(again).detail,
            )
        return RunResult(
            self.run_id,
            Status.FAILED,
            dict(self._counts),
            {},
            self._operations,
            self._timings,
            failure.detail,
            failure.fix,
            failure.code,
            why=failure.why,
        )


def record_planned(
    ctx: RunContext,
    request: RunRequest,
    stage: StageResult,
    counts: dict[str, int],
    wave: tuple[int, datetime | None] | None = None,
) -> None:
    """Records a planned wave (or run): its ``counts`` by verdict and the plan's own
    timings and operations (``stage``); ``wave``: its number and watermark (None: a run
    of one wave)."""
    ctx.store.append_run(
        RunRecord(
            run_id=request.run_id,
            status=Status.PLANNED,
            started_at=request.started,
            finished_at=datetime.now(timezone.utc),
            config_fingerprint=ctx.config.fingerprint(),
            counts=counts,
            operations=stage.operations,
            timings=stage.timings,
            source=request.source.name,
            wave=None if wave is None else wave[0],
            watermark=None if wave is None else wave[1],
            repair=tuple(request.repair.describe()) if request.repair else (),
            job_run_id=request.job_run_id,
        )
    )


def record_recovered(ctx: RunContext, last: RunRecord, by_run: str) -> None:
    """Records an interrupted run's last wave ``replayed``, its outcomes read from its
    journal by run ``by_run`` (the interrupted run's own row, ``last``, carried on)."""
    ctx.store.append_run(
        replace(
            last,
            status=Status.REPLAYED,
            finished_at=None,
            recorded_at=None,
            detail=f"recovered from its journal by run {by_run}",
        )
    )
