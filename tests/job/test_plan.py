"""``syphon plan`` end to end: two local namespaces, a real backlog, real Spark and Delta."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from paired_env import PRIMARY, Pair
from syphon.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.config import load_config
from syphon.delta import read_table
from syphon.plan import format_summary, run_plan
from syphon.sender import to_backlog_message

pytestmark = pytest.mark.timeout(300)


def config_for(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("PLAN_TEST_SECONDARY", pair.secondary.connection_string)
    monkeypatch.setenv("PLAN_TEST_PRIMARY", pair.primary.connection_string)
    path = tmp_path / "plan.yaml"
    path.write_text(
        f"""
secondary:
  namespace: contoso-secondary
  connection_string: {{env: PLAN_TEST_SECONDARY}}
  management_endpoint: "{pair.secondary.admin_endpoint}"
  ca_bundle: "{pair.secondary.ca_bundle}"
primaries:
  - namespace: {PRIMARY}
    connection_string: {{env: PLAN_TEST_PRIMARY}}
    management_endpoint: "{pair.primary.admin_endpoint}"
    ca_bundle: "{pair.primary.ca_bundle}"
backlog:
  queue_count: 4
audit:
  path: "{tmp_path / "delta"}"
""",
        encoding="utf-8",
    )
    return load_config(path, environ={})


def send_raw(pair: Pair, queue: int, messages: list[Any]) -> None:
    path = f"{PRIMARY}/x-servicebus-transfer/{queue}"
    with ServiceBusClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_sender(path) as sender:
            sender.send_messages(messages)


def test_plan_records_every_verdict_and_leaves_the_backlog_alone(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a real outage through the paired sender
    pair.primary.make_unavailable("*")
    with pair.client(failover_interval=timedelta(0), ping_primary_interval=timedelta(hours=1)) as p:
        for dest, kind, sid in (
            ("orders", "q", None),
            ("sessions", "q", "s1"),
            ("events", "t", None),
        ):
            sender = p.get_queue_sender(dest) if kind == "q" else p.get_topic_sender(dest)
            for i in range(3):
                sender.send_messages(
                    ServiceBusMessage(f"{dest}-{i}", message_id=f"{dest}-{i}", session_id=sid)
                )
            sender.close()
    pair.primary.clear_faults()
    # hand-made backlog messages, one per kind of trouble
    ok = lambda mid, body=b"b", **kw: to_backlog_message(  # noqa: E731
        ServiceBusMessage(body, message_id=mid, **kw), kw.pop("dest", "orders")
    )
    send_raw(pair, 1, [
        ok("orders-0"),  # same as a sender's message, same body? no: another body -> conflict
        ServiceBusMessage(b"x", message_id="no-path"),
        ServiceBusMessage(b"", content_type="application/vnd.ms-servicebus-ping",
                          application_properties={"x-ms-path": "orders"}),
        to_backlog_message(ServiceBusMessage(b"n", message_id="nowhere"), "nowhere"),
        to_backlog_message(ServiceBusMessage(b"d", message_id="dup"), "orders"),
        to_backlog_message(ServiceBusMessage(b"d", message_id="dup"), "orders"),
        to_backlog_message(ServiceBusMessage(b"t", message_id="short-lived",
                                             time_to_live=timedelta(seconds=1)), "orders"),
        ServiceBusMessage(b"w", message_id="wrong-ttl",
                          application_properties={"x-ms-path": "orders", "x-ms-timetolive": "x"}),
    ])  # fmt: skip
    time.sleep(1.2)  # short-lived expires
    before = {
        path: {s: (m.state, m.lock_token, m.delivery_count) for s, m in e.messages.items()}
        for path, e in pair.secondary.broker.entities.items()
    }

    config = config_for(pair, tmp_path, monkeypatch)
    result = run_plan(spark, config)

    after = {
        path: {s: (m.state, m.lock_token, m.delivery_count) for s, m in e.messages.items()}
        for path, e in pair.secondary.broker.entities.items()
    }
    assert before == after  # nothing locked, removed or counted
    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    got = {(r["message_id"], r["backlog_queue"].rsplit("/", 1)[1], r["sequence_number"]):
           (r["verdict"], r["reason"]) for r in audit}  # fmt: skip
    by_id: dict[Any, list[Any]] = {}
    for (mid, _, _), verdict in got.items():
        by_id.setdefault(mid, []).append(verdict)
    assert len(audit) == sum(len(m) for m in before.values()) == 9 + 7
    assert {r["run_id"] for r in audit} == {result.run_id}
    assert by_id["sessions-1"] == [("replay", None)]
    assert by_id["events-2"] == [("replay", None)]
    assert sorted(by_id["orders-0"]) == [("conflict", "message_id_reused_in_snapshot"),
                                         ("replay", None)]  # fmt: skip
    assert by_id["no-path"] == [("invalid", "path_missing")]
    assert None not in by_id
    assert by_id["nowhere"] == [("invalid", "destination_unknown")]
    assert sorted(by_id["dup"]) == [("duplicate", "duplicate_in_snapshot"), ("replay", None)]
    assert by_id["short-lived"] == [("expired", "time_to_live_passed")]
    assert by_id["wrong-ttl"] == [("invalid", "time_to_live_wrong_type")]
    replays = [r for r in audit if r["verdict"] == "replay"]
    assert all(r["batch_id"] and r["batch_position"] is not None for r in replays)
    assert all(r["body_sha256"] and len(r["body_sha256"]) == 64 for r in audit if r["body_size"])
    assert "body" not in audit[0]
    runs = read_table(Path(config.audit.path) / RUNS_TABLE).to_pylist()
    assert [(r["run_id"], r["status"]) for r in runs] == [(result.run_id, "planned")]
    assert dict(runs[0]["counts"])["replay"] == result.counts["replay"] == 10
    text = format_summary(result)
    assert "orders" in text
    assert "sessions" in text
    assert pair.secondary.connection_string not in text
