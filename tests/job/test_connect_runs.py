"""Whole jobs on a Spark Connect session, as serverless compute and standard-access-mode
clusters hand one out: ``syphon`` runs as a process, a client of a local Spark Connect
server (tests/support/connect_server.py) with ``SPARK_REMOTE`` set and no master in its
config, against the local Service Bus; the audit with delta-rs unless said. A backlog drained in
waves with keys over several queues, ``status``, ``discard``, a dead-letter re-drive
planned with a repair (``plan``) and resumed (``replay``), a run killed with SIGKILL in
the middle of its replay followed by the next run, two runs at once, and the rerun
notebook headless. The killed run and the two at once keep their audit, ledger and
lease in catalog tables through the server's Delta (``audit.engine: spark``), which
the tests read with delta-rs at the server's warehouse."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator import QueueSpec
from support.connect_server import ConnectServer
from support.crash_scenario import (
    SYPHON,
    UNIQUE,
    add_round,
    backlog_ids,
    destination_ids,
    everything_home,
    free_the_killed_runs_lease,
    settled_safely,
    short_locks,
    wait_for_the_killed_runs_locks,
)
from support.notebook_run import check_the_notebook
from support.paired_env import (
    Pair,
    application_properties,
    backlog_state,
    dead_letter,
    dead_letters,
    job_config,
    make_pair,
    redrive_sources,
    stored,
)
from support.waves import arrived, park_spread, waves_config
from syphon.core.errors import ExitCode
from syphon.job.replay.journal import outcomes_commit
from syphon.job.run.stages import journal_of
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.catalog import SparkLeaseLog
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(600)


def syphon(
    server: ConnectServer, conf: Path, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``syphon <argv> --config conf`` as a client of ``server``: no master."""
    return subprocess.run(
        [str(SYPHON), *argv, "--config", str(conf)],
        env={**os.environ, **connect_env(server), **(env or {})},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def connect_env(server: ConnectServer) -> dict[str, str]:
    return {"SPARK_REMOTE": server.remote, "SYPHON__SPARK__MASTER": "null"}


def test_a_backlog_drained_in_waves_on_a_connect_session_keeps_order_and_status_reads_it(
    pair: Pair, connect_server: ConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peeked (``run.read: peek``): the server's sandboxed tasks cannot reach Service
    Bus, so the client's driver peeks, sends and settles (``run.service_io: auto``)."""
    keys = park_spread(pair, "c", 18)
    waves_config(pair, tmp_path, monkeypatch)  # 2 messages a queue and wave
    conf = tmp_path / "syphon.yaml"
    env = {"SYPHON__RUN__READ": "peek"}
    done = syphon(connect_server, conf, "run", "--run-id", "on-connect", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "run on-connect: done" in done.stdout
    assert "session ready (master platform)" in done.stderr
    assert arrived(pair) == keys  # every key in order, every message once
    assert not any(backlog_state(pair).values())
    runs = read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
    waves = [r for r in runs if r["run_id"] == "on-connect" and r["status"] == "planned"]
    assert len(waves) >= 3
    settle = [
        r
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "on-connect" and r["stage"] == "settle"
    ]
    assert sorted(r["outcome"] for r in settle) == ["completed"] * 18

    status = syphon(connect_server, conf, "status", "--runs", "2")
    assert status.returncode == 0, status.stderr[-3000:]
    assert "on-connect" in status.stdout


def test_a_run_told_to_talk_to_service_bus_from_tasks_that_cannot_stops_saying_so(
    pair: Pair, connect_server: ConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run.service_io: tasks`` on compute whose tasks have no network: the run stops
    before it reads anything (exit 2), naming the namespaces and the setting, and does
    not call a namespace the driver reached unreachable."""
    park_spread(pair, "t", 6)
    before = backlog_state(pair)
    waves_config(pair, tmp_path, monkeypatch)
    conf = tmp_path / "syphon.yaml"
    env = {"SYPHON__RUN__SERVICE_IO": "tasks"}
    done = syphon(connect_server, conf, "run", "--run-id", "offline", env=env)
    said = done.stdout + done.stderr
    assert done.returncode == ExitCode.CONFIG, said[-3000:]
    assert "Spark's tasks cannot reach contoso-secondary" in said, said[-3000:]
    assert "fix: set run.service_io: driver" in said, said[-3000:]
    assert "cannot be reached" not in said
    assert backlog_state(pair) == before  # nothing was read or sent
    assert not stored(pair, "orders")
    broker = pair.secondary.broker
    assert not any(n for p, n in broker.messages_received.items() if "x-servicebus" in p)


def test_a_backlog_read_once_on_a_connect_session_is_received_once_and_kept_in_order(
    pair: Pair, connect_server: ConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run.read: once`` on a Connect session: the client's driver receives each wave
    and hands it to the server as Arrow; nothing is peeked, each message received once."""
    keys = park_spread(pair, "o", 12)
    waves_config(pair, tmp_path, monkeypatch)  # 2 messages a queue and wave
    conf = tmp_path / "syphon.yaml"
    env = {"SYPHON__RUN__READ": "once"}
    done = syphon(connect_server, conf, "run", "--run-id", "once-on-connect", env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "run once-on-connect: done" in done.stdout
    assert arrived(pair) == keys  # every key in order, every message once
    assert not any(backlog_state(pair).values())
    broker = pair.secondary.broker
    paths = [p for p in broker.messages_received if "x-servicebus-transfer" in p]
    assert sum(broker.messages_received[p] for p in paths) == 12
    assert sum(broker.messages_peeked[p] for p in paths) == 0
    runs = read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
    waves = [r for r in runs if r["run_id"] == "once-on-connect" and r["status"] == "planned"]
    assert len(waves) >= 2


def test_a_discard_then_a_dead_letter_redrive_planned_with_a_repair_and_replayed_on_connect(
    pair: Pair, connect_server: ConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_letter(
        pair,
        "orders",
        [
            ServiceBusMessage(b"a", message_id="r-1", application_properties={"n": 3}),
            ServiceBusMessage(b"b", message_id="r-2", application_properties={"n": 4}),
        ],
    )
    junk = ServiceBusMessage(b"x", message_id="junk", session_id="s")
    dead_letter(pair, "sessions", [junk], session="s")
    job_config(pair, tmp_path, monkeypatch, extra=redrive_sources("orders", "sessions"))
    conf = tmp_path / "syphon.yaml"
    source = ["--source", "redrive"]
    # the operator discards the poison message first: completed, recorded, never sent
    gone = syphon(connect_server, conf, "discard", *source, "--message-id", "junk", "--reason", "t")
    assert gone.returncode == 0, gone.stdout[-2000:] + gone.stderr[-3000:]
    assert dead_letters(pair, "sessions") == []
    # the dry run with the repair, then its replay: sent with the repair the plan recorded
    repair = ["--set", "weight:long=typed_properties['n'].int * 100"]
    planned = syphon(connect_server, conf, "plan", *source, "--run-id", "fixing", *repair)
    assert planned.returncode == 0, planned.stdout[-2000:] + planned.stderr[-3000:]
    assert stored(pair, "orders") == []
    done = syphon(connect_server, conf, "replay", *source, "--run-id", "fixing")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    home = {str(m.message_id): application_properties(m) for m in stored(pair, "orders")}
    assert {m: p["weight"] for m, p in home.items()} == {"r-1": ("long", 300), "r-2": ("long", 400)}
    assert dead_letters(pair, "orders") == []
    assert stored(pair, "sessions") == []


def catalog_env(table: str) -> dict[str, str]:
    """The audit as catalog tables through the server's Delta (``audit.engine: spark``):
    ``table`` in its default database, at ``warehouse/<table>``."""
    return {"SYPHON__AUDIT__ENGINE": "spark", "SYPHON__AUDIT__TABLE": f"default.{table}"}


def test_a_run_killed_mid_replay_on_connect_with_the_audit_in_delta_through_spark(
    servicebus_emulator: Any,
    connect_server: ConnectServer,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed mid-replay, the next run reads the killed wave's journal into the catalog
    audit under the wave's commit name (a Delta application transaction, which delta-rs
    reads too), resends only what was in doubt, and marks it; nothing lost."""
    pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec(UNIQUE, requires_duplicate_detection=True))
    # renewals through the server: at 10 s, a suite loading both cores once made one
    # run go two renewals without an answer and lose its lease (freed below anyway)
    job_config(pair, tmp_path, monkeypatch, extra="run:\n  lease_seconds: 60\n")
    short_locks(pair)  # read once: the killed run's locks lapse before the next run
    conf, table = tmp_path / "syphon.yaml", f"crash_{uuid.uuid4().hex[:8]}"
    catalog, warehouse = catalog_env(table), connect_server.warehouse
    sent: dict[str, str] = {}
    add_round(pair, 0, sent)
    env = {"SYPHON_FAILPOINT": "mid_replay:3", **catalog}
    killed = syphon(connect_server, conf, "run", "--run-id", "killed", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    # nothing left the backlog without its outcome in the audit
    gone = (set(sent) | {"bad-r0"}) - backlog_ids(pair)
    assert gone <= settled_safely(warehouse, table), gone - settled_safely(warehouse, table)
    sent_before = destination_ids(pair, "orders") + destination_ids(pair, UNIQUE)
    assert sent_before  # the kill came after three batches
    # the lease is a Delta table through Spark: released here, by another JVM's Delta
    free_the_killed_runs_lease(SparkLeaseLog(f"delta.`{warehouse / table}_leases`", lambda: spark))
    assert not (tmp_path / "delta" / "leases").exists()  # none at audit.path
    wait_for_the_killed_runs_locks(pair)

    add_round(pair, 1, sent)  # the next scheduled run has work of its own
    done = syphon(connect_server, conf, "run", env=catalog)
    # done; exit 8 for the destination each round's invalid message names
    assert (done.returncode, " done\n" in done.stdout) == (8, True), done.stderr[-3000:]
    orders, _ = everything_home(pair, sent)
    audit = read_table(warehouse / table).to_pylist()
    resent = {r["message_id"] for r in audit if r["detail"] == "resent_in_doubt"}
    assert resent  # the kill cut a transfer off before its outcome was journaled
    twice = {m for m, n in orders.items() if n > 1}
    assert twice <= resent  # a second copy only where the audit says it was resent
    assert resent <= set(sent_before)  # and only what the killed run may have sent
    # the journal was read into the audit under the wave's commit name, once
    runs = read_table(warehouse / f"{table}_runs").to_pylist()
    (replaying,) = [r for r in runs if r["run_id"] == "killed" and r["status"] == "replaying"]
    journal_id = journal_of(replaying["detail"])
    assert journal_id is not None
    from deltalake import DeltaTable

    commit = outcomes_commit("killed", journal_id)
    assert DeltaTable(str(warehouse / table)).transaction_version(commit) == 1
    recovered = [r for r in audit if r["run_id"] == "killed" and r["stage"] == "replay"]
    places = [(r["backlog_queue"], r["sequence_number"]) for r in recovered]
    assert len(places) == len(set(places))  # one outcome per message
    assert not list((tmp_path / "delta").rglob("_delta_log"))  # every table in the catalog


def test_two_runs_at_once_on_connect_with_the_audit_in_delta_through_spark(
    pair: Pair, connect_server: ConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``syphon run`` processes started together, each a client of one server (two
    jobs of one workspace): the lease, a Delta table through Spark, lets one replay; the
    other records ``busy`` (or, had it come once the first was done, finds nothing).
    Their ledger rows are appended at the same moments without a lost commit."""
    keys = park_spread(pair, "t", 12)
    waves_config(pair, tmp_path, monkeypatch)
    conf, table = tmp_path / "syphon.yaml", f"twins_{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **connect_env(connect_server), **catalog_env(table)}
    runs = [
        subprocess.Popen(
            [str(SYPHON), "run", "--run-id", f"twin-{i}", "--config", str(conf)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [run.communicate(timeout=400) for run in runs]
    codes = [run.returncode for run in runs]
    assert sorted(codes) in ([0, ExitCode.BUSY], [0, 0]), [e[-3000:] for _, e in outputs]
    assert arrived(pair) == keys  # every key in order, every message once
    assert not any(backlog_state(pair).values())

    warehouse = connect_server.warehouse
    ledger = read_table(warehouse / f"{table}_runs").to_pylist()
    last = {r["run_id"]: r["status"] for r in sorted(ledger, key=lambda r: r["recorded_at"])}
    assert sorted(last.values()) in (["busy", "done"], ["done", "empty"]), last
    settle = [r for r in read_table(warehouse / table).to_pylist() if r["stage"] == "settle"]
    assert sorted(r["outcome"] for r in settle) == ["completed"] * 12
    from deltalake import DeltaTable

    history = DeltaTable(str(warehouse / f"{table}_leases")).history()
    actions = [
        json.loads(c.get("operationParameters", {}).get("properties") or "{}") for c in history
    ]
    acquires = [
        a["syphon.lease.holder"].split("#")[0]
        for a in actions
        if a.get("syphon.lease.action") == "acquire"
    ]
    assert sorted(acquires) == ["twin-0", "twin-1"]  # both asked, each commit kept


def test_the_rerun_notebook_runs_as_a_connect_client(
    pair: Pair, connect_server: ConnectServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_the_notebook(pair, tmp_path, monkeypatch, remote=connect_server.remote)
