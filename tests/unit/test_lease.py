"""The run lease in Delta: one holder at a time, a crashed holder expires."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from support.lease_race import race
from support.waiting import wait_until
from syphon.store.lease import (
    Lease,
    LeaseLostError,
    LeaseState,
    heartbeat_interval,
    replay_history,
)


def test_many_runs_asking_at_once_get_exactly_one_holder(tmp_path: Path) -> None:
    leases = [Lease(tmp_path, f"run-{i}", timedelta(minutes=5)) for i in range(6)]
    Lease(tmp_path, "creator", timedelta(seconds=1)).release()  # the table exists
    won = race(leases)
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
    wait_until(lambda: not crashed.ours(), what="the crashed holder's lease to expire")
    successor = Lease(tmp_path / "b", "successor", timedelta(minutes=5))
    assert successor.acquire().holder == successor.holder
    with pytest.raises(LeaseLostError):  # the old holder cannot take it back
        crashed.renew()
    assert successor.ours()


def test_the_heartbeat_keeps_a_short_lease(tmp_path: Path) -> None:
    lease = Lease(tmp_path, "busy", timedelta(seconds=3))
    first = lease.acquire().expires_at
    assert first is not None
    lease.start_heartbeat()
    try:
        # wait for renewals that carry the expiry past the first TTL (no timed assert: a
        # loaded machine only makes the wait longer)
        wait_until(
            lambda: (lease.state().expires_at or first) > first + timedelta(seconds=1.5),
            timeout=60,
            what="the heartbeat to renew the lease",
        )
        lease.check()
        other = Lease(tmp_path, "other", timedelta(minutes=1))
        assert other.acquire().holder == lease.holder
    finally:
        lease.release()
    assert lease.state().holder is None


T0 = 1_800_000_000_000  # ms: 2027-01-15T08:00:00Z


def _commit(version: int, second: int, holder: str, action: str, until: int) -> dict[str, object]:
    """A lease commit at ``T0 + second`` whose expiry is ``T0 + until`` (seconds)."""
    expires = datetime.fromtimestamp(T0 / 1000 + until, tz=timezone.utc).isoformat()
    return {
        "version": version,
        "timestamp": T0 + 1000 * second,
        "syphon.lease.holder": holder,
        "syphon.lease.action": action,
        "syphon.lease.expires": expires,
    }


def _at(second: float) -> datetime:
    return datetime.fromtimestamp(T0 / 1000 + second, tz=timezone.utc)


def test_history_rules() -> None:
    history = [
        {"version": 0, "timestamp": T0},  # the table's creation
        _commit(2, 2, "b", "acquire", 59),  # a holds: refused
        _commit(1, 1, "a", "acquire", 10),
        _commit(3, 3, "a", "renew", 30),
    ]
    assert replay_history(history) == LeaseState("a", _at(30))


@pytest.mark.parametrize("other", ["0-sorts-before", "z-sorts-after"])
def test_only_the_holder_renews_or_releases_and_a_second_acquire_changes_nothing(
    other: str,
) -> None:
    history = [_commit(1, 1, "m", "acquire", 10)]
    for version, action in enumerate(("renew", "release", "acquire"), start=2):
        history.append(_commit(version, version, other, action, 50))
        assert replay_history(history) == LeaseState("m", _at(10)), (other, action)
    history.append(_commit(9, 5, "m", "acquire", 60))  # the holder asks again
    assert replay_history(history) == LeaseState("m", _at(10))


def test_a_late_renew_does_not_take_an_expired_lease_back() -> None:
    history = [_commit(1, 1, "a", "acquire", 10), _commit(2, 20, "a", "renew", 40)]
    state = replay_history(history)
    assert state == LeaseState("a", _at(10))  # not extended: it had expired
    assert not state.belongs_to("a", _at(21))
    # and it is free: the next acquire wins
    history.append(_commit(3, 21, "b", "acquire", 50))
    assert replay_history(history) == LeaseState("b", _at(50))


def test_a_renew_at_the_last_moment_extends_and_an_acquire_then_loses() -> None:
    history = [_commit(1, 1, "a", "acquire", 10), _commit(2, 10, "a", "renew", 40)]
    assert replay_history(history) == LeaseState("a", _at(40))  # expiry == commit time
    history = [_commit(1, 1, "a", "acquire", 10), _commit(2, 10, "b", "acquire", 40)]
    assert replay_history(history) == LeaseState("a", _at(10))  # not free yet


def test_a_lease_is_held_until_its_expiry_not_at_it() -> None:
    state = LeaseState("a", _at(10))
    assert state.belongs_to("a", _at(9.999))
    assert not state.belongs_to("a", _at(10))
    assert not state.belongs_to("b", _at(5))
    assert not LeaseState("a", None).belongs_to("a", _at(5))
    assert not LeaseState(None, None).belongs_to("a", _at(5))


def test_an_action_this_version_does_not_know_changes_nothing() -> None:
    history = [_commit(1, 1, "a", "acquire", 10), _commit(2, 20, "b", "abort", 50)]
    assert replay_history(history) == LeaseState("a", _at(10))
    history = [_commit(1, 1, "a", "acquire", 10), _commit(2, 5, "a", "abort", 50)]
    assert replay_history(history) == LeaseState("a", _at(10))
    # nor one that sorts after the known ones (a holder's "transfer" is not a renew)
    history = [_commit(1, 1, "a", "acquire", 10), _commit(2, 5, "a", "transfer", 50)]
    assert replay_history(history) == LeaseState("a", _at(10))
    # a commit that names an action but no holder (not syphon's) is not an acquire
    nameless = _commit(1, 1, "a", "acquire", 10)
    del nameless["syphon.lease.holder"]
    assert replay_history([nameless]) == LeaseState(None, None)


def test_the_heartbeat_renews_three_times_per_ttl_and_at_most_every_50_ms() -> None:
    assert heartbeat_interval(timedelta(seconds=10)) == pytest.approx(10 / 3)
    assert heartbeat_interval(timedelta(seconds=0.06)) == 0.05


def test_a_process_that_ends_without_releasing_does_not_wait_for_its_heartbeat(
    tmp_path: Path,
) -> None:
    """A run that dies without its ``finally`` (the interpreter ending) is not kept
    alive by its heartbeat thread; its lease then expires."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from datetime import timedelta\n"
        "from syphon.store.lease import Lease\n"
        f"lease = Lease({str(tmp_path)!r}, 'quitter', timedelta(seconds=3))\n"
        "lease.acquire()\n"
        "lease.start_heartbeat()\n"
        "sys.exit(0)\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], timeout=30, check=False)
    assert ended.returncode == 0
    assert Lease(tmp_path, "observer", timedelta(seconds=1)).state().holder.startswith("quitter")


def test_a_failed_renewal_write_is_retried_at_the_next_beat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = Lease(tmp_path, "flaky", timedelta(seconds=3))  # beats every second
    lease.acquire()
    calls: list[int] = []
    second = threading.Event()
    renew = lease.renew

    def flaky_renew() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the store did not answer")
        second.set()
        renew()

    monkeypatch.setattr(lease, "renew", flaky_renew)
    lease.start_heartbeat()
    try:
        assert second.wait(timeout=30), "the heartbeat stopped after a failed write"
        assert not lease.lost
    finally:
        lease.release()


def test_the_state_is_a_value_nobody_changes() -> None:
    from dataclasses import FrozenInstanceError

    with pytest.raises(FrozenInstanceError):
        LeaseState("a", _at(10)).holder = "b"  # type: ignore[misc]


def _wait_until_expired(lease: Lease, timeout: float = 30.0) -> None:
    """Waits (polling the lease's own state) until its expiry has passed."""
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
    assert holder.ours()
    holder.check()  # still its own
    assert other.acquire().holder == holder.holder  # and still not free


def test_check_fails_once_another_run_took_the_expired_lease(tmp_path: Path) -> None:
    # long enough that a loaded machine still holds it at the first check
    stalled = Lease(tmp_path, "stalled", timedelta(seconds=3))
    stalled.acquire()
    stalled.check()  # held: no error
    _wait_until_expired(stalled)  # a run that stalled longer than its lease
    thief = Lease(tmp_path, "next", timedelta(minutes=5))
    assert thief.acquire().holder == thief.holder
    with pytest.raises(LeaseLostError, match="was lost"):
        stalled.check()
    stalled.release()  # the loser's release leaves the new holder alone
    assert thief.ours()


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
    assert thief.ours()
