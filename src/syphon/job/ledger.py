"""A run's rows in the ledger, and what the run tells its caller."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

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
    forward."""

    def __init__(
        self,
        ctx: RunContext,
        run_id: str,
        started: datetime,
        source: str | None = None,
        repair: tuple[str, ...] = (),
        job_run_id: str | None = None,
    ) -> None:
        self.ctx = ctx
        self.job_run_id = job_run_id
        self.run_id = run_id
        self.started = started
        self.source = source
        self.repair = repair
        self.counts: dict[str, int] = {}
        self.operations = Operations()
        self.timings = Timings()
        #: the source's queues that hold messages syphon cannot read (path: why)
        self.unread: dict[str, str] = {}
        #: the wave the next rows record, and its cut (None: a run of one wave)
        self.wave: int | None = None
        self.watermark: datetime | None = None

    def add(self, stage: StageResult) -> None:
        """Adds a stage's timings and operations to the run's."""
        self.timings.add(stage.timings)
        self.operations.add(stage.operations)

    def record(self, status: str, detail: str | None = None, final: bool = False) -> None:
        self.ctx.store.append_run(
            RunRecord(
                run_id=self.run_id,
                status=status,
                started_at=self.started,
                finished_at=datetime.now(timezone.utc) if final else None,
                config_fingerprint=self.ctx.config.fingerprint(),
                counts=self.counts,
                operations=self.operations,
                timings=self.timings,
                detail=detail,
                source=self.source,
                wave=None if final else self.wave,
                watermark=None if final else self.watermark,
                repair=self.repair,
                job_run_id=self.job_run_id,
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
            dict(self.counts),
            outcomes or {},
            self.operations,
            self.timings,
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
            dict(self.counts),
            {},
            self.operations,
            self.timings,
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
