"""``syphon run`` and ``syphon replay``: plan, replay, settle — and the run ledger.

The order of the stages is what keeps messages safe:

1. discover the backlog queues; when every one is empty, record an ``empty`` run and
   stop — no Spark session is started;
2. plan (snapshot → reconcile → audit, status ``planned``);
3. record ``replaying`` in the ledger, then send; the outcomes are committed to the audit
   in one append, then ``replayed`` is recorded. A crash between the two leaves the run's
   sends unknown: the next run sends those messages again and marks them
   ``resent_in_doubt``;
4. settle from the committed outcomes only (completing or dead-lettering nothing whose
   outcome is not in the audit), append the settlements, and record the final status:
   ``done`` (nothing left), ``partial`` (some messages stay for a later run) or
   ``failed`` (an error stopped the run; ``detail`` names its class).

Runs hold a lease in Delta (:mod:`syphon.store.lease`) from planning to the end of the settle:
a run that finds it held records ``busy`` and stops before its snapshot.

Exit codes (see the README): 0 done or empty, 5 partial, 6 busy, 1 failed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from syphon.app.report import write_run_report
from syphon.core.config import AuditConfig, SyphonConfig
from syphon.obs import failpoints, progress
from syphon.obs.logs import run_context
from syphon.store.audit import (
    RunRecord,
    append_outcomes,
    append_run,
    config_fingerprint,
    plan_rows,
    read_audit,
    read_runs,
)
from syphon.store.lease import Lease

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from syphon.servicebus.discovery import DiscoveredQueue

log = logging.getLogger(__name__)

DbutilsGet = Callable[[str, str], str] | None

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_DENIED = 3
EXIT_PARTIAL = 5
EXIT_BUSY = 6
EXIT_UNREACHABLE = 7
EXIT_MISSING_DESTINATION = 8

#: Errors that mean a namespace cannot be reached, or refuses the credentials.
UNREACHABLE_ERRORS = frozenset({
    "ServiceRequestError", "ServiceBusConnectionError", "ServiceBusCommunicationError",
    "ConnectionError", "ConnectionRefusedError", "gaierror", "TimeoutError",
    "OperationTimeoutError",
})  # fmt: skip
DENIED_ERRORS = frozenset({
    "ClientAuthenticationError", "CredentialUnavailableError",
    "ServiceBusAuthenticationError", "ServiceBusAuthorizationError",
})  # fmt: skip


@dataclass
class RunResult:
    """What a run did."""

    run_id: str
    status: str
    counts: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    detail: str | None = None
    hint: str | None = None  # one line naming the fix, when the run could not start
    code: int | None = None  # an exit code more precise than the status's
    report: str | None = None  # where the run's HTML report was written

    @property
    def exit_code(self) -> int:
        if self.code is not None:
            return self.code
        if self.status in ("done", "empty"):
            return EXIT_DONE
        if self.status == "partial":
            return EXIT_PARTIAL
        if self.status == "busy":
            return EXIT_BUSY
        return EXIT_FAILED


class _Ledger:
    """Appends status rows of one run, carrying its counts forward."""

    def __init__(self, config: SyphonConfig, run_id: str, started: datetime) -> None:
        self.config = config
        self.run_id = run_id
        self.started = started
        self.counts: dict[str, int] = {}
        self.operations: dict[str, int] = {}
        self.timings: dict[str, float] = {}
        self.detail: str | None = None
        self.credits_per_message: float | None = None

    def record(self, status: str, detail: str | None = None, final: bool = False) -> None:
        append_run(
            RunRecord(
                run_id=self.run_id,
                status=status,
                started_at=self.started,
                finished_at=datetime.now(timezone.utc) if final else None,
                config_fingerprint=config_fingerprint(self.config),
                counts=self.counts,
                operations=self.operations,
                timings=self.timings,
                detail=detail,
                credits_per_replayed_message=self.credits_per_message,
            ),
            self.config.audit,
        )


def run(
    config: SyphonConfig,
    spark_factory: Callable[[], SparkSession],
    *,
    run_id: str | None = None,
    dbutils_get: DbutilsGet = None,
) -> RunResult:
    """Runs every stage (see the module docstring) and returns the result; errors end the
    run with status ``failed`` in the ledger and in the result, never as an exception
    (configuration and secret errors excepted: they come before the run starts)."""
    from syphon.job.plan import new_run_id

    started = datetime.now(timezone.utc)
    run_id = run_id or new_run_id(started)
    sessions: list[SparkSession] = []

    def session() -> SparkSession:
        sessions.append(spark_factory())
        return sessions[-1]

    with run_context(run_id):  # every record of the run carries its id
        if config.audit.engine == "spark":  # the ledger itself is written through Spark
            session()
        result = _run(config, session, run_id, started, dbutils_get)
        result.report = write_run_report(result, sessions[-1] if sessions else None,
                                         config.audit)  # fmt: skip
    return result


def _run(
    config: SyphonConfig,
    spark_factory: Callable[[], SparkSession],
    run_id: str,
    started: datetime,
    dbutils_get: DbutilsGet,
) -> RunResult:
    from syphon.job.plan import discover

    ledger = _Ledger(config, run_id, started)
    clock = time.monotonic()
    try:
        queues = discover(config, dbutils_get)
    except Exception as exc:
        result = _failed(ledger, exc)
        name = type(exc).__name__
        secondary = config.secondary
        where = f"the secondary namespace {secondary.namespace}"
        if name in UNREACHABLE_ERRORS:
            result.code = EXIT_UNREACHABLE
            address = (
                "the Endpoint of its connection string"
                if secondary.credential is None
                else f"its fully_qualified_namespace ({secondary.host})"
            )
            result.hint = (
                f"{where} cannot be reached: check {address} (or management_endpoint), "
                "DNS, the network and the firewall"
            )
        elif name in DENIED_ERRORS:
            result.code = EXIT_DENIED
            if secondary.credential is None:
                result.hint = (
                    f"{where} refused the credentials: check the key name and key of "
                    "its connection string (Manage and Listen rights)"
                )
            else:
                result.hint = (
                    f"{where} got no Azure AD token or refused it (credential type "
                    f"{secondary.credential.type}): check that azure-identity finds the "
                    "identity on this machine and that it holds the Azure Service Bus "
                    "Data Owner role on the namespace"
                )
        return result
    ledger.timings["discover"] = time.monotonic() - clock
    ledger.operations.update(_discovery_operations(config, queues))
    if all(q.empty for q in queues):
        ledger.record("empty", final=True)
        return RunResult(run_id, "empty", {}, {}, ledger.operations, ledger.timings)
    with _leased(config, ledger) as lease:
        if lease is None:
            return _busy(ledger)
        try:
            spark = spark_factory()
            return _plan_replay_settle(spark, config, ledger, queues, lease, dbutils_get)
        except Exception as exc:
            return _failed(ledger, exc)


def replay_run(
    spark: SparkSession,
    config: SyphonConfig,
    run_id: str,
    *,
    dbutils_get: DbutilsGet = None,
) -> RunResult:
    """Resumes a planned run: peeks its backlog queues again, sends what its plan says
    and no earlier attempt of the run recorded as sent, then settles."""
    mine = [r for r in read_runs(config.audit) if r["run_id"] == run_id]
    if not any(r["status"] == "planned" for r in mine):
        from syphon.core.errors import SyphonError

        raise SyphonError(f"run {run_id} was never planned in {config.audit.where}")
    started = min(r["started_at"] for r in mine)
    ledger = _Ledger(config, run_id, started)
    with run_context(run_id):
        with _leased(config, ledger) as lease:
            if lease is None:
                result = _busy(ledger)
            else:
                try:
                    result = _replay_and_settle(spark, config, ledger, None, lease, dbutils_get)
                except Exception as exc:
                    result = _failed(ledger, exc)
        result.report = write_run_report(result, spark, config.audit)
    return result


@contextlib.contextmanager
def _leased(config: SyphonConfig, ledger: _Ledger) -> Iterator[Lease | None]:
    """The run's lease, renewed in the background and released at the end; None when
    another run holds it."""
    lease = Lease(config.audit.path, ledger.run_id, timedelta(seconds=config.run.lease_seconds))
    state = lease.acquire()
    if not state.held_by(lease.holder, datetime.now(timezone.utc)):
        ledger.detail = f"another run holds the lease: {state.holder}"
        yield None
        return
    lease.start_heartbeat()
    try:
        yield lease
    finally:
        lease.release()


def _busy(ledger: _Ledger) -> RunResult:
    log.warning("run %s did not start: %s", ledger.run_id, ledger.detail)
    ledger.record("busy", detail=ledger.detail, final=True)
    return RunResult(ledger.run_id, "busy", {}, {}, ledger.operations, ledger.timings,
                     ledger.detail)  # fmt: skip


def _plan_replay_settle(
    spark: SparkSession,
    config: SyphonConfig,
    ledger: _Ledger,
    queues: list[DiscoveredQueue],
    lease: Lease,
    dbutils_get: DbutilsGet,
) -> RunResult:
    from syphon.job.plan import run_plan

    plan = run_plan(spark, config, run_id=ledger.run_id, now=ledger.started,
                    dbutils_get=dbutils_get, queues=queues)  # fmt: skip
    ledger.counts = dict(plan.counts)
    ledger.timings.update(plan.timings)
    ledger.operations["snapshot.messages_peeked"] = plan.audit_rows
    ledger.operations["destinations.management_calls"] = 2 * len(config.primaries)
    failpoints.check("after_plan")
    return _replay_and_settle(spark, config, ledger, plan.snapshot, lease, dbutils_get)


def _replay_and_settle(
    spark: SparkSession,
    config: SyphonConfig,
    ledger: _Ledger,
    snapshot: DataFrame | None,
    lease: Lease,
    dbutils_get: DbutilsGet,
) -> RunResult:
    from pyspark.sql import functions as F

    from syphon.job.reconcile import restore
    from syphon.job.replay import (
        NAMESPACE_FAULTS,
        ping_destinations,
        replay_input,
        replay_messages,
    )
    from syphon.job.settle import settle_actions, settle_queues

    root = config.audit
    progress.watch(spark)
    planned = plan_rows(spark, root, ledger.run_id).localCheckpoint(eager=True)
    if not ledger.counts:
        ledger.counts = {
            r["verdict"]: int(r["count"]) for r in planned.groupBy("verdict").count().collect()
        }
    earlier = _earlier_outcomes(spark, root, ledger.run_id)
    if snapshot is None:  # a resumed run: peek its queues again
        snapshot = _resnapshot(spark, config, planned, dbutils_get)

    clock = time.monotonic()
    todo = planned.where(F.col("verdict") == "replay")
    if earlier is not None:  # a resumed run: what it sent before is not sent again
        done = earlier.where(F.col("outcome") == "sent").select("backlog_queue", "sequence_number")
        todo = todo.join(done, ["backlog_queue", "sequence_number"], "left_anti")
    destinations = [(r["primary"], r["destination"]) for r in
                    todo.select("primary", "destination").distinct().collect()]  # fmt: skip
    progress.step(f"replay: pinging {len(destinations)} destinations")
    skipped = ping_destinations(config, destinations, dbutils_get)
    ledger.operations["replay.pings"] = len(destinations)
    ledger.timings["replay.pings"] = time.monotonic() - clock
    in_doubt = _in_doubt(spark, root)  # read before this attempt records "replaying"
    lease.check()
    ledger.record("replaying")
    failpoints.check("after_replaying")
    rows = replay_input(restore(snapshot), todo, in_doubt)
    results = replay_messages(rows, config, skipped, dbutils_get=dbutils_get,
                              failpoint=failpoints.for_task("mid_replay"))  # fmt: skip
    sends = time.monotonic()
    progress.step("replay: sending")
    results = results.localCheckpoint(eager=True)  # the sends happen here, exactly once
    ledger.timings["replay.sends"] = time.monotonic() - sends
    append_outcomes(results, planned, root, ledger.run_id, "replay", datetime.now(timezone.utc))
    failpoints.check("after_replay_commit")
    ledger.timings["replay"] = time.monotonic() - clock
    replay_stats = _stats(results, "transfers", "busy_retries")
    replay_counts = _by_outcome(replay_stats)
    ledger.operations["replay.send_transfers"] = _total(replay_stats, "transfers")
    ledger.operations["replay.busy_retries"] = _total(replay_stats, "busy_retries")
    ledger.operations["replay.messages_sent"] = replay_counts.get("sent", 0)
    ledger.record("replayed")
    failpoints.check("after_replayed")

    lease.check()  # a run that lost its lease settles nothing: the holder will
    clock = time.monotonic()
    all_sent = results if earlier is None else earlier.select(
        "backlog_queue", "sequence_number", "outcome").unionByName(
        results.select("backlog_queue", "sequence_number", "outcome"))  # fmt: skip
    actions = settle_actions(planned, all_sent)
    progress.step("settle: completing and dead-lettering in the backlog queues")
    settled = settle_queues(actions, config, ledger.run_id, dbutils_get,
                            failpoints.for_task("mid_settle"))  # fmt: skip
    settled = settled.localCheckpoint(eager=True)
    append_outcomes(settled, planned, root, ledger.run_id, "settle", datetime.now(timezone.utc))
    failpoints.check("after_settle_commit")
    ledger.timings["settle"] = time.monotonic() - clock
    settle_stats = _stats(settled, "received", "abandoned")
    settle_counts = _by_outcome(settle_stats)
    ledger.operations["settle.receives"] = _total(settle_stats, "received")
    ledger.operations["settle.completes"] = settle_counts.get("completed", 0)
    ledger.operations["settle.dead_letters"] = settle_counts.get("dead_lettered", 0)
    ledger.operations["settle.abandons"] = _total(settle_stats, "abandoned")
    ledger.operations["credits_estimated"] = _credits(ledger.operations)
    sent = ledger.operations["replay.messages_sent"]
    ledger.credits_per_message = ledger.operations["credits_estimated"] / sent if sent else None
    outcomes = {**{f"replay_{k}": v for k, v in replay_counts.items()},
                **{f"settle_{k}": v for k, v in settle_counts.items()}}  # fmt: skip
    # messages that arrived after the snapshot are the next run's work, not left-overs
    left = sum(s["count"] for s in settle_stats
               if s["outcome"] == "left" and s["detail"] != "arrived_after_snapshot")  # fmt: skip
    status = "partial" if left else "done"
    fault_details = {"namespace_fault", *NAMESPACE_FAULTS}
    faults = [side for side, stats in (("primary", replay_stats), ("secondary", settle_stats))
              if any(s["detail"] in fault_details for s in stats)]  # fmt: skip
    detail = None
    if faults:  # a namespace failed mid-run: its clients were closed, the rest waits
        status, detail = "failed", "namespace_fault: " + ", ".join(faults)
    ledger.record(status, detail=detail, final=True)
    result = RunResult(ledger.run_id, status, ledger.counts, outcomes, ledger.operations,
                       ledger.timings, detail)  # fmt: skip
    if status != "failed":
        unknown = [(r["primary"], r["destination"]) for r in planned.where(
            F.col("reason") == "destination_unknown").select("primary", "destination")
            .distinct().collect()]  # fmt: skip
        missing = [key for key, reason in skipped.items() if reason == "destination_missing"]
        _name_missing_destinations(result, sorted(unknown), sorted(missing))
    return result


def _name_missing_destinations(
    result: RunResult, unknown: list[tuple[str, str]], missing: list[tuple[str, str]]
) -> None:
    """A run that met destinations that do not exist exits 8 with a line naming them:
    ``unknown`` ones (the primary's listing lacks them: their messages were dead-lettered
    in the backlog) and ``missing`` ones (the send said not found: their messages wait
    in the backlog for the next run)."""
    if not unknown and not missing:
        return

    def names(keys: list[tuple[str, str]]) -> str:
        return ", ".join(f"{destination} on {primary}" for primary, destination in keys)

    parts = []
    if missing:
        parts.append(f"{names(missing)} (messages left in the backlog for the next run)")
    if unknown:
        parts.append(
            f"{names(unknown)} (messages dead-lettered in the backlog queues with reason "
            "destination_unknown; resubmit them from there)"
        )
    result.code = EXIT_MISSING_DESTINATION
    result.hint = (
        "a destination does not exist: create "
        + "; ".join(parts)
        + ", or correct the senders' entity names"
    )


def _failed(ledger: _Ledger, exc: BaseException) -> RunResult:
    detail = type(exc).__name__
    log.error("run %s failed: %s", ledger.run_id, detail)
    log.debug("run %s failed", ledger.run_id, exc_info=exc)  # the trace, at DEBUG only
    try:
        ledger.record("failed", detail=detail, final=True)
    except Exception:
        log.exception("run %s: the failure could not be recorded in the ledger", ledger.run_id)
    return RunResult(ledger.run_id, "failed", ledger.counts, {}, ledger.operations,
                     ledger.timings, detail)  # fmt: skip


def _discovery_operations(config: SyphonConfig, queues: list[DiscoveredQueue]) -> dict[str, int]:
    if config.backlog.discovery == "management":
        return {"discover.management_calls": 1, "discover.peeks": 0,
                "discover.backlog_queues": len(queues)}  # fmt: skip
    probes = config.backlog.probe_limit * len(config.primaries)
    return {"discover.management_calls": 0, "discover.peeks": probes,
            "discover.backlog_queues": len(queues)}  # fmt: skip


def _stats(results: DataFrame, *summed: str) -> list[dict[str, Any]]:
    """One Spark job: per (outcome, detail), the count and the sums of ``summed``."""
    from pyspark.sql import functions as F

    rows = results.groupBy("outcome", "detail").agg(
        F.count(F.lit(1)).alias("count"), *[F.sum(c).alias(c) for c in summed]
    )
    return [r.asDict() for r in rows.collect()]


def _by_outcome(stats: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in stats:
        out[s["outcome"]] = out.get(s["outcome"], 0) + int(s["count"])
    return out


def _total(stats: list[dict[str, Any]], column: str) -> int:
    return sum(int(s[column] or 0) for s in stats)


def _credits(ops: dict[str, int]) -> int:
    """Billable message operations: one per message peeked, sent, received, completed or
    dead-lettered, one per ping and per probe peek (management calls are not metered
    per message)."""
    keys = (
        "snapshot.messages_peeked", "replay.messages_sent", "settle.receives",
        "settle.completes", "settle.dead_letters", "replay.pings", "discover.peeks",
    )  # fmt: skip
    return sum(int(ops.get(k, 0)) for k in keys)


def _earlier_outcomes(spark: SparkSession, root: AuditConfig, run_id: str) -> DataFrame | None:
    """This run's replay outcomes recorded by an earlier attempt (a resumed run)."""
    from pyspark.sql import functions as F

    audit = read_audit(spark, root)
    if audit is None:
        return None
    rows = audit.where((F.col("run_id") == run_id) & (F.col("stage") == "replay"))
    if rows.limit(1).count() == 0:
        return None
    return rows.select("backlog_queue", "sequence_number", "outcome", "detail")


def _in_doubt(spark: SparkSession, root: AuditConfig) -> DataFrame | None:
    """Backlog messages whose earlier send is unknown: replay rows recorded ``in_doubt``,
    and the replay-verdict plan rows without a recorded outcome of every run that
    recorded ``replaying`` but not ``replayed`` (a crash, or an earlier attempt of a
    resumed run)."""
    from pyspark.sql import functions as F

    audit = read_audit(spark, root)
    runs = read_runs(root)
    if audit is None or not runs:
        return None
    reached = {r["run_id"] for r in runs if r["status"] == "replaying"}
    committed = {r["run_id"] for r in runs if r["status"] == "replayed"}
    crashed = sorted(reached - committed)
    doubt = audit.where((F.col("stage") == "replay") & (F.col("outcome") == "in_doubt"))
    doubt = doubt.select("backlog_queue", "sequence_number")
    if crashed:
        planned = audit.where(
            (F.col("stage") == "plan")
            & (F.col("verdict") == "replay")
            & F.col("run_id").isin(*crashed)
        ).select("run_id", "backlog_queue", "sequence_number")
        recorded = audit.where(
            (F.col("stage") == "replay") & F.col("run_id").isin(*crashed)
        ).select("run_id", "backlog_queue", "sequence_number")
        lost = planned.join(recorded, ["run_id", "backlog_queue", "sequence_number"], "left_anti")
        doubt = doubt.unionByName(lost.drop("run_id"))
    return doubt


def _resnapshot(
    spark: SparkSession, config: SyphonConfig, planned: DataFrame, dbutils_get: DbutilsGet
) -> DataFrame:
    from syphon.job.plan import read_snapshot
    from syphon.servicebus.discovery import DiscoveredQueue

    paths = [r["backlog_queue"] for r in planned.select("backlog_queue").distinct().collect()]
    queues = [DiscoveredQueue("", 0, p, None, False) for p in sorted(paths)]
    return read_snapshot(spark, config, queues, dbutils_get)


def format_run(result: RunResult) -> str:
    """What ``syphon run`` prints: the status, counts by verdict and by outcome, and the
    operations the ledger recorded."""
    lines = [f"run {result.run_id}: {result.status}"
             + (f" ({result.detail})" if result.detail else "")]  # fmt: skip
    if result.hint:
        lines.append(f"fix: {result.hint}")
    if result.counts:
        lines.append("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items())))
    if result.outcomes:
        lines.append(
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items()))
        )
    if result.operations:
        lines.append(
            "operations: " + ", ".join(f"{k} {v}" for k, v in sorted(result.operations.items()))
        )
    if result.report:
        lines.append(f"report: {result.report}")
    return "\n".join(lines)


@dataclass
class StatusReport:
    """Backlog depth per queue and the ledger's last runs."""

    queues: list[DiscoveredQueue]
    runs: list[dict[str, Any]]


def status(
    config: SyphonConfig, *, last_runs: int = 10, dbutils_get: DbutilsGet = None
) -> StatusReport:
    """Discovers the backlog queues (with their depth when the management API tells it)
    and reads the last runs' final rows from the ledger. No Spark."""
    from syphon.job.plan import discover

    queues = discover(config, dbutils_get)
    latest: dict[str, dict[str, Any]] = {}
    for row in read_runs(config.audit):
        seen = latest.get(row["run_id"])
        if seen is None or row["recorded_at"] >= seen["recorded_at"]:
            latest[row["run_id"]] = row
    runs = sorted(latest.values(), key=lambda r: r["started_at"], reverse=True)[:last_runs]
    return StatusReport(queues, runs)


def format_status(report: StatusReport) -> str:
    lines = [f"{'backlog queue':<60} {'messages':>9}"]
    for q in report.queues:
        depth = "?" if q.message_count is None else str(q.message_count)
        lines.append(f"{q.path:<60} {depth:>9}" + ("  (extra)" if q.extra else ""))
    lines.append("")
    lines.append(f"{'run':<28} {'status':<10} {'started':<20} counts")
    for r in report.runs:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(dict(r["counts"] or []).items()))
        lines.append(f"{r['run_id']:<28} {r['status']:<10} {r['started_at']:%Y-%m-%d %H:%M:%S}"
                     f" {counts}")  # fmt: skip
    if not report.runs:
        lines.append("(no runs recorded)")
    return "\n".join(lines)
