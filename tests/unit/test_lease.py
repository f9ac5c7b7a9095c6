"""The run lease in Delta: one holder at a time, a crashed holder expires."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from syphon.store.lease import Lease, LeaseLostError, replay_history


def test_many_runs_asking_at_once_get_exactly_one_holder(tmp_path: Path) -> None:
    leases = [Lease(tmp_path, f"run-{i}", timedelta(minutes=5)) for i in range(6)]
    Lease(tmp_path, "creator", timedelta(seconds=1)).release()  # the table exists
    won: list[str] = []
    start = threading.Barrier(len(leases))

    def ask(lease: Lease) -> None:
        start.wait()
        lease.acquire()
        if lease.held():
            won.append(lease.holder)

    threads = [threading.Thread(target=ask, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(won) == 1
    # every reader agrees on the holder
    assert {lease.state().holder for lease in leases} == {won[0]}


def test_a_released_lease_is_free_and_a_crashed_one_expires(tmp_path: Path) -> None:
    first = Lease(tmp_path, "first", timedelta(minutes=5))
    assert first.acquire().holder == first.holder
    second = Lease(tmp_path, "second", timedelta(minutes=5))
    assert second.acquire().holder == first.holder  # first still holds it
    first.release()
    assert second.acquire().holder == second.holder

    # a holder that stops renewing (crashed) loses the lease once it expires
    crashed = Lease(tmp_path / "b", "crashed", timedelta(seconds=0.3))
    assert crashed.acquire().holder == crashed.holder
    time.sleep(0.5)
    successor = Lease(tmp_path / "b", "successor", timedelta(minutes=5))
    assert successor.acquire().holder == successor.holder
    with pytest.raises(LeaseLostError):  # the old holder cannot take it back
        crashed.renew()
    assert successor.held()


def test_the_heartbeat_keeps_a_short_lease(tmp_path: Path) -> None:
    lease = Lease(tmp_path, "busy", timedelta(seconds=0.6))
    lease.acquire()
    lease.start_heartbeat()
    try:
        time.sleep(1.5)  # longer than the TTL: only renewals keep it
        lease.check()
        other = Lease(tmp_path, "other", timedelta(minutes=1))
        assert other.acquire().holder == lease.holder
    finally:
        lease.release()
    assert lease.state().holder is None


def test_history_rules() -> None:
    def commit(version: int, ms: int, holder: str, action: str, expires: str) -> dict[str, object]:
        return {"version": version, "timestamp": ms, "syphon.lease.holder": holder,
                "syphon.lease.action": action, "syphon.lease.expires": expires}  # fmt: skip

    t0 = 1_800_000_000_000
    iso = "2027-01-15T08:00:{:02d}+00:00"
    history = [
        {"version": 0, "timestamp": t0},  # the table's creation
        commit(2, t0 + 2000, "b", "acquire", iso.format(59)),  # a holds: refused
        commit(1, t0 + 1000, "a", "acquire", iso.format(10)),
        commit(3, t0 + 3000, "a", "renew", iso.format(30)),
    ]
    state = replay_history(history)
    assert state.holder == "a"
    assert state.expires_at is not None
    assert state.expires_at.second == 30


def _wait_until_expired(lease: Lease, timeout: float = 30.0) -> None:
    """Waits (polling the lease's own state) until its expiry has passed."""
    from datetime import datetime, timezone

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        expires = lease.state().expires_at
        if expires is None or expires < datetime.now(timezone.utc):
            return
        time.sleep(0.05)
    raise AssertionError("the lease never expired")


def test_a_release_by_someone_else_leaves_the_lease_with_its_holder(tmp_path: Path) -> None:
    holder = Lease(tmp_path, "holder", timedelta(minutes=5))
    assert holder.acquire().holder == holder.holder
    other = Lease(tmp_path, "other", timedelta(minutes=5))
    other.release()  # a run that never held it, ending
    assert other.state().holder == holder.holder
    assert holder.held()
    holder.check()  # still its own
    assert other.acquire().holder == holder.holder  # and still not free


def test_check_fails_once_another_run_took_the_expired_lease(tmp_path: Path) -> None:
    stalled = Lease(tmp_path, "stalled", timedelta(seconds=0.3))
    stalled.acquire()
    stalled.check()  # held: no error
    _wait_until_expired(stalled)  # a run that stalled longer than its lease
    thief = Lease(tmp_path, "next", timedelta(minutes=5))
    assert thief.acquire().holder == thief.holder
    with pytest.raises(LeaseLostError, match="was lost"):
        stalled.check()
    stalled.release()  # the loser's release leaves the new holder alone
    assert thief.held()


def test_the_heartbeat_remembers_a_lost_lease_and_stops_renewing(tmp_path: Path) -> None:
    lease = Lease(tmp_path, "slow", timedelta(seconds=0.3))
    lease.acquire()
    _wait_until_expired(lease)
    thief = Lease(tmp_path, "next", timedelta(minutes=5))
    assert thief.acquire().holder == thief.holder
    lease.start_heartbeat()
    lease._thread.join(timeout=30)  # its first renewal finds the lease gone, and it ends
    assert not lease._thread.is_alive()
    assert lease.lost is True
    with pytest.raises(LeaseLostError):
        lease.check()
    assert thief.held()
