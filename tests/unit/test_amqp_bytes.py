"""syphon's byte-level AMQP reader against python-qpid-proton's encoder and decoder (an
implementation independent of both syphon and the Service Bus SDK): every value it
slices out of a map decodes, in proton, to the same type and value; maps put together
from those slices decode to the same map; messages split into their sections."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Data, Message

from syphon.core import amqp_bytes as ab

#: proton's type codes and the AMQP type names syphon reads from format codes
TYPES = {
    Data.NULL: "null",
    Data.BOOL: "boolean",
    Data.UBYTE: "ubyte",
    Data.BYTE: "byte",
    Data.USHORT: "ushort",
    Data.SHORT: "short",
    Data.UINT: "uint",
    Data.INT: "int",
    Data.CHAR: "char",
    Data.ULONG: "ulong",
    Data.LONG: "long",
    Data.TIMESTAMP: "timestamp",
    Data.FLOAT: "float",
    Data.DOUBLE: "double",
    Data.DECIMAL32: "decimal32",
    Data.DECIMAL64: "decimal64",
    Data.DECIMAL128: "decimal128",
    Data.UUID: "uuid",
    Data.BINARY: "binary",
    Data.STRING: "string",
    Data.SYMBOL: "symbol",
    Data.LIST: "list",
    Data.MAP: "map",
    Data.ARRAY: "array",
    Data.DESCRIBED: "described",
}


def _put(kind: str, value: Any) -> Any:
    def put(data: Data) -> None:
        if kind == "described":  # a .NET TimeSpan as the .NET SDK writes it
            data.put_described()
            data.enter()
            data.put_symbol("com.microsoft:timespan")
            data.put_long(value)
            data.exit()
        elif kind == "list":
            data.put_list()
            data.enter()
            for item in value:
                data.put_int(item)
            data.exit()
        elif kind == "null":
            data.put_null()
        else:
            getattr(data, f"put_{kind}")(value)

    return put


UINTS = {"ubyte": 8, "ushort": 16, "uint": 32, "ulong": 64}
INTS = {"byte": 8, "short": 16, "int": 32, "long": 64}
VALUES = st.one_of(
    st.just(("null", None)),
    st.tuples(st.just("bool"), st.booleans()),
    *[st.tuples(st.just(k), st.integers(0, 2**n - 1)) for k, n in UINTS.items()],
    *[
        st.tuples(st.just(k), st.integers(-(2 ** (n - 1)), 2 ** (n - 1) - 1))
        for k, n in INTS.items()
    ],
    st.tuples(st.just("float"), st.floats(width=32, allow_nan=False)),
    st.tuples(st.just("double"), st.floats(allow_nan=False)),
    st.tuples(st.just("char"), st.characters(codec="utf-8")),
    st.tuples(st.just("timestamp"), st.integers(-(2**50), 2**50)),
    st.tuples(st.just("uuid"), st.uuids()),
    st.tuples(st.just("binary"), st.binary(max_size=300)),
    st.tuples(st.just("string"), st.text(max_size=300)),
    st.tuples(st.just("symbol"), st.text("abcxyz:-", max_size=300)),
    st.tuples(st.just("decimal32"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("decimal64"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("described"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("list"), st.lists(st.integers(-5, 5), max_size=4)),
)


def proton_map(values: list[tuple[str, Any]]) -> bytes:
    data = Data()
    data.put_map()
    data.enter()
    for i, (kind, value) in enumerate(values):
        data.put_string(f"k{i}")
        _put(kind, value)(data)
    data.exit()
    return bytes(data.encode())


def proton_read(encoded: bytes) -> tuple[int | None, Any]:
    data = Data()
    data.decode(encoded)
    data.rewind()
    data.next()
    value = data.get_object()
    if isinstance(value, memoryview):  # a binary is a view into data's buffer, freed with it
        value = value.tobytes()
    return data.type(), value


@settings(max_examples=200, deadline=None)
@given(st.lists(VALUES, max_size=12))
def test_map_values_are_sliced_with_their_types_and_put_back_together(
    values: list[tuple[str, Any]],
) -> None:
    encoded = proton_map(values)
    entries = ab.map_entries(encoded)
    assert [ab.decode(k) for k, _ in entries] == [f"k{i}" for i in range(len(values))]
    for (kind, value), (_, raw) in zip(values, entries, strict=True):
        ptype, pvalue = proton_read(raw)
        assert ab.type_name(raw) == TYPES[ptype]
        expected_type, expected = proton_read(_encoded_alone(kind, value))
        assert (ptype, pvalue) == (expected_type, expected)
    rebuilt = ab.encode_map(entries)
    assert canonical(rebuilt) == canonical(encoded)  # the same map, types and all
    assert [r for _, r in ab.map_entries(rebuilt)] == [r for _, r in entries]


def canonical(encoded: bytes) -> bytes:
    """The bytes proton writes for what it reads from ``encoded``."""
    data = Data()
    data.decode(encoded)
    return bytes(data.encode())


def _encoded_alone(kind: str, value: Any) -> bytes:
    data = Data()
    _put(kind, value)(data)
    return bytes(data.encode())


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("null", None, None),
        ("bool", True, True),
        ("ubyte", 200, 200),
        ("byte", -3, -3),
        ("ushort", 65535, 65535),
        ("short", -2, -2),
        ("uint", 7, 7),
        ("int", -7, -7),
        ("ulong", 2**64 - 1, 2**64 - 1),
        ("long", 7, 7),
        ("long", -(2**63), -(2**63)),
        ("double", 1.5, 1.5),
        ("char", "é", "é"),
        ("binary", b"\xff\x00", b"\xff\x00"),
        ("string", "x" * 300, "x" * 300),
        ("symbol", "com.microsoft:uri", "com.microsoft:uri"),
        ("uuid", uuid.UUID(int=5), uuid.UUID(int=5)),
        (
            "timestamp",
            1_700_000_000_123,
            datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc),
        ),
        ("described", 10_000_000, 10_000_000),
    ],
)
def test_decode_reads_each_primitive(kind: str, value: Any, expected: Any) -> None:
    assert ab.decode(_encoded_alone(kind, value)) == expected


def test_a_message_splits_into_its_sections_and_descriptors_are_read() -> None:
    message = Message(
        id="m1",
        subject="s",
        properties={"k": 1},
        body=b"payload",
        annotations={"x-opt-partition-key": "p"},
        ttl=5,
    )
    message.inferred = True  # a bytes body goes in a data section
    encoded = bytes(message.encode())
    parts = ab.sections(encoded)
    assert [p.code for p in parts] == [
        ab.HEADER,
        ab.MESSAGE_ANNOTATIONS,
        ab.PROPERTIES,
        ab.APPLICATION_PROPERTIES,
        ab.DATA,
    ]
    assert b"".join(p.raw for p in parts) == encoded
    props = ab.compound_items(parts[2].value)
    assert (ab.decode(props[0]), ab.decode(props[3])) == ("m1", "s")
    assert ab.decode(parts[4].value) == b"payload"
    described = _encoded_alone("described", 5)
    assert ab.descriptor(described) == "com.microsoft:timespan"
    assert ab.descriptor(props[0]) is None


def test_lists_and_maps_take_their_smallest_encoding() -> None:
    small = ab.encode_compound([ab.encode_uint(1)], is_map=False)
    assert small[:3] == b"\xc0\x03\x01"
    assert ab.encode_compound([], is_map=False) == b"\x45"
    big = ab.encode_map([(ab.encode_string("k"), ab.encode_string("v" * 300))])
    assert big[0] == 0xD1
    assert proton_read(big)[1] == {"k": "v" * 300}
    assert proton_read(small)[1] == [1]


@pytest.mark.parametrize(
    "broken",
    [b"", b"\xa1\x05ab", b"\xc1\x05\x02\xa1\x01k", b"\x99", b"\xd1\x00\x00\x00\x09"],
)
def test_bytes_that_are_not_what_they_claim_are_refused(broken: bytes) -> None:
    with pytest.raises(ab.AmqpFormatError):
        ab.map_entries(broken) if broken[:1] in (b"\xc1", b"\xd1") else ab.decode(broken)


def test_a_map_with_an_odd_number_of_items_or_a_list_is_not_a_map() -> None:
    with pytest.raises(ab.AmqpFormatError, match="odd"):
        ab.map_entries(b"\xc1\x02\x01\x41")
    with pytest.raises(ab.AmqpFormatError, match="list"):
        ab.map_entries(b"\xc0\x01\x00")


def _a_received_message() -> bytes:
    """A message as the service hands one out: its annotations, properties, application
    properties and a data body."""
    from proton import symbol, timestamp

    message = Message(id="m1", subject="s", properties={"x-ms-path": "orders", "n": 7}, ttl=5)
    message.body = b"payload" * 20
    message.inferred = True
    message.annotations = {
        symbol("x-opt-sequence-number"): 42,
        symbol("x-opt-enqueued-time"): timestamp(1_796_040_000_000),
        symbol("x-opt-partition-key"): "p",
    }
    return bytes(message.encode())


def test_a_message_cut_short_or_with_a_byte_changed_is_read_or_refused() -> None:
    """The reader's fast paths (a code's width from one table, sections sliced from the
    bytes) answer a damaged message as the format says: a row, or AmqpFormatError;
    never another error. Every cut, and every byte changed to a few values."""
    from syphon.core.peeked import snapshot_row

    encoded = _a_received_message()
    assert snapshot_row(encoded, "q")["sequence_number"] == 42
    damaged = [encoded[:cut] for cut in range(len(encoded))]
    damaged += [
        encoded[:at] + bytes([value]) + encoded[at + 1 :]
        for at in range(len(encoded))
        for value in (0x00, 0x40, 0xA1, 0xB1, 0xC1, 0xFF, (encoded[at] + 1) % 256)
    ]
    refused = 0
    for message in damaged:
        try:
            row = snapshot_row(message, "q")
        except ab.AmqpFormatError:
            refused += 1
            continue
        assert isinstance(row["sequence_number"], int)
        assert row["encoded"] == message
    assert 0 < refused < len(damaged)
