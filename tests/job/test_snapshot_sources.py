"""Backlog discovery and the peek walk, against local Service Bus namespaces."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import QueueSpec
from support.paired_env import PRIMARY, Pair, context, job_config
from support.quick_client import QuickClient
from syphon.core.render import spark_schema
from syphon.core.schema import SNAPSHOT, names
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.servicebus.discovery import discover_by_management, discover_by_probe
from syphon.servicebus.peek import peek_rows

SNAPSHOT_COLUMNS = names(SNAPSHOT)

pytestmark = pytest.mark.timeout(180)


def queue(i: int, primary: str = PRIMARY) -> str:
    return f"{primary}/x-servicebus-transfer/{i}"


def fill(pair: Pair, path: str, messages: list[Any]) -> None:
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_sender(path) as sender:
            batch = sender.create_message_batch()
            for m in messages:
                try:
                    batch.add_message(m)
                except ValueError:
                    sender.send_messages(batch)
                    batch = sender.create_message_batch()
                    batch.add_message(m)
            sender.send_messages(batch)


def backlog_messages(n: int, destination: str = "orders") -> list[Any]:
    return [
        to_backlog_message(
            ServiceBusMessage(
                f"m{i}".encode() * 20, message_id=f"m{i}", application_properties={"i": i}
            ),
            destination,
        )
        for i in range(n)
    ]


def test_management_discovery_finds_extras_and_counts(pair: Pair) -> None:
    broker = pair.secondary.broker
    broker.declare(QueueSpec(queue(7)))
    broker.declare(QueueSpec(queue(2, "another-primary")))
    broker.declare(QueueSpec("orders"))
    fill(pair, queue(1), backlog_messages(3))
    admin = ServiceBusAdministrationClient.from_connection_string(
        pair.secondary.admin_connection_string, connection_verify=pair.secondary.ca_bundle
    )
    found = discover_by_management(admin, [PRIMARY], queue_count=4)
    assert [q.path for q in found] == [queue(i) for i in (0, 1, 2, 3, 7)]
    assert [q.extra for q in found] == [False, False, False, False, True]
    assert [q.message_count for q in found] == [0, 3, 0, 0, 0]
    assert [q.empty for q in found] == [True, False, True, True, True]
    # what the namespace says its messages take: a local session's heap is sized by it
    assert [q.size_bytes == 0 for q in found] == [True, False, True, True, True]
    assert all(q.size_bytes is not None for q in found)


def test_probe_discovery(pair: Pair) -> None:
    pair.secondary.broker.declare(QueueSpec(queue(6)))
    fill(pair, queue(2), backlog_messages(1))
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        found = discover_by_probe(client, [PRIMARY], queue_count=4, probe_limit=8)
    assert [(q.index, q.message_count, q.extra) for q in found] == [
        (0, 0, False),
        (1, 0, False),
        (2, None, False),
        (3, 0, False),
        (6, 0, True),
    ]


def test_peek_walk_reads_everything_and_changes_nothing(pair: Pair) -> None:
    path = queue(0)
    fill(pair, path, backlog_messages(620))
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        # one message locked by a receiver, as a crashed earlier run could leave it
        with client.get_queue_receiver(path) as receiver:
            (locked,) = receiver.receive_messages(1, max_wait_time=2)
            entity = pair.secondary.broker.entity(path)
            before = {
                seq: (m.state, m.lock_token, m.delivery_count) for seq, m in entity.messages.items()
            }
            with client.get_queue_receiver(path) as peeker:
                rows = list(peek_rows(peeker, path))
                tail = list(peek_rows(peeker, path, from_sequence_number=600))
                window = list(peek_rows(peeker, path, 10, until_sequence_number=19))
            after = {
                seq: (m.state, m.lock_token, m.delivery_count) for seq, m in entity.messages.items()
            }
            receiver.abandon_message(locked)
    assert before == after  # nothing locked, removed or counted by the walk
    assert [r["sequence_number"] for r in rows] == list(range(1, 621))
    assert [r["message_id"] for r in rows] == [f"m{i}" for i in range(620)]
    assert [r["sequence_number"] for r in tail] == list(range(600, 621))
    assert [r["sequence_number"] for r in window] == list(range(10, 20))


def test_rows_keep_what_the_replay_needs(pair: Pair, spark: Any) -> None:
    path = queue(3)
    original = ServiceBusMessage(
        b"\x00\xffbody",
        message_id="id-1",
        session_id="s",
        partition_key="s",
        time_to_live=timedelta(minutes=3),
        content_type="ct",
        correlation_id="c",
        subject="sub",
        to="t",
        reply_to="r",
        reply_to_session_id="rs",
        application_properties={"k": "v", "n": 5, b"raw": b"bytes-value"},
    )
    fill(pair, path, [to_backlog_message(original, "sessions")])
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_receiver(path) as peeker:
            (row,) = list(peek_rows(peeker, path))
    assert tuple(row) == SNAPSHOT_COLUMNS
    # the message as the service holds it, and the digest of its body
    assert row["encoded"].endswith(b"\x00\x53\x75\xa0\x06\x00\xffbody")
    assert row["body_sha256"] == hashlib.sha256(b"\x00\xffbody").hexdigest()
    assert row["body_size"] == 6
    assert row["body_type"] == "data"
    assert (row["message_id"], row["partition_key"], row["session_id"]) == ("id-1", "s", None)
    assert (row["content_type"], row["correlation_id"], row["subject"]) == ("ct", "c", "sub")
    assert (row["to"], row["reply_to"], row["reply_to_session_id"]) == ("t", "r", "rs")
    assert row["time_to_live_ms"] is None  # the backlog copy's own TTL is infinite
    assert row["enqueued_time"].tzinfo is not None
    # the application properties with the types the SDK sent them with
    props = {k: (v["amqp_type"], v[v["kind"]]) for k, v in row["application_properties"].items()}
    assert props == {
        "x-ms-path": ("string", "sessions"),
        "x-ms-sessionid": ("string", "s"),
        "x-ms-timetolive": ("long", 3 * 60 * 10_000_000),
        "k": ("string", "v"),
        "n": ("int", 5),
        "raw": ("string", "bytes-value"),
    }
    df = spark.createDataFrame([row], spark_schema(SNAPSHOT))
    back = df.collect()[0]
    assert back["encoded"] == row["encoded"]
    assert back["application_properties"]["x-ms-path"]["string"] == "sessions"


def test_the_peek_tasks_read_what_the_peek_walk_reads(
    pair: Pair, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from syphon.core.config import NamespaceConfig, SecretRef
    from syphon.job.read.snapshot import QueueRange, peek_frame
    from syphon.servicebus.access import resolve_access

    fill(pair, queue(0), backlog_messages(300))
    fill(pair, queue(2), backlog_messages(5, destination="sessions"))
    secret = pair.secondary.connection_string
    monkeypatch.setenv("SNAPSHOT_TEST_SECONDARY", secret)
    secondary = NamespaceConfig("contoso-secondary", SecretRef(env="SNAPSHOT_TEST_SECONDARY"))
    access = resolve_access(secondary, "secondary")
    monkeypatch.delenv("SNAPSHOT_TEST_SECONDARY")  # read once, on the driver

    ranges = [QueueRange(queue(0)), QueueRange(queue(2)), QueueRange(queue(0), 100, 149)]
    df = peek_frame(spark, access, ranges, page=120)
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert len(rows) == 300 + 5 + 50
    got = sorted((r["backlog_queue"], r["sequence_number"]) for r in rows)
    expected = sorted(
        [(queue(0), s) for s in range(1, 301)]
        + [(queue(2), s) for s in range(1, 6)]
        + [(queue(0), s) for s in range(100, 150)]
    )
    assert got == expected
    # fewer tasks than ranges: the ranges are dealt out and peeked side by side
    dealt_df = peek_frame(spark, access, ranges, tasks=2)
    assert dealt_df.rdd.getNumPartitions() == 2
    assert sorted((r["backlog_queue"], r["sequence_number"]) for r in dealt_df.collect()) == (
        expected
    )
    sample = next(r for r in rows if r["backlog_queue"] == queue(2))
    assert sample["application_properties"]["x-ms-path"]["string"] == "sessions"
    assert sample["enqueued_time"] is not None
    assert b"\x00\x53\x75" in sample["encoded"]  # a data section
    # the connection string is in no plan
    plan = df._jdf.queryExecution().toString()
    assert "SharedAccessKey" not in plan
    assert secret not in plan
    assert pair.secondary.broker.entity(queue(0)).messages[1].delivery_count == 0
    assert peek_frame(spark, access, []).count() == 0


def test_a_large_queue_is_read_in_ranges_exactly_once(
    pair: Pair, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from syphon.job.read.snapshot import QueueRange, read_snapshot, snapshot_ranges, split_ranges
    from syphon.job.sources import run_source

    fill(pair, queue(1), backlog_messages(620))
    fill(pair, queue(3), backlog_messages(7))
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_receiver(queue(1), receive_mode="receiveanddelete") as r:
            removed = 0
            while removed < 100:  # a settled head: the queue now starts at 101
                removed += len(r.receive_messages(100 - removed, max_wait_time=2))
    config = job_config(pair, tmp_path, monkeypatch, split_messages=200)
    ctx = context(config, spark)
    queues = [q for q in run_source(ctx).discover(ctx) if not q.empty]
    assert [(q.index, q.message_count) for q in queues] == [(1, 520), (3, 7)]
    ranges = snapshot_ranges(ctx.namespaces.secondary, queues, 200)
    assert ranges == [
        QueueRange(queue(1), 101, 300),
        QueueRange(queue(1), 301, 500),
        QueueRange(queue(1), 501, None),
        QueueRange(queue(3)),
    ]
    df = read_snapshot(spark, ctx.namespaces.secondary, queues, 200)
    got = sorted((r["backlog_queue"], r["sequence_number"]) for r in df.collect())
    assert got == sorted(
        [(queue(1), s) for s in range(101, 621)] + [(queue(3), s) for s in range(1, 8)]
    )
    assert split_ranges("q", 1, 0, 10) == [QueueRange("q", 1, None)]
    assert split_ranges("q", 5, 25, 10)[-1] == QueueRange("q", 25, None)
