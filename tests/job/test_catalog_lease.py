"""The lease through Spark on Delta (``audit.engine: spark``): its commits in a Delta
table that Spark's Delta writes, with two drivers in two JVMs racing for it — this
process's classic session and a client of a local Spark Connect server — as two job
runs on two clusters would on Databricks. Delta's log store gives each commit its own
version (a writer that loses the put of a version retries at the next: blind appends
conflict with nothing), so every reader replays the same history and names the same
holder; the table's creation, raced too, happens once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from support.connect_server import ConnectServer
from support.lease_race import race
from syphon.core.errors import LeaseLostError
from syphon.store.catalog import SparkLeaseLog
from syphon.store.lease import Lease

pytestmark = pytest.mark.timeout(300)

HOLDERS = 3  # per driver


def test_two_drivers_racing_for_a_lease_through_spark_on_delta_agree_on_one_holder(
    spark: Any, connect_server: ConnectServer, tmp_path: Path
) -> None:
    table = f"delta.`{tmp_path / 'leases'}`"  # no table yet: both drivers create it
    support = Path(__file__).parents[1] / "support"
    other = subprocess.Popen(
        [sys.executable, str(support / "lease_race.py"), table, str(HOLDERS)],
        env={**os.environ, "SPARK_REMOTE": connect_server.remote},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert other.stdin is not None
    assert other.stdout is not None
    assert other.stdout.readline().strip() == "ready", other.stderr
    here = [
        Lease(SparkLeaseLog(table, lambda: spark), f"classic-{i}", timedelta(minutes=5))
        for i in range(HOLDERS)
    ]
    other.stdin.write("go\n")
    other.stdin.flush()
    won_here = race(here)
    out, err = other.communicate(timeout=240)
    assert other.returncode == 0, err[-3000:]
    assert out.splitlines()[-1] == "done", out
    won_there = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("won ")]

    # one holder among the six, whichever driver it ran in
    assert len(won_here) + len(won_there) == 1, (won_here, won_there)
    (winner,) = won_here + won_there
    history = SparkLeaseLog(table, lambda: spark).history()
    acquires = sorted(
        (c["version"], c["syphon.lease.holder"])
        for c in history
        if c.get("syphon.lease.action") == "acquire"
    )
    # every driver's commit is in, each at its own version, and the first one won
    assert len(acquires) == 2 * HOLDERS, err[-5000:]
    assert {h.split("-")[0] for _, h in acquires} == {"classic", "connect"}
    assert acquires[0][1] == winner
    versions = sorted(int(c["version"]) for c in history)
    assert versions == list(range(len(versions)))  # no version given twice, none skipped
    assert len(versions) == 2 * HOLDERS + 1  # one creation, however many raced for it

    # every reader, in either JVM, reads the same holder; a loser cannot renew
    assert all(lease.state().holder == winner for lease in here)
    loser = next(lease for lease in here if lease.holder != winner)
    with pytest.raises(LeaseLostError):
        loser.renew()
    assert here[0].state().holder == winner


def test_a_lease_through_spark_expires_and_the_next_run_takes_it(
    spark: Any, tmp_path: Path
) -> None:
    table = f"delta.`{tmp_path / 'leases'}`"
    crashed = Lease(SparkLeaseLog(table, lambda: spark), "crashed", timedelta(seconds=1))
    assert crashed.acquire().holder == crashed.holder
    # (that an acquire before the expiry loses: the race above and tests/unit/test_lease.py)
    successor = Lease(SparkLeaseLog(table, lambda: spark), "successor", timedelta(minutes=5))
    deadline = time.monotonic() + 30
    while crashed.ours() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert successor.acquire().holder == successor.holder
    with pytest.raises(LeaseLostError):
        crashed.renew()  # too late: the lease is the successor's
    successor.release()
    assert successor.state().holder is None
