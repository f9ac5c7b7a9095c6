"""``syphon run --source`` of a dead-letter source, end to end through the command against
the local Service Bus: dead-lettered messages go back to their queue in order per key,
with their properties and types but the service's dead-letter reason and description,
and leave the dead-letter queue; one re-driven before is not sent again when it comes
back to the dead-letter queue, and stays there with the reason, until the operator asks
for it by name (``--allow-resend``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import QueueSpec
from support.paired_env import (
    PRIMARY,
    Pair,
    application_properties,
    command_config,
    dead_letter,
    dead_letters,
    redrive_sources,
    stored,
)
from support.quick_client import QuickClient
from support.report_html import parse_report, table_dict
from syphon.app.cli import main
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

SOURCES = redrive_sources("orders", "sessions")


def test_dead_letters_are_redriven_once_in_order_with_their_properties(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead_letter(
        pair,
        "orders",
        [
            ServiceBusMessage(
                b"o1", message_id="o-1", application_properties={"tenant": "c", "n": 1}
            ),
            ServiceBusMessage(b"o2", message_id="o-2", partition_key="k"),
        ],
    )
    dead_letter(
        pair,
        "sessions",
        [
            ServiceBusMessage(f"s{i}".encode(), message_id=f"s-{i}", session_id="s1")
            for i in range(3)
        ],
        session="s1",
    )
    assert dead_letters(pair, "orders") == ["o-1", "o-2"]
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)

    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "first"]) == 0
    orders = stored(pair, "orders")
    assert [str(m.message_id) for m in orders] == ["o-1", "o-2"]
    assert application_properties(orders[0]) == {
        "tenant": ("string", "c"),
        "n": ("int", 1),
    }  # as sent
    assert application_properties(orders[1]) == {}  # the reason and description are the service's
    assert [(str(m.message_id), m.session_id) for m in stored(pair, "sessions")] == [
        ("s-0", "s1"),
        ("s-1", "s1"),
        ("s-2", "s1"),
    ]
    assert dead_letters(pair, "orders") == []
    assert dead_letters(pair, "sessions") == []
    audit = [
        r
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "first" and r["stage"] == "plan"
    ]
    assert sorted(
        (r["backlog_queue"], r["primary"], r["destination"], r["verdict"])
        for r in audit
        if r["message_id"] == "o-1"
    ) == [("orders/$DeadLetterQueue", PRIMARY, "orders", "replay")]
    # every stage's row says which source, entity and dead-lettering it came from
    recorded = {
        (
            r["stage"],
            r["source"],
            r["source_kind"],
            r["source_entity"],
            r["dead_letter_reason"],
            r["dead_letter_description"],
        )
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "first" and r["message_id"] == "o-1"
    }
    assert recorded == {
        (stage, "redrive", "dead_letter", "orders", "HandlerFailed", "x")
        for stage in ("plan", "replay", "settle")
    }

    # o-1 fails again: already re-driven, it is not sent a second time and stays
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_queue_receiver("orders") as receiver:
            for m in receiver.receive_messages(5, max_wait_time=2):
                if str(m.message_id) == "o-1":
                    receiver.dead_letter_message(m, reason="HandlerFailed")
                else:
                    receiver.complete_message(m)
    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "again"]) == 5
    assert stored(pair, "orders") == []
    assert dead_letters(pair, "orders") == ["o-1"]
    rows = {
        (r["stage"], r["message_id"]): (r["verdict"], r["reason"], r["outcome"], r["detail"])
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "again"
    }
    assert rows[("plan", "o-1")][:2] == ("duplicate", "already_replayed")
    assert rows[("settle", "o-1")][2:] == ("left", "already_replayed")

    # the operator asks for it by name: sent again, and the audit says so
    assert (
        main(
            [
                "run",
                "--config",
                conf,
                "--source",
                "redrive",
                "--run-id",
                "asked",
                "--allow-resend",
                "o-1",
            ]
        )
        == 0
    )
    assert [str(m.message_id) for m in stored(pair, "orders")] == ["o-1"]
    assert dead_letters(pair, "orders") == []
    asked = {
        (r["stage"], r["message_id"]): (r["verdict"], r["reason"], r["outcome"])
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "asked"
    }
    assert asked[("plan", "o-1")] == ("replay", "resend_allowed", "planned")
    assert asked[("replay", "o-1")][2] == "sent"


def test_an_unknown_source_or_entity_exits_2(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = SOURCES.replace("[orders, sessions]", "[orders, nowhere]")
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=missing)
    assert main(["run", "--config", conf, "--source", "nope"]) == 2
    assert "no source 'nope'" in capsys.readouterr().err
    assert main(["run", "--config", conf, "--source", "redrive"]) == 2  # recorded failed
    assert "fix: the dead-letter source redrive's entity 'nowhere' does not exist" in (
        capsys.readouterr().out
    )


def test_every_queue_and_a_subscription_with_a_target_are_redriven(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dead-letter source without entities reads every queue's dead-letter queue and
    the subscriptions given a target (found by listing them); a subscription's dead
    letters go to its target queue, not to the topic (whose other subscriptions would get
    them too). A subscription without a target is named as not read: the run is partial
    and its dead letters stay."""
    pair.primary.broker.declare(QueueSpec("events-replay"))
    with ServiceBusAdministrationClient.from_connection_string(
        pair.primary.admin_connection_string, connection_verify=pair.primary.ca_bundle
    ) as admin:
        admin.create_subscription("events", "audit")
    dead_letter(pair, "orders", [ServiceBusMessage(b"o", message_id="o-1")])
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_topic_sender("events") as sender:
            sender.send_messages(ServiceBusMessage(b"e", message_id="e-1", subject="created"))
        for name in ("all", "audit"):
            with client.get_subscription_receiver("events", name) as receiver:
                for m in receiver.receive_messages(1, max_wait_time=2):
                    receiver.dead_letter_message(m, reason="Poison", error_description="bad")
    assert [
        str(m.message_id)
        for m in pair.primary.broker.entity("events/Subscriptions/all").dlq.messages.values()
    ] == ["e-1"]
    extra = f"""
sources:
  - name: everything
    kind: dead_letter
    namespace: {PRIMARY}
    targets: {{events/Subscriptions/all: events-replay}}
"""
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=extra)
    assert main(["run", "--config", conf, "--source", "everything", "--run-id", "all"]) == 5
    assert "not read: events/Subscriptions/audit/$DeadLetterQueue (no_target)" in (
        capsys.readouterr().out
    )
    assert dead_letters(pair, "events/Subscriptions/audit") == ["e-1"]  # where it was
    assert [str(m.message_id) for m in stored(pair, "orders")] == ["o-1"]
    assert [str(m.message_id) for m in stored(pair, "events-replay")] == ["e-1"]
    assert stored(pair, "events/Subscriptions/all") == []  # not sent through the topic
    assert dead_letters(pair, "orders") == []
    assert dead_letters(pair, "events/Subscriptions/all") == []
    rows = {
        r["message_id"]: r
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "all" and r["stage"] == "plan"
    }
    e1 = rows["e-1"]
    assert (
        e1["backlog_queue"],
        e1["source_entity"],
        e1["destination"],
        e1["dead_letter_reason"],
        e1["dead_letter_description"],
    ) == (
        "events/Subscriptions/all/$DeadLetterQueue",
        "events/Subscriptions/all",
        "events-replay",
        "Poison",
        "bad",
    )
    # the report says per entity what was re-driven
    page = parse_report((tmp_path / "delta" / "reports" / "all.html").read_text("utf-8"))
    entities = table_dict(page.sections["entities"][0])
    for entity in ("orders", "events/Subscriptions/all"):
        assert (
            entities[entity]["planned"],
            entities[entity]["sent"],
            entities[entity]["completed"],
            entities[entity]["left"],
        ) == ("1", "1", "1", "0")
    assert "source everything" in page.text["entities"]


def test_the_receivers_sub_queue_is_the_same_path(pair: Pair) -> None:
    # syphon names a dead-letter queue by its path; the SDK's sub_queue reaches the same
    dead_letter(pair, "orders", [ServiceBusMessage(b"x", message_id="p-1")])
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_queue_receiver("orders", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as r:
            by_sdk = [str(m.message_id) for m in r.peek_messages(5)]
        with client.get_queue_receiver("orders/$DeadLetterQueue") as r:
            by_path = [str(m.message_id) for m in r.peek_messages(5)]
    assert by_sdk == by_path == ["p-1"]


def test_transfer_dead_letters_are_redriven_with_their_own_entity_in_the_audit(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the service could not forward from ``relay`` (its forward names an entity
    that does not exist) waits in ``relay/$Transfer/$DeadLetterQueue``; a dead-letter
    source that lists every entity reads it (on by default), sends it where its target
    says, in order, and records the queue it came from; with the option off it is left."""
    pair.primary.broker.declare(QueueSpec("relay", forward_to="gone"))
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_queue_sender("relay") as sender:
            for i in range(3):
                sender.send_messages(ServiceBusMessage(f"r{i}".encode(), message_id=f"r-{i}"))
    transfer = "relay/$Transfer/$DeadLetterQueue"
    assert [str(m.message_id) for m in pair.primary.broker.entity(transfer).messages.values()] == [
        "r-0",
        "r-1",
        "r-2",
    ]
    extra = f"""
sources:
  - name: without-transfers
    kind: dead_letter
    namespace: {PRIMARY}
    transfer_dead_letters: false
    targets: {{relay: orders}}
  - name: everything
    kind: dead_letter
    namespace: {PRIMARY}
    targets: {{relay: orders}}
"""
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=extra)
    assert main(["plan", "--config", conf, "--source", "without-transfers"]) == 0
    planned = {r["backlog_queue"] for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()}
    assert transfer not in planned  # the option off: not read

    assert main(["run", "--config", conf, "--source", "everything", "--run-id", "t"]) == 0
    assert [str(m.message_id) for m in stored(pair, "orders")] == ["r-0", "r-1", "r-2"]
    assert pair.primary.broker.entity(transfer).messages == {}
    rows = [
        r
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == "t" and r["stage"] == "plan"
    ]
    assert {
        (
            r["backlog_queue"],
            r["source_entity"],
            r["destination"],
            r["verdict"],
            r["dead_letter_reason"],
        )
        for r in rows
    } == {(transfer, "relay", "orders", "replay", "MessagingEntityNotFound")}


def test_dead_letters_a_selection_left_out_are_reported_waiting_by_the_run_that_first_judges_them(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-drive with a selection leaves the unselected dead letters without judging
    them for the operator. The next run, without a selection, finds an exact duplicate
    among them for the first time: it ends ``partial`` (exit 5) and says it waits, not
    ``done`` as if an earlier run had told the operator so. A third run that finds it
    waiting again keeps it: ``done``."""
    copy = ServiceBusMessage(b"same", message_id="twice")
    dead_letter(
        pair,
        "orders",
        [
            ServiceBusMessage(b"a", message_id="picked"),
            copy,
            ServiceBusMessage(b"same", message_id="twice"),
        ],
    )
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    base = ["run", "--config", conf, "--source", "redrive"]
    assert main([*base, "--run-id", "selective", "--message-id", "picked"]) == 0
    assert dead_letters(pair, "orders") == ["twice", "twice"]

    assert main([*base, "--run-id", "judging"]) == 5
    assert [str(m.message_id) for m in stored(pair, "orders")] == ["picked", "twice"]
    assert dead_letters(pair, "orders") == ["twice"]
    ledger = [
        r
        for r in read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
        if r["run_id"] == "judging" and r["status"] == "partial"
    ]
    assert len(ledger) == 1
    assert "1 dead letters wait for the operator (0 of them since an earlier run)" in (
        ledger[0]["detail"] or ""
    )

    assert main([*base, "--run-id", "kept"]) == 0  # told once: kept by the operator
    assert dead_letters(pair, "orders") == ["twice"]


def test_status_shows_the_depth_of_a_named_dead_letter_queue(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A source of named entities finds its queues by one peek each (no count); status
    asks the management API for each one's depth instead of showing ``?``."""
    dead_letter(
        pair, "orders", [ServiceBusMessage(f"{i}".encode(), message_id=f"d-{i}") for i in range(3)]
    )
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    assert main(["status", "--config", conf, "--source", "redrive"]) == 0
    depths = {
        line.split()[0]: line.split()[1]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("orders/", "sessions/"))
    }
    assert depths == {
        "orders/$DeadLetterQueue": "3",
        "orders/$Transfer/$DeadLetterQueue": "0",
        "sessions/$DeadLetterQueue": "0",
        "sessions/$Transfer/$DeadLetterQueue": "0",
    }
