"""Faithful replay end to end: backlog messages parked through raw AMQP
(python-qpid-proton, so that no Service Bus SDK decides a type) with an application
property of every AMQP type, every body kind, every system property the SDKs model and
the .NET SDK's described TimeSpan as the TTL alias; the job runs; the primary's copies
are received through raw AMQP too and compared section by section, in proton's own
encoding of each: equal to the original except the aliases restored into the message
and the TTL reduced. A changed type (a long sent back as an int, binary as a string)
changes the encoding and fails the test."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from proton import Data, Described, Message, int32, symbol, timestamp, ulong
from proton.utils import BlockingConnection

from support.amqp_values import TIMESPAN, every_type
from support.paired_env import PRIMARY, Pair, job_config, run_job
from support.sas import put_token
from syphon.core import amqp_bytes as ab
from syphon.core.rebuild import SERVICE_ANNOTATIONS
from syphon.core.schema import Status

HOUR_TICKS = 36_000_000_000


def originals() -> list[tuple[Message, dict[str, Any]]]:
    """(original message, its aliases besides the path), one per body kind and id type."""
    ids = [
        ("string-id", "corr"),
        (uuid.UUID(int=9), uuid.UUID(int=10)),
        (ulong(2**64 - 2), ulong(3)),
        (b"\x00binary-id", b"\x01corr"),
    ]
    bodies: list[tuple[Any, bool]] = [
        (b"\x00\x01 data body", True),
        ({"k": [1, int32(2)], "t": timestamp(5)}, False),
        ([[1, "a"], [ulong(2)]], True),
        (b"", True),
    ]
    out = []
    for i, ((mid, cid), (body, inferred)) in enumerate(zip(ids, bodies, strict=True)):
        session = f"session-{i}" if i % 2 else None
        message = Message(
            id=mid,
            correlation_id=cid,
            subject="subject",
            address="to-address",
            reply_to="reply-queue",
            content_type=symbol("application/x-test"),
            content_encoding=symbol("gzip"),
            reply_to_group_id="reply-session",
            group_id=session,
            group_sequence=i + 1,
            creation_time=1_700_000_000.5,
            expiry_time=1_900_000_000.25,
            user_id=b"user",
            properties={"case": f"case-{i}", **every_type()},
            body=body,
            annotations={
                symbol("x-mine"): int32(i),
                symbol("x-opt-sender-owned"): "kept",
                **({symbol("x-opt-partition-key"): session} if session else {}),
            },
        )
        message.inferred = inferred
        aliases: dict[str, Any] = {}
        if session:
            aliases["x-ms-sessionid"] = session
        if i == 1:
            aliases["x-ms-timetolive"] = Described(TIMESPAN, HOUR_TICKS)
        elif i == 2:
            aliases["x-ms-timetolive"] = HOUR_TICKS
        out.append((message, aliases))
    return out


def parked(message: Message, aliases: dict[str, Any]) -> Message:
    """``message`` as a paired sender parks it: the destination, session id and TTL in
    aliases, no group-id, no TTL of its own."""
    copy = Message()
    copy.decode(message.encode())
    copy.group_id = None
    copy.properties = {**message.properties, "x-ms-path": "orders", **aliases}
    copy.inferred = message.inferred
    return copy


def sections(message: Message) -> dict[int, bytes]:
    """Each section of ``message`` in proton's own encoding (the annotations without the
    service's)."""
    out = {}
    for part in ab.sections(bytes(message.encode())):
        value = part.value
        if part.code == ab.MESSAGE_ANNOTATIONS:
            value = ab.encode_map(
                [
                    (k, v)
                    for k, v in ab.map_entries(value)
                    if str(ab.decode(k)) not in SERVICE_ANNOTATIONS
                ]
            )
        data = Data()
        data.decode(ab.section(part.code, value))
        out[part.code] = bytes(data.encode())
    return out


def connect(sb: Any, entity: str) -> BlockingConnection:
    conn = BlockingConnection(
        f"amqp://{sb.host}:{sb.port}", timeout=30, allowed_mechs="ANONYMOUS PLAIN"
    )
    assert put_token(conn, sb, entity)[0] == 202
    return conn


def test_every_type_body_and_system_property_comes_back_as_it_was_sent(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = originals()
    backlog = f"{PRIMARY}/x-servicebus-transfer/0"
    conn = connect(pair.secondary, backlog)
    try:
        sender = conn.create_sender(backlog)
        for message, aliases in sent:
            sender.send(parked(message, aliases))
    finally:
        conn.close()

    result = run_job(job_config(pair, tmp_path, monkeypatch), spark)
    assert result.status == Status.DONE
    assert result.outcomes == {"replay_sent": len(sent), "settle_completed": len(sent)}
    assert result.counts == {"replay": len(sent)}

    conn = connect(pair.primary, "orders")
    try:
        receiver = conn.create_receiver("orders")
        received = {}
        for _ in sent:
            message = receiver.receive(timeout=10)
            received[message.properties["case"]] = message
        receiver.accept()
    finally:
        conn.close()

    for original, aliases in sent:
        back = received[original.properties["case"]]
        want, got = sections(original), sections(back)
        for code in (
            ab.PROPERTIES,
            ab.APPLICATION_PROPERTIES,
            ab.MESSAGE_ANNOTATIONS,
            ab.DATA,
            ab.AMQP_VALUE,
            ab.AMQP_SEQUENCE,
        ):
            assert got.get(code) == want.get(code), (original.properties["case"], hex(code))
        # the TTL: what is left of the original's, none where it had none
        if "x-ms-timetolive" in aliases:
            assert 3_500_000 < back.ttl * 1000 <= 3_600_000
        else:
            assert back.ttl == 0
