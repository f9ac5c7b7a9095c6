"""Crash safety across waves: ``syphon run`` drained in waves, killed with SIGKILL in the
middle of its second wave's replay (a real process, its own Spark), then run again.

The first wave is untouched by the kill: its plan, sends and settlements are committed
and its messages gone from the backlog. The next run reads the second wave's journal
into the audit first: what it journaled as sent is not sent again, and only the
transfer the kill cut off is in doubt — sent again and marked ``resent_in_doubt``, each
mark a message that had arrived. The next run finishes everything."""

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
    settled_safely,
    short_locks,
    wait_for_the_killed_runs_locks,
)
from support.paired_env import job_config, make_pair, run_job
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(600)


def test_a_run_killed_in_its_second_wave_leaves_the_first_done_and_the_next_run_finishes(
    servicebus_emulator: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    config = job_config(
        pair, tmp_path, monkeypatch, extra="run:\n  lease_seconds: 10\n  wave_messages: 12\n"
    )
    root = Path(config.audit.path)
    short_locks(pair)  # read once: the killed run's locks lapse before the next run
    sent: dict[str, str] = {}
    for r in range(3):  # three rounds, each a time apart: three waves at least
        add_round(pair, r, sent)

    kill_with_sigkill(tmp_path, "mid_replay:1@2")  # wave 2: after its first batch

    runs = read_table(root / RUNS_TABLE).to_pylist()
    (killed,) = {r["run_id"] for r in runs}
    waves = {r["wave"]: r["status"] for r in runs if r["status"] == "planned"}
    assert sorted(waves) == [1, 2], runs
    replayed_waves = [r["wave"] for r in runs if r["status"] == "replayed"]
    assert replayed_waves == [1]
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    planned_at = sorted({r["recorded_at"] for r in audit if r["stage"] == "plan"})
    assert len(planned_at) == 2  # one plan per wave
    first = {
        r["message_id"] for r in audit if r["stage"] == "plan" and r["recorded_at"] == planned_at[0]
    }
    second = {
        r["message_id"] for r in audit if r["stage"] == "plan" and r["recorded_at"] == planned_at[1]
    }
    assert first
    assert second
    # the first wave is done: settled, gone from the backlog
    settled = {
        r["message_id"]
        for r in audit
        if r["stage"] == "settle" and r["outcome"] in ("completed", "dead_lettered")
    }
    assert first <= settled
    assert not first & backlog_ids(pair)
    # nothing left the backlog without its outcome in the audit
    gone = (set(sent) | {f"bad-r{i}" for i in range(3)}) - backlog_ids(pair)
    assert gone <= settled_safely(root)
    sent_before_kill = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}
    in_flight = {m for d in sent_before_kill for m in sent_before_kill[d]} - first
    assert in_flight  # the kill came after wave 2 sent a batch
    assert in_flight <= second

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
    # the journal made the doubt precise: only the transfer the kill cut off is in
    # doubt, and every mark is a message that had arrived; what wave 2 journaled as
    # sent is recorded so (for the interrupted run) and not sent again
    assert marked
    assert marked <= in_flight
    recovered = {
        r["message_id"]
        for r in audit
        if r["run_id"] == killed and r["stage"] == "replay" and r["outcome"] == "sent"
    }
    assert in_flight - marked <= recovered - first
    twice = Counter({m: n for m, n in orders.items() if n > 1})
    assert set(twice) <= marked
    runs = read_table(root / RUNS_TABLE).to_pylist()
    recovery = sorted(
        (r for r in runs if r["run_id"] == killed and r["status"] == "replayed"),
        key=lambda r: r["recorded_at"],
    )
    assert [r["wave"] for r in recovery] == [1, 2]
    assert "recovered from its journal" in (recovery[-1]["detail"] or "")
