"""Whole runs with ``audit.path`` on Blob storage (Azurite, tests/support/azurite.py): the plan,
the run, its report, ``syphon status``, the notebook's reads, a run killed mid-replay
while a second run finds the lease held, and the run after it. Nothing is written to the
local disk: the audit, the ledger, the lease and the report are all in the container,
written by the driver and by Spark's tasks through delta-rs's object store.

Azurite has no ADLS (``dfs``) endpoint; ``abfss://`` URIs reach it all the same (the
object store speaks the Blob API for both), so one test uses each spelling."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator import QueueSpec
from support.azurite import BlobAudit
from support.crash_scenario import (
    UNIQUE,
    add_round,
    assert_killed,
    backlog_ids,
    destination_ids,
    everything_home,
    free_the_killed_runs_lease,
    settled_safely,
    short_locks,
    start_killed_run,
    wait_for_the_killed_runs_locks,
)
from support.paired_env import Pair, context, job_config, run_job, send_raw
from syphon.app import notebook
from syphon.app.cli import main
from syphon.app.storage import resolve_location
from syphon.core.errors import ExitCode
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table
from syphon.store.lease import LEASES_TABLE, Lease
from syphon.store.location import Location

pytestmark = pytest.mark.timeout(420)


def test_plan_run_status_report_and_the_notebook_reads_on_blob_storage(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    blob_audit: BlobAudit,
) -> None:
    def msg(mid: str, key: str) -> Any:
        return to_backlog_message(
            ServiceBusMessage(mid.encode(), message_id=mid, partition_key=key), "orders"
        )

    send_raw(pair, 0, [msg("a1", "a"), msg("b1", "b"), msg("a2", "a")])
    send_raw(pair, 1, [msg("a3", "a"), msg("b2", "b")])
    config = job_config(pair, tmp_path, monkeypatch, audit=blob_audit.audit_yaml("wasbs"))
    monkeypatch.chdir(tmp_path)
    uri = blob_audit.uri("wasbs")
    yaml = str(tmp_path / "syphon.yaml")

    assert main(["plan", "--config", yaml]) == 0
    planned = capsys.readouterr().out
    root = resolve_location(config.audit)
    plan_rows = read_table(root.child(AUDIT_TABLE)).to_pylist()
    assert sorted(r["message_id"] for r in plan_rows) == ["a1", "a2", "a3", "b1", "b2"]
    run_id = plan_rows[0]["run_id"]
    assert run_id in planned

    # the notebook's reads of that plan, through Spark's tasks reading the container
    ctx = context(config, spark)
    params = notebook.parameters(config=yaml, message_id="a2")
    verdicts = notebook.verdicts(ctx, params, run_id)
    assert verdicts[["destination", "verdict", "messages"]].values.tolist() == [
        ["orders", "replay", 5]
    ]
    assert list(notebook.audit_for(ctx, params)["message_id"]) == ["a2"]

    assert main(["run", "--config", yaml]) == ExitCode.DONE
    ran = capsys.readouterr()
    ids = [str(m.message_id) for m in _stored(pair)]
    assert sorted(ids) == ["a1", "a2", "a3", "b1", "b2"]
    for key in "ab":  # each key's order kept
        assert [i for i in ids if i[0] == key] == sorted(i for i in ids if i[0] == key)
    report = [line for line in ran.out.splitlines() if "/reports/" in line]
    assert len(report) == 1
    assert f"{uri}/reports/" in report[0]
    run = max(read_table(root.child(RUNS_TABLE)).to_pylist(), key=lambda r: r["recorded_at"])
    assert run["status"] == "done"
    page = root.read_bytes(f"reports/{run['run_id']}.html").decode("utf-8")
    assert run["run_id"] in page
    assert not backlog_ids(pair)

    assert main(["status", "--config", yaml]) == 0
    status = capsys.readouterr().out
    assert run["run_id"] in status
    assert "done" in status

    # nothing went to the local disk; no key anywhere in what was printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["syphon.yaml"]
    printed = planned + ran.out + ran.err + status
    assert blob_audit.azurite.key not in printed
    assert uri in printed


def _stored(pair: Pair) -> list[Any]:
    entity = pair.primary.broker.entity("orders")
    return [entity.messages[n] for n in sorted(entity.messages)]


def test_a_run_killed_mid_replay_on_abfss_holds_off_a_second_run_and_the_next_finishes(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    blob_audit: BlobAudit,
) -> None:
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    config = job_config(
        pair,
        tmp_path,
        monkeypatch,
        audit=blob_audit.audit_yaml("abfss"),
        extra="run:\n  lease_seconds: 10\n",
    )
    root = resolve_location(config.audit)
    short_locks(pair)  # read once: the killed run's locks lapse before the next run
    sent: dict[str, str] = {}
    add_round(pair, 0, sent)
    add_round(pair, 1, sent)  # four batches per destination: the kill falls among them
    before = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}

    killed = start_killed_run(tmp_path, "mid_replay:3")
    deadline = time.monotonic() + 180
    while _holder(root) is None:
        assert killed.poll() is None, "the run ended before it took the lease"
        assert time.monotonic() < deadline, "the run never took the lease"
        time.sleep(0.05)
    # a second run at once: the lease on the container is held, it touches nothing
    second = run_job(config, lambda: pytest.fail("a busy run must not start Spark"))
    assert (second.status, second.exit_code) == ("busy", ExitCode.BUSY)
    assert_killed(killed, "mid_replay:3")

    gone = (set(sent) | {"bad-r0", "bad-r1"}) - backlog_ids(pair)
    assert gone <= settled_safely(root), gone - settled_safely(root)
    after_kill = {d: destination_ids(pair, d) for d in ("orders", UNIQUE)}
    assert any(after_kill[d] != before[d] for d in after_kill)  # it had sent batches
    free_the_killed_runs_lease(root)
    wait_for_the_killed_runs_locks(pair)

    last = run_job(config, spark)
    assert last.status == "done", last
    orders, _ = everything_home(pair, sent)
    audit = read_table(root.child(AUDIT_TABLE)).to_pylist()
    resent = {r["message_id"] for r in audit if r["detail"] == "resent_in_doubt"}
    assert {m for m, n in Counter(orders).items() if n > 1} <= resent
    statuses = [r["status"] for r in read_table(root.child(RUNS_TABLE)).to_pylist()]
    assert "busy" in statuses
    assert statuses.count("done") == 1


def _holder(root: Location) -> str | None:
    """Who holds the lease on ``root`` now (None before the first acquire)."""
    if not root.child(LEASES_TABLE).is_table():
        return None
    return Lease(root, "observer", timedelta(seconds=1)).state().holder
