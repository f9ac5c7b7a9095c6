"""A dead letter re-driven to an entity that detects duplicates, within its window, would be
accepted and dropped (the service answers the send with success and keeps nothing). So it
is not sent and not removed: it stays in the dead-letter queue, ``too_soon`` in the audit
with the time the window passes, and the run ends ``partial`` saying until when. Once the
window has passed it goes home in order; with ``--new-message-ids`` it goes now, under a
MessageId derived from its own (the same on a rerun, so a crash's resend is still
deduplicated by the service), its own kept in a property and in the audit.

End to end through the command, the real SDK and the local Service Bus, which drops such
a message as the service does (checked first, so that the test can fail)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator import ManualClock, QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.crash_scenario import free_the_killed_runs_lease
from support.paired_env import (
    PRIMARY,
    Pair,
    application_properties,
    command_config,
    dead_letter,
    dead_letters,
    stored,
)
from support.quick_client import QuickClient
from support.waiting import wait_until
from syphon.app.cli import main
from syphon.core.dedupe import NEW_MESSAGE_ID, ORIGINAL_ID_PROPERTY, WINDOW, new_message_id
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

WINDOW_LENGTH = timedelta(hours=1)
#: Keyed messages, two keys, in the order they were first sent.
ORDERS = [("o-1", "k1"), ("o-2", "k2"), ("o-3", "k1"), ("o-4", "k2"), ("o-5", "k1")]

SOURCES = f"""
sources:
  - name: redrive
    kind: dead_letter
    namespace: {PRIMARY}
    entities: [orders, sessions]
  - name: events
    kind: dead_letter
    namespace: {PRIMARY}
    entities: [events/Subscriptions/all]
    targets: {{events/Subscriptions/all: events}}
run:
  lease_seconds: 10
"""


def _pair(
    servicebus_emulator: EmulatorFactory,
    clock: ManualClock | None = None,
    lock: timedelta = timedelta(seconds=5),
) -> Pair:
    """A primary whose entities detect duplicates for :data:`WINDOW_LENGTH` (``lock``:
    the orders queue's lock duration), and a secondary."""
    dedupe = {
        "requires_duplicate_detection": True,
        "duplicate_detection_history_window": WINDOW_LENGTH,
    }
    primary = servicebus_emulator(
        QueueSpec("orders", lock_duration=lock, **dedupe),
        QueueSpec("sessions", requires_session=True, **dedupe),
        TopicSpec("events", subscriptions=(SubscriptionSpec("all"),), **dedupe),
        clock=clock,
    )
    return Pair(primary, servicebus_emulator())


def _dead_letter_orders(pair: Pair) -> None:
    dead_letter(
        pair,
        "orders",
        [ServiceBusMessage(f"body {m}", message_id=m, partition_key=k) for m, k in ORDERS],
    )


def _locked(pair: Pair, entity: str) -> int:
    """How many of ``entity``'s dead letters are locked, by the local Service Bus's clock."""
    dlq = pair.primary.broker.entity(entity).dlq
    assert dlq is not None
    now = pair.primary.broker.clock.now_ms()
    return sum(1 for m in dlq.messages.values() if (m.locked_until_ms or 0) > now)


def _plan_rows(tmp_path: Path, run_id: str) -> dict[str, dict[str, Any]]:
    return {
        r["message_id"]: r
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == run_id and r["stage"] == "plan"
    }


def _order_by_key(messages: list[Any]) -> dict[str, list[str]]:
    """Stored messages' original MessageIds (their own, or the property that keeps the
    one they replaced) by partition key, in the order they were stored."""
    out: dict[str, list[str]] = {}
    for m in messages:
        own = ("string", str(m.parsed.message_id))
        original = application_properties(m).get(ORIGINAL_ID_PROPERTY, own)
        key = str(m.parsed.annotation("x-opt-partition-key"))
        out.setdefault(key, []).append(str(original[1]))
    return out


def test_the_local_service_bus_drops_a_redriven_dead_letter_within_the_window(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """What the rest stands on: the send succeeds, and nothing is kept."""
    pair = _pair(servicebus_emulator)
    _dead_letter_orders(pair)
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage(b"again", message_id="o-1"))
    assert stored(pair, "orders") == []
    assert len(dead_letters(pair, "orders")) == len(ORDERS)


def test_a_redrive_within_the_window_loses_nothing_and_says_until_when(
    servicebus_emulator: EmulatorFactory,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pair = _pair(servicebus_emulator)
    _dead_letter_orders(pair)
    dead_letter(
        pair,
        "sessions",
        [ServiceBusMessage(b"s", message_id=f"s-{i}", session_id="s1") for i in range(3)],
        session="s1",
    )
    before = datetime.now(timezone.utc)
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES, secondary=False)

    assert main(["plan", "--config", conf, "--source", "redrive"]) == 0
    planned = capsys.readouterr().out
    assert "too soon: 5 would be dropped by its duplicate detection" in planned
    assert "too soon: 3 would be dropped" in planned  # the session queue

    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "soon"]) == 5
    out = capsys.readouterr().out
    assert "run soon: partial" in out
    assert "8 dead letters wait for their destination's duplicate detection window" in out
    assert "fix: rerun after " in out
    assert "--new-message-ids" in out
    # nothing was sent, nothing removed
    assert stored(pair, "orders") == []
    assert stored(pair, "sessions") == []
    assert dead_letters(pair, "orders") == [m for m, _ in ORDERS]
    assert dead_letters(pair, "sessions") == ["s-0", "s-1", "s-2"]
    rows = _plan_rows(tmp_path, "soon")
    assert {(r["verdict"], r["reason"]) for r in rows.values()} == {("too_soon", WINDOW)}
    for r in rows.values():  # the time the window passes: its enqueue time and an hour
        until = datetime.fromisoformat(r["detail"].replace("Z", "+00:00"))
        assert before + WINDOW_LENGTH - timedelta(minutes=1) <= until
        assert until <= datetime.now(timezone.utc) + WINDOW_LENGTH
    settled = {
        r["message_id"]: (r["outcome"], r["detail"])
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "soon" and r["stage"] == "settle"
    }
    assert set(settled.values()) == {("left", WINDOW)}


def test_once_the_window_has_passed_every_message_goes_home_in_order(
    servicebus_emulator: EmulatorFactory,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local Service Bus's clock starts two hours back: the messages are sent and
    dead-lettered then, and the clock is brought to now before the re-drive, past the
    window by the service's clock and by syphon's. (The queue's lock outlasts the two
    hours: the SDK refuses to settle a message whose lock ended by its own clock.)"""
    start = datetime.now(timezone.utc) - timedelta(hours=2)
    clock = ManualClock(int(start.timestamp() * 1000))
    pair = _pair(servicebus_emulator, clock, lock=timedelta(hours=3))
    _dead_letter_orders(pair)
    clock.advance((datetime.now(timezone.utc) - start).total_seconds())
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES, secondary=False)

    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "late"]) == 0
    assert _order_by_key(stored(pair, "orders")) == {
        "k1": ["o-1", "o-3", "o-5"],
        "k2": ["o-2", "o-4"],
    }
    assert dead_letters(pair, "orders") == []
    assert {r["verdict"] for r in _plan_rows(tmp_path, "late").values()} == {"replay"}


def test_new_message_ids_arrive_once_across_a_sigkill_and_a_rerun_keeping_the_original(
    servicebus_emulator: EmulatorFactory,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run is killed with SIGKILL in its replay, after its first batch went out: its
    sends are in doubt. The rerun sends them again under the same new ids, and the
    destination's duplicate detection drops the second copies."""
    clock = ManualClock()
    pair = _pair(servicebus_emulator, clock)
    _dead_letter_orders(pair)
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES, secondary=False)
    args = ["run", "--config", conf, "--source", "redrive", "--new-message-ids"]
    killed = subprocess.run(
        [str(Path(sys.executable).parent / "syphon"), *args],
        env={**os.environ, "SYPHON_FAILPOINT": "mid_replay:1", "SYPHON__SPARK__MASTER": "local[1]"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert len(stored(pair, "orders")) == len(ORDERS)  # the first batch went out whole
    free_the_killed_runs_lease(tmp_path / "delta")  # as once its short lease expired
    clock.advance(6)  # the killed run's locks lapse (the queue's lock duration: 5 s)
    wait_until(lambda: not _locked(pair, "orders"), timeout=30, what="the killed run's locks lapse")

    assert main([*args, "--run-id", "rerun"]) == 0
    home = stored(pair, "orders")
    assert sorted(str(m.parsed.message_id) for m in home) == sorted(
        new_message_id(m) for m, _ in ORDERS
    )  # each once
    assert _order_by_key(home) == {"k1": ["o-1", "o-3", "o-5"], "k2": ["o-2", "o-4"]}
    assert dead_letters(pair, "orders") == []
    rows = _plan_rows(tmp_path, "rerun")
    assert {m: (r["verdict"], r["reason"], r["detail"]) for m, r in rows.items()} == {
        m: ("replay", NEW_MESSAGE_ID, new_message_id(m)) for m, _ in ORDERS
    }
    resent = {
        r["message_id"]
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "rerun" and r["stage"] == "replay" and r["detail"] == "resent_in_doubt"
    }
    assert resent == {m for m, _ in ORDERS}  # each resend marked


def test_a_session_queues_and_a_subscriptions_dead_letters_wait_or_go_under_new_ids(
    servicebus_emulator: EmulatorFactory,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair = _pair(servicebus_emulator)
    dead_letter(
        pair,
        "sessions",
        [ServiceBusMessage(b"s", message_id=f"s-{i}", session_id="s1") for i in range(3)],
        session="s1",
    )
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages([ServiceBusMessage(b"e", message_id=f"e-{i}") for i in range(2)])
        with client.get_subscription_receiver("events", "all") as receiver:
            for m in receiver.receive_messages(2, max_wait_time=2):
                receiver.dead_letter_message(m, reason="Poison")
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES, secondary=False)

    assert main(["run", "--config", conf, "--source", "events", "--run-id", "wait"]) == 5
    assert {r["verdict"] for r in _plan_rows(tmp_path, "wait").values()} == {"too_soon"}
    assert dead_letters(pair, "events/Subscriptions/all") == ["e-0", "e-1"]
    assert stored(pair, "events/Subscriptions/all") == []

    new = ["--new-message-ids"]
    assert main(["run", "--config", conf, "--source", "events", "--run-id", "go", *new]) == 0
    assert [str(m.parsed.message_id) for m in stored(pair, "events/Subscriptions/all")] == [
        new_message_id("e-0"),
        new_message_id("e-1"),
    ]
    assert dead_letters(pair, "events/Subscriptions/all") == []
    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "s", *new]) == 0
    sessions = stored(pair, "sessions")
    assert [(str(m.parsed.message_id), m.session_id) for m in sessions] == [
        (new_message_id(f"s-{i}"), "s1") for i in range(3)
    ]
    assert [application_properties(m)[ORIGINAL_ID_PROPERTY] for m in sessions] == [
        ("string", f"s-{i}") for i in range(3)
    ]
