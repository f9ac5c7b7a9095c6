"""The plan's verdicts against a backlog from a real outage plus hand-made trouble.

Every hand-made message carries an application property ``case``; the test peeks the
backlog through the SDK to learn where each case landed (queue, sequence number) and
compares the audit with the verdict written next to the case below — an expectation
stated by hand, not computed by syphon's code. Messages the outage scenario parked are
all expected to replay. Messages the SDK cannot produce (non-UTF-8 values, AMQP value
bodies, no MessageId) are sent with Qpid Proton's own client. A ping is sent too, but the
service (and the local one) accepts pings without storing them, so the ``ping`` verdict
is only reachable from a hand-built snapshot (tests/spark/test_reconcile.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.amqp import AmqpAnnotatedMessage
from deltalake import DeltaTable
from proton import Described, Message, symbol, timestamp
from proton.utils import BlockingConnection
from pyspark.sql import functions as F

from servicebus_emulator import QueueSpec
from support.paired_env import BACKLOG_QUEUES, PRIMARY, Pair, job_config, park_outage, plan_now
from support.quick_client import QuickClient
from support.sas import put_token
from syphon.app.text import format_summary
from syphon.core.envelope import PING_CONTENT_TYPE
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import append_dataframe, read_table

pytestmark = pytest.mark.timeout(420)

EXTRA_QUEUE = f"{PRIMARY}/x-servicebus-transfer/7"
REPLAY = ("replay", None)


@dataclass(frozen=True)
class Case:
    """A hand-made backlog message and the verdict it must get."""

    label: str
    queue: int | str
    message: Any  # a ServiceBusMessage/AmqpAnnotatedMessage, or a proton Message
    expect: tuple[str, str | None] | None  # None: the service never stores it


def sdk(label: str, body: bytes = b"body", path: Any = "orders", **kw: Any) -> Any:
    """A backlog message as the paired sender writes it, plus extra aliases."""
    aliases = kw.pop("aliases", {})
    props = {"case": label, **kw.pop("application_properties", {})}
    if path is None:
        return ServiceBusMessage(body, application_properties={**props, **aliases}, **kw)
    message = to_backlog_message(ServiceBusMessage(body, application_properties=props, **kw), path)
    message.application_properties.update(aliases)
    return message


def raw(label: str, properties: dict[str, Any], body: Any = b"body", **kw: Any) -> Message:
    """A message written with Proton: any property value, any body."""
    return Message(
        body=body, properties={"case": label, **properties}, inferred=isinstance(body, bytes), **kw
    )


# fmt: off
def cases() -> list[Case]:
    future = datetime.now(timezone.utc) + timedelta(hours=2)
    keyed = ServiceBusMessage(b"k", partition_key="k2", application_properties={
        "case": "partition_key_differs", "x-ms-path": "sessions",
        "x-ms-sessionid": "s1"})
    sequence = AmqpAnnotatedMessage(sequence_body=[[1, 2, 3]], application_properties={
        "case": "sequence_body", "x-ms-path": "orders"},
        properties={"message_id": "seq"})
    return [
        Case("plain", 0, sdk("plain", message_id="plain"), REPLAY),
        Case("empty_body", 0, sdk("empty_body", b"", message_id="empty"), REPLAY),
        Case("session", 1, sdk("session", path="sessions", session_id="s9", message_id="s9"),
             REPLAY),
        Case("topic", 2, sdk("topic", path="events", message_id="t1"), REPLAY),
        Case("scheduled_future", 3, sdk("scheduled_future", message_id="later",
             scheduled_enqueue_time_utc=future), REPLAY),
        Case("dup_detection_key", 0, sdk("dup_detection_key", path="dd", message_id="dd1"),
             REPLAY),
        # what the Python SDK's high-level API could not send goes back as it came
        Case("other_property_not_utf8", 1,
             raw("other_property_not_utf8", {"x-ms-path": "orders", "k": b"\xff"}, id="nu"),
             REPLAY),
        Case("typed_properties", 1, raw("typed_properties", {
             "x-ms-path": "orders", "when": timestamp(1_700_000_000_000), "big": 2**40,
             "x-ms-timetolive": Described(symbol("com.microsoft:timespan"), 36_000_000_000)},
             id="tp"), REPLAY),
        Case("no_message_id_a", 2, raw("no_message_id_a", {"x-ms-path": "orders"}), REPLAY),
        Case("no_message_id_b", 2, raw("no_message_id_b", {"x-ms-path": "orders"}), REPLAY),
        Case("extra_queue", EXTRA_QUEUE, sdk("extra_queue", message_id="x7"), REPLAY),
        # invalid envelopes
        Case("no_path", 0, sdk("no_path", path=None, message_id="np"),
             ("invalid", "path_missing")),
        Case("path_float", 0, sdk("path_float", path=None, message_id="pf",
             aliases={"x-ms-path": 1.5}), ("invalid", "path_wrong_type")),
        Case("path_empty", 1, sdk("path_empty", path=None, message_id="pe",
             aliases={"x-ms-path": ""}),
             ("invalid", "path_empty")),
        Case("path_timestamp", 1, raw("path_timestamp",
             {"x-ms-path": timestamp(1_700_000_000_000)}, id="pt"),
             ("invalid", "path_holds_timestamp")),
        Case("path_backlog", 2, sdk("path_backlog", path=None, message_id="pb",
             aliases={"x-ms-path": f"{PRIMARY}/x-servicebus-transfer/1"}),
             ("invalid", "path_is_backlog_queue")),
        Case("path_too_long", 2, sdk("path_too_long", path=None, message_id="pl",
             aliases={"x-ms-path": "q" * 261}),
             ("invalid", "path_too_long")),
        Case("path_not_utf8", 3, raw("path_not_utf8", {"x-ms-path": b"\xc3\x28"}, id="pn"),
             ("invalid", "path_not_utf8")),
        Case("session_wrong_type", 3, sdk("session_wrong_type", message_id="sw",
             aliases={"x-ms-sessionid": 7}), ("invalid", "session_id_wrong_type")),
        Case("session_not_utf8", 3, raw("session_not_utf8", {"x-ms-path": "sessions",
             "x-ms-sessionid": b"\xff"}, id="sn"), ("invalid", "session_id_not_utf8")),
        Case("session_too_long", 0, sdk("session_too_long", path="sessions", message_id="sl",
             aliases={"x-ms-sessionid": "s" * 129}), ("invalid", "session_id_too_long")),
        Case("ttl_wrong_type", 0, sdk("ttl_wrong_type", message_id="tw",
             aliases={"x-ms-timetolive": "00:01:00"}), ("invalid", "time_to_live_wrong_type")),
        Case("ttl_zero", 1, sdk("ttl_zero", message_id="tz", aliases={"x-ms-timetolive": 0}),
             ("invalid", "time_to_live_not_positive")),
        Case("scheduled_wrong_type", 1, sdk("scheduled_wrong_type", message_id="sc",
             aliases={"x-ms-scheduledenqueuetimeutc": True}),
             ("invalid", "scheduled_time_wrong_type")),
        # invalid against the destination
        Case("partition_key_differs", 2, keyed,
             ("invalid", "partition_key_differs_from_session_id")),
        Case("session_required", 2, sdk("session_required", path="sessions", message_id="sr"),
             ("invalid", "session_id_required")),
        Case("unknown_destination", 3, sdk("unknown_destination", path="nowhere",
             message_id="un"), ("invalid", "destination_unknown")),
        Case("too_large_body", 3, sdk("too_large_body", b"x" * 2000, path="small",
             message_id="big"), ("invalid", "too_large")),
        Case("too_large_with_envelope", 0, sdk("too_large_with_envelope", b"x" * 1000,
             path="small", message_id="big2"), ("invalid", "too_large")),
        Case("value_body", 1, raw("value_body", {"x-ms-path": "orders"}, body="text", id="vb"),
             REPLAY),
        Case("sequence_body", 1, sequence, REPLAY),
        # the other verdicts
        Case("ping", 2, ServiceBusMessage(b"", content_type=PING_CONTENT_TYPE,
             application_properties={"case": "ping", "x-ms-path": "orders"}), None),
        Case("expired", 2, sdk("expired", message_id="ex", time_to_live=timedelta(seconds=1)),
             ("expired", "time_to_live_passed")),
        Case("dup_first", 0, sdk("dup_first", b"same", message_id="dup"), REPLAY),
        Case("dup_again", 0, sdk("dup_again", b"same", message_id="dup"),
             ("duplicate", "duplicate_in_snapshot")),
        Case("dup_other_queue", 3, sdk("dup_other_queue", b"same", message_id="dup"),
             ("duplicate", "duplicate_in_snapshot")),
        Case("dup_other_destination", 3, sdk("dup_other_destination", b"same",
             path="events", message_id="dup"), REPLAY),
        Case("reused_first", 1, sdk("reused_first", b"A", message_id="again"), REPLAY),
        Case("reused_other_body", 1, sdk("reused_other_body", b"B", message_id="again"),
             ("conflict", "message_id_reused_in_snapshot")),
    ]
# fmt: on


def send_proton(pair: Pair, path: str, messages: list[Message]) -> None:
    conn = BlockingConnection(
        f"amqp://{pair.secondary.host}:{pair.secondary.port}",
        timeout=30,
        allowed_mechs="ANONYMOUS PLAIN",
    )
    try:
        assert put_token(conn, pair.secondary, path)[0] == 202
        sender = conn.create_sender(path)
        for message in messages:
            sender.send(message)
    finally:
        conn.close()


def backlog_cases(pair: Pair, paths: list[str]) -> dict[tuple[str, int], str | None]:
    """(queue, sequence number) → the ``case`` property (None: a scenario message)."""
    out: dict[tuple[str, int], str | None] = {}
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        for path in paths:
            with client.get_queue_receiver(path) as receiver:
                seq = 1
                while batch := receiver.peek_messages(100, sequence_number=seq):
                    for m in batch:
                        case = (m.application_properties or {}).get(b"case")
                        out[(path, m.sequence_number)] = case.decode() if case else None
                    seq = batch[-1].sequence_number + 1
    return out


def broker_state(pair: Pair) -> dict[str, Any]:
    return {
        path: {s: (m.state, m.lock_token, m.delivery_count) for s, m in e.messages.items()}
        for path, e in pair.secondary.broker.entities.items()
    }


def audit_verdicts(root: str, run_id: str) -> dict[tuple[str, int], tuple[str, str | None]]:
    rows = read_table(Path(root) / AUDIT_TABLE).to_pylist()
    return {
        (r["backlog_queue"], r["sequence_number"]): (r["verdict"], r["reason"])
        for r in rows
        if r["run_id"] == run_id and r["stage"] == "plan"
    }


def test_plan_verdicts_for_an_outage_and_every_kind_of_trouble(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair.primary.broker.declare(QueueSpec("dd", requires_duplicate_detection=True))
    pair.primary.broker.declare(QueueSpec("small", max_message_size_in_kilobytes=1))
    pair.secondary.broker.declare(QueueSpec(EXTRA_QUEUE))

    result = park_outage(pair, messages_per_phase=6)
    assert result.to_backlog()

    table = cases()
    assert len({c.label for c in table}) == len(table)
    assert sum(c.expect not in (REPLAY, None) for c in table) >= 20
    # one at a time, so that enqueue times follow the table's order; one client and one
    # sender per queue for them all
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        senders: dict[str, Any] = {}
        for case in table:
            path = (
                case.queue
                if isinstance(case.queue, str)
                else f"{PRIMARY}/x-servicebus-transfer/{case.queue}"
            )
            if isinstance(case.message, Message):
                send_proton(pair, path, [case.message])
            else:
                if path not in senders:
                    senders[path] = client.get_queue_sender(path)
                senders[path].send_messages(case.message)
            time.sleep(0.002)
        for sender in senders.values():
            sender.close()
    time.sleep(1.1)  # the one-second TTL passes

    paths = [f"{PRIMARY}/x-servicebus-transfer/{i}" for i in range(BACKLOG_QUEUES)]
    where = backlog_cases(pair, [*paths, EXTRA_QUEUE])
    expect_by_label = {c.label: c.expect for c in table}
    expected = {at: expect_by_label[label] if label else REPLAY for at, label in where.items()}
    assert sum(label is None for label in where.values()) == len(result.to_backlog())
    stored = sorted(label for label, want in expect_by_label.items() if want is not None)
    assert sorted(label for label in where.values() if label) == stored

    config = job_config(pair, tmp_path, monkeypatch)
    before = broker_state(pair)
    first = plan_now(config, spark)
    assert broker_state(pair) == before  # peek before = peek after: nothing locked or removed

    got = audit_verdicts(config.audit.path, first.run_id)
    wrong = {where[at]: (got.get(at), want) for at, want in expected.items() if got.get(at) != want}
    assert not wrong, wrong
    assert got.keys() == expected.keys()
    assert {q.path for q in first.queues if q.extra} == {EXTRA_QUEUE}
    audit = [
        r
        for r in read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
        if r["run_id"] == first.run_id
    ]
    assert "body" not in audit[0]
    assert all(len(r["body_sha256"]) == 64 for r in audit if r["body_size"] is not None)
    assert {r["outcome"] for r in audit} == {"planned"}
    replays = [r for r in audit if r["verdict"] == "replay"]
    assert all(r["batch_id"] and r["batch_position"] is not None for r in replays)
    runs = read_table(Path(config.audit.path) / RUNS_TABLE).to_pylist()
    assert [(r["run_id"], r["status"]) for r in runs] == [(first.run_id, "planned")]
    assert dict(runs[0]["counts"]) == first.counts
    assert first.counts["replay"] == len(replays)
    # what a run's wave takes from the plan's summary instead of reading its rows again
    assert first.sending_to == {(r["primary"], r["destination"]) for r in replays}
    unknown = {
        (r["primary"], r["destination"])
        for r in audit
        if r["verdict"] == "invalid" and r["reason"] == "destination_unknown"
    }
    assert unknown
    assert first.unknown == unknown
    assert set(dict(runs[0]["timings"])) == {
        "discover",
        "destinations",
        "snapshot",
        "reconcile",
        "audit",
    }
    text = format_summary(first)
    assert "sessions" in text
    assert "nowhere" in text
    assert pair.secondary.connection_string not in text

    # An earlier run replayed "again" (body A) and crashed before settling: the next plan
    # must not replay it, and the other body under that MessageId stays a conflict.
    audit_root = Path(config.audit.path) / AUDIT_TABLE
    planned = spark.read.parquet(*DeltaTable(str(audit_root)).file_uris())
    sent = (
        planned.where((F.col("message_id") == "again") & (F.col("verdict") == "replay"))
        .withColumn("run_id", F.lit("an-earlier-run"))
        .withColumn("stage", F.lit("replay"))
        .withColumn("outcome", F.lit("sent"))
    )
    assert append_dataframe(sent, audit_root, "test-replay") == 1

    second = plan_now(config, spark)
    assert broker_state(pair) == before
    got = audit_verdicts(config.audit.path, second.run_id)
    at = {label: pos for pos, label in where.items() if label}
    expected[at["reused_first"]] = ("duplicate", "already_replayed")
    expected[at["reused_other_body"]] = ("conflict", "message_id_reused_after_replay")
    wrong = {where[k]: (got.get(k), want) for k, want in expected.items() if got.get(k) != want}
    assert not wrong, wrong
