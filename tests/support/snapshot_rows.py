"""Hand-made snapshot rows for the Spark tests (no Service Bus).

Each row holds a real encoded message: python-qpid-proton encodes its properties,
annotations and body; the application properties are encoded here value by value (so
that a test can put what proton refuses on the wire: a key that is not UTF-8, a key
twice) and read back by the snapshot's own reader, as a peek's would be.
"""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.core import amqp_bytes as ab
from syphon.core.peeked import content_columns
from syphon.core.schema import SNAPSHOT, names
from syphon.core.timespan import timedelta_to_ticks

SNAPSHOT_COLUMNS = names(SNAPSHOT)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)


def _sized(code8: int, code32: int, raw: bytes) -> bytes:
    if len(raw) <= 255:
        return bytes([code8, len(raw)]) + raw
    return bytes([code32]) + struct.pack(">I", len(raw)) + raw


def amqp_value(value: Any) -> bytes:
    """A Python value encoded as a .NET sender would send it (ints as longs)."""
    if value is None:
        return b"\x40"
    if isinstance(value, bool):
        return b"\x41" if value else b"\x42"
    if isinstance(value, int):
        return b"\x81" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"\x82" + struct.pack(">d", value)
    if isinstance(value, str):
        return ab.encode_string(value)
    if isinstance(value, bytes):
        return _sized(0xA0, 0xB0, value)
    if isinstance(value, datetime):
        return ab.encode_timestamp(value)
    raise TypeError(f"no encoding here for {type(value).__name__}")


def _key(key: Any) -> bytes:
    # a string key, even when its bytes are not UTF-8 (as a foreign sender may write)
    raw = key if isinstance(key, bytes) else str(key).encode()
    return _sized(0xA1, 0xB1, raw)


def encode_message(
    props: list[tuple[Any, Any]],
    *,
    body: bytes | None = b"body",
    body_type: str = "data",
    message_id: str | None = None,
    partition_key: str | None = None,
    content_type: str | None = None,
) -> bytes:
    """An encoded backlog message (as a peek returns it, less the service's annotations)."""
    from proton import Message, symbol

    message = Message()
    if message_id is not None:
        message.id = message_id
    if content_type is not None:
        message.content_type = symbol(content_type)
    if partition_key is not None:
        message.annotations = {symbol("x-opt-partition-key"): partition_key}
    if body_type == "data":
        message.body = body or b""
        message.inferred = True
    elif body_type == "sequence":
        message.body = [1, "two"]
        message.inferred = True
    else:
        message.body = "a value body"
    parts = ab.sections(message.encode())
    entries = [(_key(k), amqp_value(v)) for k, v in props]
    app = ab.section(ab.APPLICATION_PROPERTIES, ab.encode_map(entries)) if entries else b""
    before = b"".join(p.raw for p in parts if p.code < ab.APPLICATION_PROPERTIES)
    after = b"".join(p.raw for p in parts if p.code > ab.APPLICATION_PROPERTIES)
    return before + app + after


def row(
    queue: int,
    seq: int,
    *,
    path: Any = "orders",
    minutes: float = 0,
    message_id: str | None = None,
    body: bytes | None = b"body",
    session: Any = None,
    partition_key: str | None = None,
    ttl: timedelta | None = None,
    content_type: str | None = None,
    extra: dict[Any, Any] | list[tuple[Any, Any]] | None = None,
    body_type: str = "data",
) -> dict[str, Any]:
    props: list[tuple[Any, Any]] = []
    if path is not None:
        props.append(("x-ms-path", path))
    if session is not None:
        props.append(("x-ms-sessionid", session))
    if ttl is not None:
        props.append(("x-ms-timetolive", timedelta_to_ticks(ttl)))
    props.extend(extra.items() if isinstance(extra, dict) else extra or [])
    encoded = encode_message(
        props,
        body=body,
        body_type=body_type,
        message_id=message_id,
        partition_key=partition_key,
        content_type=content_type,
    )
    out = snapshot_row(encoded, seq, queue)
    out.update(
        enqueued_time=T0 + timedelta(minutes=minutes),
        delivery_count=0,
        message_id=message_id,
        partition_key=partition_key,
        content_type=content_type,
    )
    return out


def snapshot_row(encoded: bytes, seq: int, queue: int = 0) -> dict[str, Any]:
    """A snapshot row of an encoded message, read by the snapshot's own reader (system
    properties left empty: what only the bytes decide is under test)."""
    values: dict[str, Any] = dict.fromkeys(SNAPSHOT_COLUMNS)
    values.update(
        backlog_queue=f"contoso-primary/x-servicebus-transfer/{queue}",
        sequence_number=seq,
        enqueued_time=T0,
        **content_columns(encoded),
    )
    return values
