"""Crash safety of a run that reads its source once (``run.read: once``): ``syphon run``
in waves, killed with SIGKILL in the middle of its second wave's replay, while its
receivers hold the second wave (and the read-ahead of the third) locked.

The kill severs the receivers' connections: the service keeps what they held locked
until the locks lapse (the backlog queues' lock duration, 3 s here), and nothing leaves
the backlog without its outcome in the audit. The next run reads the journal into the
audit, receives the lapsed messages again (one more delivery each), marks only the
transfer the kill cut off as in doubt, and finishes everything."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from servicebus_emulator import QueueSpec
from support.crash_scenario import (
    UNIQUE,
    add_round,
    backlog_ids,
    destination_ids,
    everything_home,
    free_the_killed_runs_lease,
    kill_with_sigkill,
    locked,
    settled_safely,
    short_locks,
    wait_for_the_killed_runs_locks,
)
from support.paired_env import job_config, make_pair, run_job
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(600)


def test_a_read_once_run_killed_mid_wave_loses_nothing_and_the_next_run_finishes(
    servicebus_emulator: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    short_locks(pair)
    extra = "run:\n  lease_seconds: 10\n  wave_messages: 12\n  read: once\n"
    config = job_config(pair, tmp_path, monkeypatch, extra=extra)
    root = Path(config.audit.path)
    sent: dict[str, str] = {}
    for r in range(3):  # three rounds, each a time apart: three waves at least
        add_round(pair, r, sent)

    kill_with_sigkill(tmp_path, "mid_replay:1@2")  # wave 2: after its first batch

    # what the killed run held is still locked, and nothing left the backlog unsafely
    assert locked(pair) > 0
    gone = (set(sent) | {f"bad-r{i}" for i in range(3)}) - backlog_ids(pair)
    assert gone
    assert gone <= settled_safely(root)
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    planned_at = sorted({r["recorded_at"] for r in audit if r["stage"] == "plan"})
    assert len(planned_at) == 2  # one plan per wave
    first = {
        r["message_id"] for r in audit if r["stage"] == "plan" and r["recorded_at"] == planned_at[0]
    }
    assert not first & backlog_ids(pair)  # the first wave is done
    in_flight = {m for d in ("orders", UNIQUE) for m in destination_ids(pair, d)} - first
    assert in_flight  # the kill came after wave 2 sent a batch

    free_the_killed_runs_lease(root)
    wait_for_the_killed_runs_locks(pair)
    last = run_job(config, spark, "after-the-kill")
    assert last.status == "done", last

    orders, _ = everything_home(pair, sent)
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    marked = {
        r["message_id"]
        for r in audit
        if r["run_id"] == "after-the-kill" and r["detail"] == "resent_in_doubt"
    }
    # only the transfer the kill cut off is in doubt, and every mark had arrived
    assert marked
    assert marked <= in_flight
    twice = Counter({m: n for m, n in orders.items() if n > 1})
    assert set(twice) <= marked
    assert not backlog_ids(pair)
    assert last.operations.snapshot_messages_peeked == 0
