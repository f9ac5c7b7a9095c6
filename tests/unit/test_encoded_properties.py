"""What the snapshot reads from a message's bytes: application properties with their
AMQP types (encoded by python-qpid-proton, not by syphon or the SDK), the body's kind
and the bytes its digest covers, and the problems of bytes that cannot be read."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from proton import (
    Data,
    Described,
    Message,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

from syphon.core import amqp_bytes as ab
from syphon.core.peeked import read_encoded
from syphon.core.properties import (
    KEY_DUPLICATE,
    KEY_NOT_UTF8,
    KEY_WRONG_TYPE,
    MESSAGE_MALFORMED,
    encoded_properties,
    typed_encoded,
)


def encoded_value(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    return bytes(data.encode())


WHEN = datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("value", "amqp_type", "kind", "slot", "stored"),
    [
        (None, "null", "null", None, None),
        (True, "boolean", "bool", "bool", True),
        (ubyte(7), "ubyte", "int", "int", 7),
        (ushort(700), "ushort", "int", "int", 700),
        (uint(2**32 - 1), "uint", "int", "int", 2**32 - 1),
        (ulong(2**63 - 1), "ulong", "int", "int", 2**63 - 1),
        (ulong(2**64 - 1), "ulong", "other", "text", str(2**64 - 1)),
        (byte(-1), "byte", "int", "int", -1),
        (short(-300), "short", "int", "int", -300),
        (int32(-(2**31)), "int", "int", "int", -(2**31)),
        (2**40, "long", "int", "int", 2**40),
        (float32(1.5), "float", "float", "float", 1.5),
        (2.25, "double", "float", "float", 2.25),
        (decimal32(7), "decimal32", "other", None, None),
        (decimal64(7), "decimal64", "other", None, None),
        (decimal128(b"\x01" * 16), "decimal128", "other", None, None),
        (char("é"), "char", "string", "string", "é"),
        (timestamp(1_700_000_000_123), "timestamp", "timestamp", "timestamp", WHEN),
        (timestamp(2**62), "timestamp", "int", "int", 2**62),  # beyond year 9999
        (uuid.UUID(int=5), "uuid", "uuid", "text", str(uuid.UUID(int=5))),
        (b"\xff\x00", "binary", "bytes", "bytes", b"\xff\x00"),
        ("é" * 200, "string", "string", "string", "é" * 200),
        (symbol("sym"), "symbol", "string", "string", "sym"),
        (
            Described(symbol("com.microsoft:timespan"), 10**7),
            "com.microsoft:timespan",
            "int",
            "int",
            10**7,
        ),
        (
            Described(symbol("com.microsoft:uri"), "http://x/"),
            "com.microsoft:uri",
            "string",
            "string",
            "http://x/",
        ),
        (
            Described(symbol("com.microsoft:datetime-offset"), [1, 2]),
            "com.microsoft:datetime-offset",
            "other",
            None,
            None,
        ),
        ([1, "a"], "list", "other", None, None),
    ],
)
def test_each_value_keeps_its_amqp_type_beside_the_kind_syphon_reads(
    value: Any, amqp_type: str, kind: str, slot: str | None, stored: Any
) -> None:
    typed = typed_encoded(encoded_value(value))
    assert (typed["amqp_type"], typed["kind"]) == (amqp_type, kind)
    filled = {k: v for k, v in typed.items() if k not in ("kind", "amqp_type") and v is not None}
    assert filled == ({} if slot is None else {slot: stored})


def test_a_string_that_is_not_utf8_is_kept_as_its_bytes() -> None:
    typed = typed_encoded(b"\xa1\x02\xc3\x28")
    assert (typed["amqp_type"], typed["kind"], typed["bytes"]) == ("string", "bytes", b"\xc3\x28")


def raw_map(entries: list[tuple[bytes, bytes]]) -> bytes:
    return ab.encode_map(entries)


def test_keys_are_text_once_and_bad_keys_are_reported() -> None:
    one = b"\x81" + (1).to_bytes(8, "big")
    typed, problem = encoded_properties(
        raw_map([(ab.encode_string("a"), one), (ab.encode_symbol("b"), one), (b"\xa0\x01c", one)])
    )
    assert (sorted(typed), problem) == (["a", "b", "c"], None)
    assert encoded_properties(raw_map([(b"\xa1\x01\xff", one)]))[1] == KEY_NOT_UTF8
    typed, problem = encoded_properties(
        raw_map([(ab.encode_string("a"), one), (ab.encode_string("a"), b"\x40")])
    )
    assert (problem, typed["a"]["int"]) == (KEY_DUPLICATE, 1)
    typed, problem = encoded_properties(raw_map([(one, one)]))
    assert (problem, list(typed)) == (KEY_WRONG_TYPE, ["<long key 0>"])
    assert encoded_properties(None) == ({}, None)


def message(body: Any, inferred: bool) -> bytes:
    m = Message(body=body, properties={"x-ms-path": "q", "n": 1})
    m.inferred = inferred
    return bytes(m.encode())


def test_the_body_kind_and_the_bytes_its_digest_covers() -> None:
    props, problem, kind, body = read_encoded(message(b"raw", True))
    assert (props["n"]["amqp_type"], problem, kind, body) == ("long", None, "data", b"raw")
    _, _, kind, long_body = read_encoded(message(1, False))
    assert kind == "value"
    _, _, _, int_body = read_encoded(message(int32(1), False))
    assert long_body != int_body  # a change of type is a change of body
    _, _, kind, body = read_encoded(message([1, 2], True))
    assert kind == "sequence"
    assert ab.sections(body)[0].code == ab.AMQP_SEQUENCE


def test_bytes_that_are_not_a_message_are_malformed_not_an_error() -> None:
    assert read_encoded(b"\x00\x53\x74\xc1\x05") == ({}, MESSAGE_MALFORMED, "data", b"")
    assert read_encoded(b"junk")[1] == MESSAGE_MALFORMED


def peeked(annotations: dict[Any, Any], **fields: Any) -> bytes:
    m = Message(body=b"x", properties={"x-ms-path": "q"}, annotations=annotations, **fields)
    m.inferred = True
    return bytes(m.encode())


def test_a_row_reads_its_place_and_system_properties_from_the_bytes() -> None:
    from syphon.core.peeked import snapshot_row

    when = timestamp(1_900_000_000_000)
    encoded = peeked(
        {
            symbol("x-opt-sequence-number"): 41,
            symbol("x-opt-enqueued-time"): timestamp(5000),
            symbol("x-opt-partition-key"): "pk",
            symbol("x-opt-scheduled-enqueue-time"): when,
            symbol("x-mine"): decimal64(1),
        },
        id=ulong(7),
        correlation_id=uuid.UUID(int=1),
        subject="s",
        group_id="g",
        content_type=symbol("ct"),
        reply_to_group_id="rg",
        ttl=2.5,
        address="to-x",
        reply_to="reply-x",
        delivery_count=3,
    )
    row = snapshot_row(encoded, "ns/x-servicebus-transfer/0")
    got = {
        c: row[c]
        for c in (
            "sequence_number",
            "message_id",
            "correlation_id",
            "subject",
            "session_id",
            "content_type",
            "partition_key",
            "reply_to_session_id",
            "time_to_live_ms",
            "to",
            "reply_to",
            "delivery_count",
        )
    }
    assert got == {
        "sequence_number": 41,
        "message_id": "7",
        "correlation_id": str(uuid.UUID(int=1)),
        "subject": "s",
        "session_id": "g",
        "content_type": "ct",
        "partition_key": "pk",
        "reply_to_session_id": "rg",
        "time_to_live_ms": 2500,
        "to": "to-x",
        "reply_to": "reply-x",
        "delivery_count": 3,
    }
    assert row["enqueued_time"] == datetime(1970, 1, 1, 0, 0, 5, tzinfo=timezone.utc)
    assert row["scheduled_enqueue_time"] == datetime(2030, 3, 17, 17, 46, 40, tzinfo=timezone.utc)
    assert (row["property_problem"], row["encoded"]) == (None, encoded)


def test_what_a_message_does_not_carry_is_empty_not_guessed() -> None:
    from syphon.core.peeked import snapshot_row

    # no header, no application properties; a string-keyed annotation is a sender's
    # own, not the service's partition key
    annotations = ab.encode_map(
        [
            (ab.encode_symbol("x-opt-sequence-number"), b"\x55\x01"),
            (ab.encode_string("x-opt-partition-key"), ab.encode_string("not-the-service's")),
        ]
    )
    encoded = ab.section(ab.MESSAGE_ANNOTATIONS, annotations) + ab.section(ab.DATA, b"\xa0\x01x")
    row = snapshot_row(encoded, "q")
    assert (row["delivery_count"], row["time_to_live_ms"], row["partition_key"]) == (0, None, None)
    assert (row["application_properties"], row["property_problem"]) == ({}, None)
    assert (row["body_type"], row["body_size"]) == ("data", 1)
    # a header that ends before the TTL
    short = ab.section(ab.HEADER, ab.encode_compound([b"\x41"], is_map=False)) + encoded
    assert snapshot_row(short, "q")["time_to_live_ms"] is None


def test_a_row_whose_system_part_cannot_be_read_keeps_its_place_and_is_malformed() -> None:
    from syphon.core.peeked import snapshot_row

    encoded = peeked({symbol("x-opt-sequence-number"): 3, symbol("x-opt-partition-key"): "k"})
    encoded = encoded.replace(b"\xa1\x01k", b"\xa1\x01\xff")  # a key that is not UTF-8
    row = snapshot_row(encoded, "q")
    assert (row["sequence_number"], row["property_problem"]) == (3, MESSAGE_MALFORMED)
    assert (row["delivery_count"], row["partition_key"], row["to"]) == (0, None, None)
    with pytest.raises(ab.AmqpFormatError, match="without x-opt-sequence-number"):
        snapshot_row(peeked({symbol("x-mine"): 1}), "q")
    broken = ab.section(ab.MESSAGE_ANNOTATIONS, b"\xc1\x01\x01")  # a map with one item
    with pytest.raises(ab.AmqpFormatError, match="without x-opt-sequence-number"):
        snapshot_row(broken, "q")
