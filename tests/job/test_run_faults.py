"""``syphon run`` when things go wrong mid-run: a primary or the secondary goes down, a
destination throttles, another run holds the lease."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.crash_scenario import short_locks, wait_for_the_killed_runs_locks
from support.paired_env import BACKLOG_QUEUES, PRIMARY, Pair, job_config, run_job, send_raw, stored
from support.waiting import wait_until
from syphon.core.errors import ExitCode
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)


def test_a_primary_that_goes_down_mid_run_fails_the_run_and_the_next_run_finishes(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parked = {}
    for q in range(BACKLOG_QUEUES):
        batch = []
        for i in range(8):
            mid = f"m-{q}-{i}"
            batch.append(
                to_backlog_message(
                    # 20 KB bodies: the queue's batches hold many keys, and the replay must
                    # still take several batches to fail in the middle
                    ServiceBusMessage(
                        mid.encode() + bytes(20_000), message_id=mid, partition_key=f"k{i % 4}"
                    ),
                    "orders",
                )
            )
            parked[mid] = "orders"
        send_raw(pair, q, batch)
    config = job_config(pair, tmp_path, monkeypatch)
    pair.primary.slow_down(0.3, "orders")  # a replay long enough to fail in the middle
    fault_at: list[float] = []

    def take_the_primary_down() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if pair.primary.broker.entity("orders").messages:  # some batches are through
                pair.primary.make_namespace_unavailable()
                fault_at.append(time.monotonic())
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=take_the_primary_down)
    watcher.start()
    first = run_job(config, spark)
    watcher.join()
    assert fault_at
    assert first.status == "failed", first
    assert first.exit_code == 1
    assert first.detail == "namespace_fault: primary"
    assert stored(pair, "orders")
    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    cut = {
        r["message_id"]
        for r in audit
        if r["stage"] == "replay"
        and r["outcome"] in ("in_doubt", "skipped")
        and r["run_id"] == first.run_id
    }
    assert cut  # the batches in flight or still to send when the namespace went down

    pair.primary.clear_faults()
    second = run_job(config, spark)
    assert second.status == "done", second
    assert second.operations.replay_messages_sent == len(cut)
    delivered = Counter(str(m.message_id) for m in stored(pair, "orders"))
    assert set(delivered) == set(parked)  # nothing lost
    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    resent = {r["message_id"] for r in audit if r["detail"] == "resent_in_doubt"}
    assert {m for m, n in delivered.items() if n > 1} <= resent
    assert not any(
        pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/{q}").messages
        for q in range(BACKLOG_QUEUES)
    )


def test_a_throttled_destination_backs_off_and_a_held_lease_stops_a_second_run(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta as td

    import syphon.job.run.stages
    from syphon.store.lease import Lease

    send_raw(
        pair,
        1,
        [
            to_backlog_message(
                ServiceBusMessage(f"t{i}".encode(), message_id=f"t-{i}", partition_key="k"),
                "orders",
            )
            for i in range(5)
        ],
    )
    config = job_config(pair, tmp_path, monkeypatch)

    # another run holds the lease: this one records busy and touches nothing
    other = Lease(config.audit.path, "another-run", td(minutes=5))
    assert other.acquire().holder == other.holder
    busy = run_job(config, lambda: pytest.fail("a busy run must not start Spark"))
    assert (busy.status, busy.exit_code) == ("busy", ExitCode.BUSY)
    assert busy.detail is not None
    assert "another-run" in busy.detail
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/1").messages) == 5
    other.release()

    # server busy beyond the SDK's own retries: the replay backs off and goes on
    original_probe = syphon.job.run.stages.probe_destinations

    def probe_then_throttle(*args: Any, **kwargs: Any) -> Any:
        answer = original_probe(*args, **kwargs)
        pair.primary.throttle("orders")
        threading.Timer(15.0, lambda: pair.primary.throttle("orders", busy=False)).start()
        return answer

    monkeypatch.setattr("syphon.job.run.stages.probe_destinations", probe_then_throttle)
    done = run_job(config, spark)
    assert done.status == "done", done
    assert (done.operations.replay_busy_retries or 0) >= 1
    assert [str(m.message_id) for m in stored(pair, "orders")] == [f"t-{i}" for i in range(5)]


@pytest.mark.parametrize("read", ["peek", "once"])
def test_a_secondary_that_goes_down_while_settling_fails_the_run_and_the_next_run_finishes(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    """Peeked, the settle receives again (and fails); read once, the settle's requests by
    the read's locks fail. Either way the run fails naming the secondary, nothing is
    settled, and the next run completes the sent messages as duplicates."""
    import syphon.job.read.modes

    messages = [ServiceBusMessage(f"s{i}".encode(), message_id=f"s-{i}") for i in range(4)]
    send_raw(pair, 2, [to_backlog_message(m, "orders") for m in messages])
    config = job_config(pair, tmp_path, monkeypatch, extra=f"run:\n  read: {read}\n")
    short_locks(pair)  # what the failed run held lapses before the next run
    reading = syphon.job.read.modes.Peeking if read == "peek" else syphon.job.read.modes.Receiving
    settling = reading.settle

    def settle_with_the_secondary_down(self: Any, *args: Any, **kwargs: Any) -> Any:
        pair.secondary.make_namespace_unavailable()
        # the open connections (the read's, read once) are dropped at its next tick
        wait_until(lambda: not pair.secondary.handler.drop_requested, what="the drop")
        return settling(self, *args, **kwargs)

    monkeypatch.setattr(reading, "settle", settle_with_the_secondary_down)
    first = run_job(config, spark)
    assert (first.status, first.detail) == ("failed", "namespace_fault: secondary"), first
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == [f"s-{i}" for i in range(4)]
    backlog = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/2").messages
    assert len(backlog) == 4  # sent, but nothing settled

    monkeypatch.setattr(reading, "settle", settling)
    pair.secondary.clear_faults()
    wait_for_the_killed_runs_locks(pair)
    second = run_job(config, spark)
    assert second.status == "done", second
    assert second.counts == {"duplicate": 4}  # already replayed: completed, not sent again
    assert not backlog
    assert len(stored(pair, "orders")) == 4


def test_a_run_that_loses_its_lease_settles_nothing_and_the_next_run_finishes(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import datetime, timedelta, timezone

    from syphon.store.lease import Lease

    messages = [ServiceBusMessage(f"l{i}".encode(), message_id=f"l-{i}") for i in range(3)]
    send_raw(pair, 1, [to_backlog_message(m, "orders") for m in messages])
    config = job_config(pair, tmp_path, monkeypatch, extra="run:\n  lease_seconds: 10\n")
    root = Path(config.audit.path)
    leases: list[Lease] = []
    start_heartbeat = Lease.start_heartbeat

    def recorded(lease: Lease) -> None:
        leases.append(lease)
        start_heartbeat(lease)

    taken: list[Lease] = []

    def stall_after_the_replay(name: str) -> None:
        """The run stalls after its replay is recorded (its heartbeat with it) longer
        than its lease, and another run takes the lease meanwhile."""
        if name != "after_replayed" or taken:
            return  # once
        (lease,) = leases
        lease.stop_heartbeat()
        deadline = time.monotonic() + 60
        while (lease.state().expires_at or datetime.min.replace(tzinfo=timezone.utc)) >= (
            datetime.now(timezone.utc)
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        other = Lease(root, "other-run", timedelta(minutes=5))
        assert other.acquire().holder == other.holder
        taken.append(other)

    monkeypatch.setattr(Lease, "start_heartbeat", recorded)
    monkeypatch.setattr("syphon.obs.failpoints.check", stall_after_the_replay)
    first = run_job(config, spark)
    assert taken
    assert (first.status, first.detail, first.exit_code) == ("failed", "LeaseLostError", 1)
    assert first.fix is not None
    assert "run.lease_seconds (10 s)" in first.fix
    # sent, but nothing settled: the backlog keeps every message, the audit no settle row
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == ["l-0", "l-1", "l-2"]
    backlog = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/1").messages
    assert len(backlog) == 3
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    mine = [r for r in audit if r["run_id"] == first.run_id]
    assert {r["stage"] for r in mine} == {"plan", "replay"}
    # the loser's release at its end left the new holder's lease alone
    (other,) = taken
    assert other.ours()

    # the holder ends; the next run settles what was sent and sends nothing again
    other.release()
    leases.clear()
    second = run_job(config, spark)
    assert second.status == "done", second
    assert second.counts == {"duplicate": 3}
    assert not backlog
    assert len(stored(pair, "orders")) == 3


def test_after_a_crash_with_the_default_lease_the_next_run_starts_within_two_minutes(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``syphon run`` process killed with SIGKILL right after it took its lease (the
    config says nothing of the lease): a run started at once is busy and says until when;
    that is within run.lease_seconds' default of the kill, so the next scheduled run is
    not blocked for long."""
    import os
    import subprocess
    from datetime import datetime, timedelta, timezone

    from support.crash_scenario import SYPHON, assert_killed
    from syphon.core.config import LEASE_SECONDS_DEFAULT
    from syphon.store.lease import LEASES_TABLE, Lease

    send_raw(pair, 1, [to_backlog_message(ServiceBusMessage(b"x", message_id="x-1"), "orders")])
    config = job_config(pair, tmp_path, monkeypatch)
    assert config.run.lease_seconds == LEASE_SECONDS_DEFAULT <= 120
    conf = str(tmp_path / "syphon.yaml")
    killed = subprocess.Popen(
        [str(SYPHON), "run", "--config", conf, "--run-id", "killed"],
        env={**os.environ, "SYPHON_FAILPOINT": "after_lease"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert_killed(killed, "after_lease")
    killed_at = datetime.now(timezone.utc)

    state = Lease(config.audit.path, "reader", timedelta(seconds=1)).state()
    assert state.holder is not None
    assert state.holder.startswith("killed#")
    assert state.expires_at is not None
    assert killed_at < state.expires_at <= killed_at + timedelta(seconds=LEASE_SECONDS_DEFAULT)
    assert (tmp_path / "delta" / LEASES_TABLE).is_dir()

    busy = subprocess.run(
        [str(SYPHON), "run", "--config", conf, "--run-id", "next"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert busy.returncode == ExitCode.BUSY, busy.stderr[-2000:]
    expiry = f"{state.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    assert f"its lease expires at {expiry}" in busy.stdout
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/1").messages) == 1
