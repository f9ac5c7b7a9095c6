"""``run`` and ``resume`` around their Spark stages, against the local Service Bus and
delta-rs tables, without Spark: the runs that start nothing (empty, busy, a backlog that
cannot be listed), what the lease does around a run, and how the final status is chosen
from a run's tallies. The stages in between are tested end to end in test_run.py,
test_run_faults.py and the crash tests; these are quick enough for mutation testing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from support.paired_env import PRIMARY, Pair, context, job_config, park_orders
from syphon.core.errors import ExitCode, SyphonError
from syphon.core.schema import Detail, Outcome, Status
from syphon.job.context import RunContext
from syphon.job.ledger import Ledger, RunResult
from syphon.job.request import run_request
from syphon.job.run.finish import Drained
from syphon.job.run.finish import finish as finish_run
from syphon.job.run.loop import _leased, run
from syphon.job.run.tally import Line, Tally
from syphon.store.lease import Lease

NO_SPARK = "this run must not start Spark"


def no_spark_context(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunContext:
    return context(job_config(pair, tmp_path, monkeypatch), lambda: pytest.fail(NO_SPARK))


def other_holder(ctx: RunContext) -> Lease:
    other = ctx.store.lease("other-run", timedelta(minutes=5))
    assert other.acquire().belongs_to(other.holder, datetime.now(timezone.utc))
    return other


def statuses(ctx: RunContext, run_id: str) -> list[str]:
    return [r.status for r in ctx.store.runs() if r.run_id == run_id]


def test_an_empty_backlog_is_an_empty_run_that_takes_no_lease(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    result = run(ctx, run_request(ctx, "empty-run"))
    assert (result.run_id, result.status, result.exit_code) == (
        "empty-run",
        Status.EMPTY,
        ExitCode.DONE,
    )
    assert statuses(ctx, "empty-run") == [Status.EMPTY]
    assert result.operations.discover_backlog_queues > 0  # discovery's figures are kept
    assert not (tmp_path / "delta" / "leases").exists()  # no lease was ever asked for


def test_a_run_that_finds_the_lease_held_is_busy_and_leaves_the_lease_and_backlog(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    parked = park_orders(pair, "busy", queues=1, per_queue=2)
    other = other_holder(ctx)

    result = run(ctx, run_request(ctx, "busy-run"))
    assert (result.status, result.exit_code) == (Status.BUSY, ExitCode.BUSY)
    assert result.detail is not None
    assert other.holder in result.detail
    assert statuses(ctx, "busy-run") == [Status.BUSY]
    assert other.ours()  # a busy run does not touch the holder's lease
    queue = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0")
    assert sorted(str(m.message_id) for m in queue.messages.values()) == sorted(parked)


def test_a_run_whose_backlog_cannot_be_listed_fails_before_the_lease(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    pair.secondary.stop()  # nothing answers at its address
    result = run(ctx, run_request(ctx, "blind-run"))
    assert result.status == Status.FAILED
    assert result.detail
    assert statuses(ctx, "blind-run") == [Status.FAILED]
    assert not (tmp_path / "delta" / "leases").exists()


def test_resume_refuses_a_run_that_was_never_planned(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    Ledger(ctx, "only-busy", datetime.now(timezone.utc)).record(Status.BUSY)
    # another run's plan is not this run's, whether its id sorts before or after
    Ledger(ctx, "another-run", datetime.now(timezone.utc)).record(Status.PLANNED)
    Ledger(ctx, "zz-later-run", datetime.now(timezone.utc)).record(Status.PLANNED)
    for run_id in ("never-seen", "only-busy"):
        with pytest.raises(SyphonError, match=f"run {run_id} was never planned"):
            run(ctx, run_request(ctx, run_id, resume=True))


def test_resume_finds_the_lease_held_and_is_busy_keeping_the_first_start(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    first = datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc)
    Ledger(ctx, "planned-run", first).record(Status.PLANNED)
    Ledger(ctx, "planned-run", first + timedelta(minutes=5)).record(Status.FAILED)
    other = other_holder(ctx)

    result = run(ctx, run_request(ctx, "planned-run", resume=True))
    assert result.status == Status.BUSY
    assert other.ours()
    (busy,) = [r for r in ctx.store.runs() if r.status == Status.BUSY]
    assert busy.started_at == first  # a resumed run is the run it resumes


def test_resume_that_fails_inside_the_lease_is_failed_and_releases_it(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse() -> None:
        raise RuntimeError("no Spark here")  # the replay's first need fails

    ctx = context(job_config(pair, tmp_path, monkeypatch), refuse)
    Ledger(ctx, "planned-run", datetime.now(timezone.utc)).record(Status.PLANNED)
    result = run(ctx, run_request(ctx, "planned-run", resume=True))
    assert (result.status, result.detail) == (Status.FAILED, "RuntimeError")
    assert statuses(ctx, "planned-run") == [Status.PLANNED, Status.FAILED]
    assert ctx.store.lease("next", timedelta(minutes=1)).state().holder is None  # released


def test_a_run_whose_session_cannot_start_fails_having_received_nothing(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session starts in the background while the run opens its queues and lists the
    primaries, and no read locks a message before it is up: a session that cannot start
    (a bad setting, run after run on a schedule) counts no delivery against the backlog."""

    def refuse() -> None:
        raise RuntimeError("no Spark here")

    park_orders(pair, "s", 2, 3)
    ctx = context(job_config(pair, tmp_path, monkeypatch), refuse)
    assert ctx.config.run.read == "once"  # a read that locks what it receives
    result = run(ctx, run_request(ctx, "no-session"))
    assert (result.status, result.detail) == (Status.FAILED, "RuntimeError")
    for i in range(2):
        stored = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/{i}").messages
        assert [(m.delivery_count, m.lock_token) for m in stored.values()] == [(0, None)] * 3
    assert ctx.store.lease("next", timedelta(minutes=1)).state().holder is None  # released


def test_the_lease_is_released_when_the_leased_work_raises(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    ledger = Ledger(ctx, "raising-run", datetime.now(timezone.utc))
    seen: list[Lease] = []

    def leased_work() -> None:
        with _leased(ctx, ledger) as lease:
            assert isinstance(lease, Lease)
            seen.append(lease)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        leased_work()
    (lease,) = seen
    assert ctx.store.lease("next", timedelta(minutes=1)).state().holder is None  # released
    assert lease._thread is not None  # the heartbeat was started, and is stopped
    assert not lease._thread.is_alive()


# --- the final status ------------------------------------------------------------------


def tally(*lines: tuple[str, str | None, int]) -> Tally:
    return Tally(("n",), tuple(Line(o, d, c, (c,)) for o, d, c in lines))


def _finish(
    ledger: Ledger,
    unknown: list[tuple[str, str]],
    skipped: dict[Any, str | None],
    replayed: Tally,
    settled: Tally,
    **more: Any,
) -> RunResult:
    """The final status of a run of one wave (``more``: Drained's other fields)."""
    drained = Drained(
        skipped=dict(skipped),
        unknown=set(unknown),
        sent=[replayed],
        settled=[settled],
        **more,
    )
    return finish_run(ledger, drained)


def finish(ctx: RunContext, replayed: Tally, settled: Tally) -> tuple[str, str | None]:
    ledger = Ledger(ctx, "finishing", datetime.now(timezone.utc))
    result = _finish(ledger, [], {}, replayed, settled)
    assert statuses(ctx, "finishing")[-1] == result.status  # recorded as returned
    return result.status, result.detail


def test_the_final_status_is_done_partial_or_failed_by_what_the_stages_left(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    sent, completed = tally((Outcome.SENT, None, 3)), tally((Outcome.COMPLETED, None, 3))
    assert finish(ctx, sent, completed) == (Status.DONE, None)
    # arriving after the snapshot is the next run's work, not a left-over
    late = tally((Outcome.COMPLETED, None, 3), (Outcome.GIVEN_BACK, None, 1))
    assert finish(ctx, sent, late) == (Status.DONE, None)
    left = tally((Outcome.COMPLETED, None, 2), (Outcome.LEFT, None, 1))
    assert finish(ctx, sent, left) == (Status.PARTIAL, None)
    # a namespace that failed mid-run fails the run, naming the side
    fault = tally((Outcome.SKIPPED, Detail.NAMESPACE_FAULT, 1), (Outcome.SENT, None, 2))
    assert finish(ctx, fault, left) == (Status.FAILED, f"{Detail.NAMESPACE_FAULT}: primary")
    down = tally((Outcome.LEFT, "ServiceBusConnectionError", 1))
    assert finish(ctx, sent, down) == (Status.FAILED, f"{Detail.NAMESPACE_FAULT}: secondary")
    both = tally((Outcome.FAILED, "ServiceBusConnectionError", 1))
    assert finish(ctx, both, tally((Outcome.LEFT, Detail.NAMESPACE_FAULT, 1))) == (
        Status.FAILED,
        f"{Detail.NAMESPACE_FAULT}: primary, secondary",
    )


def test_unknown_and_missing_destinations_give_the_run_its_exit_code_and_fix(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    sent, completed = tally((Outcome.SENT, None, 3)), tally((Outcome.COMPLETED, None, 3))
    ledger = Ledger(ctx, "finishing", datetime.now(timezone.utc))
    plain = _finish(ledger, [], {("contoso", "orders"): None}, sent, completed)
    assert (plain.code, plain.fix, plain.exit_code) == (None, None, ExitCode.DONE)

    unknown = _finish(ledger, [("contoso", "nowhere")], {}, sent, completed)
    assert unknown.code is not None
    assert unknown.code != ExitCode.DONE
    assert unknown.fix is not None
    assert "nowhere" in unknown.fix
    assert unknown.exit_code == unknown.code

    missing = _finish(
        ledger,
        [],
        {
            ("contoso", "gone"): Detail.DESTINATION_MISSING,
            ("contoso", "paused"): Detail.DESTINATION_UNAVAILABLE,
        },
        sent,
        completed,
    )
    assert missing.code is not None
    assert missing.fix is not None
    assert "gone" in missing.fix
    assert "paused" not in missing.fix


def test_a_run_stopped_at_a_waves_end_is_partial_and_says_what_it_held_back(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--max-waves or --until ends a run that sent everything it planned as partial (the
    rest of the source is the next run's), and a run of several waves names the keys and
    destinations its later waves held back."""
    ctx = no_spark_context(pair, tmp_path, monkeypatch)
    sent, completed = tally((Outcome.SENT, None, 3)), tally((Outcome.COMPLETED, None, 3))
    ledger = Ledger(ctx, "finishing", datetime.now(timezone.utc))
    stopped = _finish(ledger, [], {}, sent, completed, stopped="stopped after 1 waves")
    assert (stopped.status, stopped.detail) == (Status.PARTIAL, "stopped after 1 waves")
    drained = Drained(
        sent=[sent, sent],
        settled=[completed, completed],
        broken={
            ("contoso", "orders", "k1"): Detail.EARLIER_BATCH_FAILED,
            ("contoso", "orders", "k2"): Detail.EARLIER_BATCH_FAILED,
        },
        left_destinations={("contoso", "gone"): Detail.DESTINATION_FAILING},
    )
    held_back = finish_run(ledger, drained)
    assert held_back.status == Status.DONE
    assert held_back.detail is not None
    assert "2 keys and 1 destinations" in held_back.detail
    assert held_back.outcomes == {"replay_sent": 6, "settle_completed": 6}


def test_a_run_with_its_service_bus_io_in_the_driver_sends_peeks_and_settles_there_in_order(
    pair: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run.service_io: driver`` on a classic session: the replay's batches go out from
    the driver's own process (the test's: a sender counted here, where a Spark worker's
    would not be), the peeks and the settle too; every key in order, the backlog empty."""
    from support.paired_env import backlog_state, job_config, run_job
    from support.waves import arrived, park_spread
    from syphon.job.replay import send as replay_module
    from syphon.servicebus import sending

    sends: list[int] = []
    pool = sending.SenderPool

    class CountedPool(pool):  # type: ignore[misc,valid-type]
        def send(self, *args: Any, **kwargs: Any) -> Any:
            sends.append(1)
            return super().send(*args, **kwargs)

    monkeypatch.setattr(replay_module, "SenderPool", CountedPool)
    keys = park_spread(pair, "d", 12)
    extra = "run:\n  wave_messages: 6\n  read: peek\n  service_io: driver\n"
    config = job_config(pair, tmp_path, monkeypatch, extra=extra)
    result = run_job(config, spark, "in-the-driver")
    assert result.status == "done", result
    assert arrived(pair) == keys
    assert not any(backlog_state(pair).values())
    assert len(sends) == result.operations.replay_send_transfers
    assert sends


def test_a_run_given_its_job_run_id_writes_it_on_every_ledger_row_and_its_plans_audit_rows(
    pair: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--job-run-id`` (the bundle passes Databricks' ``{{job.run_id}}``): the run's
    ledger rows and its plan's audit rows carry it, so that a run joins the platform's
    job history; a run without it writes null, as before."""
    from support.paired_env import run_job
    from syphon.app.services import run_with_report
    from syphon.job.request import Asked, run_request
    from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
    from syphon.store.delta import read_table

    park_orders(pair, "j", 2, 2)
    config = job_config(pair, tmp_path, monkeypatch)
    ctx = context(config, spark)
    asked = Asked(job_run_id="731495")
    done = run_with_report(ctx, run_request(ctx, "with-a-job", None, asked))
    assert done.status == Status.DONE, done
    park_orders(pair, "k", 1, 1)
    assert run_job(config, spark, "without").status == Status.DONE
    root = Path(config.audit.path)
    ledger = read_table(root / RUNS_TABLE).to_pylist()
    assert {r["job_run_id"] for r in ledger if r["run_id"] == "with-a-job"} == {"731495"}
    assert {r["job_run_id"] for r in ledger if r["run_id"] == "without"} == {None}
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    mine = [r for r in audit if r["run_id"] == "with-a-job"]
    assert {r["stage"] for r in mine} == {"plan", "replay", "settle"}
    assert {r["job_run_id"] for r in mine} == {"731495"}
    assert {r["job_run_id"] for r in audit if r["run_id"] == "without"} == {None}
