"""Crash safety of a run that reads its source once (``run.read: once``): ``syphon run``
in waves, killed with SIGKILL in the middle of its second wave's replay, while its
receivers hold the second wave (and the read-ahead of the third) locked.

The kill severs the receivers' connections: the service keeps what they held locked
until the locks lapse (the backlog queues' lock duration, 3 s here), and nothing leaves
the backlog without its outcome in the audit. The next run reads the journal into the
audit, receives the lapsed messages again (one more delivery each), marks only the
transfer the kill cut off as in doubt, and finishes everything."""

from __future__ import annotations

import os
import signal
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
    start_killed_run,
    wait_for_the_killed_runs_locks,
)
from support.paired_env import job_config, make_pair, run_job
from support.waiting import wait_until
from syphon.core.errors import ExitCode
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
    # the next run receives what is left once; its gap check peeks the holes the killed
    # run's completions left, a message each, far fewer than it receives
    ops = last.operations
    assert (ops.snapshot_messages_peeked or 0) * 4 <= (ops.snapshot_messages_received or 0)


def _java_under(pid: int) -> int | None:
    """The pid of the Java process under ``pid`` (its Spark JVM), if one runs yet."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        child = int(stat.parent.name)
        names[child] = name
        children.setdefault(int(rest.split()[1]), []).append(child)
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        if names.get(child) == "java":
            return child
        todo += children.get(child, [])
    return None


def test_a_run_whose_spark_jvm_dies_mid_wave_says_so_and_the_next_run_finishes(
    servicebus_emulator: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's JVM killed under a read-once run while it holds a wave locked (as the
    kernel's OOM killer, or an OutOfMemoryError, ends it): the run exits 1 naming Spark's
    JVM and the driver's memory, not an unreachable namespace; what it held goes back to
    the backlog, and the next run brings everything home."""
    pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    short_locks(pair)
    extra = "run:\n  lease_seconds: 10\n  wave_messages: 12\n  read: once\n"
    config = job_config(pair, tmp_path, monkeypatch, extra=extra)
    sent: dict[str, str] = {}
    for r in range(3):
        add_round(pair, r, sent)

    run = start_killed_run(tmp_path, "none")  # no fail point is named "none"
    wait_until(lambda: locked(pair) > 0 or run.poll() is not None, timeout=180, what="a wave")
    java = _java_under(run.pid)
    assert run.poll() is None
    assert java is not None
    os.kill(java, signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=240)
    said = stdout + stderr
    assert run.returncode == ExitCode.FAILED, said[-3000:]
    assert "Spark's JVM is gone" in said, said[-3000:]
    assert "fix: Spark's JVM exited under the run" in said, said[-3000:]
    assert "cannot be reached" not in said, said[-3000:]

    free_the_killed_runs_lease(Path(config.audit.path))
    wait_for_the_killed_runs_locks(pair)
    last = run_job(config, spark, "after-the-jvm")
    assert last.status == "done", last
    everything_home(pair, sent)


def test_a_run_killed_after_its_settle_removed_everything_has_its_outcomes_recorded_next(
    servicebus_emulator: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed inside its settle once the settle had removed every message, before the
    settle's rows were committed: the backlog is empty. The next run is not ``empty``:
    it reads the settle's journal and records, in the killed run's name, the outcome of
    every message the killed settle removed; nothing is sent again."""
    pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    config = job_config(pair, tmp_path, monkeypatch, extra="run:\n  read: once\n")
    root = Path(config.audit.path)
    sent: dict[str, str] = {}
    add_round(pair, 0, sent)  # 16 to send and one invalid: 17 removals
    kill_with_sigkill(tmp_path, f"mid_settle:{len(sent) + 1}")
    assert not backlog_ids(pair)  # the settle removed everything
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    (killed,) = {r["run_id"] for r in audit}
    assert not [r for r in audit if r["stage"] == "settle"]

    free_the_killed_runs_lease(root)
    before = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}
    last = run_job(config, spark, "after-the-settle")
    assert last.status == "done", last
    assert {d: destination_ids(pair, d) for d in ("orders", UNIQUE)} == before
    audit = read_table(root / AUDIT_TABLE).to_pylist()
    settled = {
        r["message_id"]: r["outcome"]
        for r in audit
        if r["stage"] == "settle" and r["run_id"] == killed
    }
    assert settled == {**dict.fromkeys(sent, "completed"), "bad-r0": "dead_lettered"}
    # a second recovery finds nothing left to do: the journal is gone
    again = run_job(config, spark, "once-more")
    assert again.status == "empty", again
