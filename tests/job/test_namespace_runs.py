"""``syphon run --source`` of a namespace source, end to end through the command against
local Service Buses: a failed-over namespace's queues (their active messages and their
dead letters, and a subscription given a target) are drained into the same names in a
primary, in order per key with their properties, and leave the old namespace (a queue
that requires sessions is named as not read, and the run is partial); a run
killed with SIGKILL in the middle of its replay, then run again, leaves the
duplicate-detecting destination holding each message once."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator import QueueSpec, SubscriptionSpec, TopicSpec
from support.crash_scenario import SYPHON, assert_killed, free_the_killed_runs_lease
from support.paired_env import PRIMARY, Pair, command_config, make_pair, stored
from support.quick_client import QuickClient
from syphon.app.cli import main
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

OLD_ENV = "NAMESPACE_TEST_OLD"


def old_namespace(servicebus_emulator: Any) -> Any:
    """The failed-over namespace: the primary's entities, with messages nobody moved."""
    return servicebus_emulator(
        QueueSpec("orders"),
        QueueSpec("sessions", requires_session=True),
        QueueSpec("dd", requires_duplicate_detection=True),
        TopicSpec("events", subscriptions=(SubscriptionSpec("all"),)),
    )


def source(old: Any, extra: str = "") -> str:
    return f"""
sources:
  - name: old-west
    kind: namespace
    namespace: {PRIMARY}
    from_namespace:
      namespace: contoso-west
      connection_string: {{env: {OLD_ENV}}}
      management_endpoint: "{old.admin_endpoint}"
      ca_bundle: "{old.ca_bundle}"
{extra}"""


def audit_rows(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    return [
        r for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist() if r["run_id"] == run_id
    ]


def left_in(old: Any, path: str) -> list[str]:
    entity = old.broker.entity(path)
    return [str(m.message_id) for m in entity.messages.values()]


def test_a_failed_over_namespace_is_drained_into_the_same_names(
    servicebus_emulator: Any,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pair: Pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec("events-replay"))
    old = old_namespace(servicebus_emulator)
    monkeypatch.setenv(OLD_ENV, old.connection_string)
    with QuickClient.from_connection_string(old.connection_string) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(
                        b"o1",
                        message_id="o-1",
                        partition_key="k",
                        application_properties={"n": 1, "tenant": "c"},
                    ),
                    ServiceBusMessage(b"o2", message_id="o-2", partition_key="k"),
                    ServiceBusMessage(b"o3", message_id="o-3"),
                ]
            )
        with client.get_queue_receiver("orders") as receiver:  # o-3 failed: dead-lettered
            (first,) = receiver.receive_messages(1, max_wait_time=2)
            receiver.abandon_message(first)
            for m in receiver.receive_messages(3, max_wait_time=2):
                if str(m.message_id) == "o-3":
                    receiver.dead_letter_message(m, reason="HandlerFailed")
                else:
                    receiver.abandon_message(m)
        with client.get_queue_sender("sessions") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(f"s{i}".encode(), message_id=f"s-{i}", session_id="s1")
                    for i in range(3)
                ]
            )
        with client.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage(b"e", message_id="e-1", subject="created"))
    extra = "    dead_letters: true\n    targets: {events/Subscriptions/all: events-replay}\n"
    conf = command_config(
        pair, spark, tmp_path, monkeypatch, extra=source(old, extra), secondary=False
    )

    # the dry run: what would be sent, nothing moved
    assert main(["plan", "--config", conf, "--source", "old-west", "--run-id", "dry"]) == 0
    printed = capsys.readouterr().out
    assert "orders" in printed
    assert "events-replay" in printed
    assert "not read: sessions (requires_session" in printed
    assert stored(pair, "orders") == []
    assert sorted(left_in(old, "orders")) == ["o-1", "o-2"]

    # everything is drained but the session queue's active messages: partial, named
    assert main(["run", "--config", conf, "--source", "old-west", "--run-id", "drain"]) == 5
    assert "not read: sessions (requires_session)" in capsys.readouterr().out
    orders = stored(pair, "orders")
    # o-1 and o-2 in their key's order; the dead letter re-driven too, without its reason
    assert sorted(str(m.message_id) for m in orders) == ["o-1", "o-2", "o-3"]
    keyed = [str(m.message_id) for m in orders if str(m.message_id) in ("o-1", "o-2")]
    assert keyed == ["o-1", "o-2"]  # sequence order: the key's order
    o3 = next(m for m in orders if str(m.message_id) == "o-3")
    assert "DeadLetterReason" not in o3.parsed.get_application_properties()
    o1 = next(m for m in orders if str(m.message_id) == "o-1")
    assert o1.parsed.get_application_properties() == {"n": 1, "tenant": "c"}
    assert stored(pair, "sessions") == []
    assert left_in(old, "sessions") == ["s-0", "s-1", "s-2"]  # where they were
    assert [str(m.message_id) for m in stored(pair, "events-replay")] == ["e-1"]
    assert stored(pair, "events/Subscriptions/all") == []  # not through the new topic
    for path in ("orders", "events/Subscriptions/all"):
        assert left_in(old, path) == [], path
    dlq = old.broker.entity("orders").dlq
    assert dlq is not None
    assert not dlq.messages

    rows = {(r["stage"], r["message_id"]): r for r in audit_rows(tmp_path, "drain")}
    o3_plan = rows[("plan", "o-3")]
    assert (
        o3_plan["source"],
        o3_plan["source_kind"],
        o3_plan["source_entity"],
        o3_plan["backlog_queue"],
        o3_plan["dead_letter_reason"],
    ) == ("old-west", "namespace", "orders", "orders/$DeadLetterQueue", "HandlerFailed")
    e1 = rows[("plan", "e-1")]
    assert (e1["source_entity"], e1["primary"], e1["destination"]) == (
        "events/Subscriptions/all",
        PRIMARY,
        "events-replay",
    )
    assert rows[("plan", "o-1")]["dead_letter_reason"] is None

    # status of the source: the old namespace's queues, and this source's runs
    assert main(["status", "--config", conf, "--source", "old-west"]) == 0
    shown = capsys.readouterr().out
    assert "source old-west" in shown
    depth = {
        line.split()[0]: line.split()[1:]
        for line in shown.splitlines()
        if line.startswith(("orders", "sessions", "dd"))
    }
    assert depth["orders"] == ["0"]
    assert depth["sessions"][:1] == ["3"]
    assert "(not read: requires_session)" in " ".join(depth["sessions"])
    assert depth["orders/$DeadLetterQueue"] == ["0"]
    assert [
        line.split()[:2] for line in shown.splitlines() if line.startswith(("dry", "drain"))
    ] == [["drain", "partial"], ["dry", "planned"]]


def test_a_drain_killed_mid_replay_leaves_each_message_once_where_duplicates_are_detected(
    servicebus_emulator: Any,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair: Pair = make_pair(servicebus_emulator)
    pair.primary.broker.declare(QueueSpec("dd", requires_duplicate_detection=True))
    old = old_namespace(servicebus_emulator)
    monkeypatch.setenv(OLD_ENV, old.connection_string)
    # 40 KB bodies: several batches, so that the kill falls between two of them
    ids = [f"d-{i}" for i in range(40)]
    with QuickClient.from_connection_string(old.connection_string) as client:
        with client.get_queue_sender("dd") as sender:
            for chunk in range(0, len(ids), 5):
                sender.send_messages(
                    [
                        ServiceBusMessage(
                            f"body {m}".encode() + bytes(40_000),
                            message_id=m,
                            partition_key=f"k{i % 4}",
                        )
                        for i, m in enumerate(ids[chunk : chunk + 5], start=chunk)
                    ]
                )
    extra = "    entities: [dd]\nrun:\n  lease_seconds: 10\n"
    conf = command_config(
        pair, spark, tmp_path, monkeypatch, extra=source(old, extra), secondary=False
    )

    killed = subprocess.Popen(
        [str(SYPHON), "run", "--config", conf, "--source", "old-west", "--run-id", "killed"],
        env={**os.environ, "SYPHON_FAILPOINT": "mid_replay:3", "SYPHON__SPARK__MASTER": "local[1]"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert_killed(killed, "mid_replay:3")
    sent_before = Counter(str(m.message_id) for m in stored(pair, "dd"))
    assert sent_before, "the kill came after three batches were sent"
    assert sorted(left_in(old, "dd")) == sorted(ids)  # nothing settled without its outcome
    free_the_killed_runs_lease(tmp_path / "delta")

    assert main(["run", "--config", conf, "--source", "old-west", "--run-id", "after"]) == 0
    held = Counter(str(m.message_id) for m in stored(pair, "dd"))
    assert held == Counter(ids)  # every message, each exactly once
    assert left_in(old, "dd") == []
    resent = {
        r["message_id"]
        for r in audit_rows(tmp_path, "after")
        if r["stage"] == "replay" and r["detail"] == "resent_in_doubt"
    }
    # the killed run's journal: what it recorded as sent is not sent again (a duplicate
    # of its recovered replay rows), only its cut-off transfer is in doubt and resent,
    # marked; every mark is a copy that had arrived
    assert resent
    assert resent <= set(sent_before)
    after = audit_rows(tmp_path, "after")
    sent_again = {
        r["message_id"] for r in after if r["stage"] == "replay" and r["outcome"] == "sent"
    }
    assert not (set(sent_before) - resent) & sent_again
