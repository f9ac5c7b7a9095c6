"""AMQP 1.0 messages as bytes: sections, maps and lists taken apart and put together
without decoding the values inside them.

A faithful replay must send every application property and system property with the
type it had on the wire (a ``long`` stays a ``long``, a ``timestamp`` a ``timestamp``,
a described .NET ``TimeSpan`` a described value). Decoding to Python values and encoding
them again loses types (Python has one ``int``), so syphon never does: it finds where
each value starts and ends from the format codes alone (AMQP 1.0, part 1, section 1.6)
and moves the encoded bytes. Only what syphon reads (the envelope's alias keys and
values, the partition key) is decoded, by :func:`decode`.

Format codes by their high nibble: ``0x4`` no data, ``0x5`` one byte, ``0x6`` two, ``0x7``
four, ``0x8`` eight, ``0x9`` sixteen, ``0xa``/``0xb`` variable with a one- or four-byte
size, ``0xc``/``0xd`` compound (list, map) and ``0xe``/``0xf`` arrays, likewise; ``0x00``
starts a described value (a descriptor, then the value).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

# section descriptors (AMQP 1.0, part 3, section 3.2)
HEADER = 0x70
DELIVERY_ANNOTATIONS = 0x71
MESSAGE_ANNOTATIONS = 0x72
PROPERTIES = 0x73
APPLICATION_PROPERTIES = 0x74
DATA = 0x75
AMQP_SEQUENCE = 0x76
AMQP_VALUE = 0x77
FOOTER = 0x78

#: The fields of the properties list (AMQP 1.0, part 3, 3.2.4) syphon reads or writes, by
#: position, under the names syphon's columns give them (group-id: the session id).
PROPERTY_PLACES = {
    "message_id": 0,
    "to": 2,
    "subject": 3,
    "reply_to": 4,
    "correlation_id": 5,
    "content_type": 6,
    "session_id": 10,
    "reply_to_session_id": 12,
}

_SECTION_NAMES = {
    "amqp:header:list": HEADER,
    "amqp:delivery-annotations:map": DELIVERY_ANNOTATIONS,
    "amqp:message-annotations:map": MESSAGE_ANNOTATIONS,
    "amqp:properties:list": PROPERTIES,
    "amqp:application-properties:map": APPLICATION_PROPERTIES,
    "amqp:data:binary": DATA,
    "amqp:amqp-sequence:list": AMQP_SEQUENCE,
    "amqp:amqp-value:*": AMQP_VALUE,
    "amqp:footer:map": FOOTER,
}

_FIXED_WIDTH = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}

#: The AMQP type of each primitive format code (aligned by type, a line per family of
#: codes: a table reads better so than one code per line).
TYPE_NAMES = {
    0x40: "null", 0x41: "boolean", 0x42: "boolean", 0x56: "boolean",
    0x50: "ubyte", 0x51: "byte", 0x60: "ushort", 0x61: "short",
    0x70: "uint", 0x52: "uint", 0x43: "uint", 0x71: "int", 0x54: "int",
    0x80: "ulong", 0x53: "ulong", 0x44: "ulong", 0x81: "long", 0x55: "long",
    0x72: "float", 0x82: "double", 0x74: "decimal32", 0x84: "decimal64",
    0x94: "decimal128", 0x73: "char", 0x83: "timestamp", 0x98: "uuid",
    0xa0: "binary", 0xb0: "binary", 0xa1: "string", 0xb1: "string",
    0xa3: "symbol", 0xb3: "symbol", 0x45: "list", 0xc0: "list", 0xd0: "list",
    0xc1: "map", 0xd1: "map", 0xe0: "array", 0xf0: "array", 0x00: "described",
}  # fmt: skip

#: A value's size: in its first byte after the code, or in its first four.
_SIZE_BYTE, _SIZE_WORD = -1, -4


def _width(code: int) -> int:
    """The bytes after a primitive ``code`` (fixed), or where its size is."""
    fixed = _FIXED_WIDTH.get(code >> 4)
    if fixed is not None:
        return fixed
    return _SIZE_BYTE if code >> 4 in (0xA, 0xC, 0xE) else _SIZE_WORD


#: Per primitive format code, :func:`_width` (what :func:`value_end` reads a message by).
_WIDTHS = {code: _width(code) for code in TYPE_NAMES if code != 0x00}


class AmqpFormatError(ValueError):
    """The bytes are not the AMQP encoding they should be."""


def value_end(buf: bytes | memoryview, pos: int) -> int:
    """Where the encoded value that starts at ``pos`` ends (one past its last byte).

    Raises:
        AmqpFormatError: an unknown format code, or the value runs past the end.
    """
    n = len(buf)
    if pos >= n:
        raise AmqpFormatError(f"a value expected at byte {pos}, the data ends at {n}")
    code = buf[pos]
    width = _WIDTHS.get(code)
    if width is None:  # a described value, or a code no AMQP type has
        return _value_end_other(buf, pos)
    if width >= 0:
        end = pos + 1 + width
    elif width == _SIZE_BYTE:
        if pos + 2 > n:
            _need(buf, pos + 1, 1)  # raises: the size runs past the end
        end = pos + 2 + buf[pos + 1]
    else:
        if pos + 5 > n:
            _need(buf, pos + 1, 4)  # raises: the size runs past the end
        end = pos + 5 + int.from_bytes(buf[pos + 1 : pos + 5], "big")
    if end > n:
        raise AmqpFormatError(f"the value at byte {pos} runs past the end ({end} > {n})")
    return end


def _value_end_other(buf: bytes | memoryview, pos: int) -> int:
    """:func:`value_end` of a described value, or the error of an unknown code."""
    code = buf[pos]
    if code == 0x00:
        return value_end(buf, value_end(buf, pos + 1))
    if code >> 4 in (0xA, 0xC, 0xE):
        _need(buf, pos + 1, 1)
    elif code >> 4 in (0xB, 0xD, 0xF):
        _need(buf, pos + 1, 4)
    raise AmqpFormatError(f"unknown format code 0x{code:02x} at byte {pos}")


def _need(buf: bytes | memoryview, pos: int, n: int) -> bytes:
    if pos + n > len(buf):
        raise AmqpFormatError(f"{n} bytes expected at byte {pos}, the data ends at {len(buf)}")
    return bytes(buf[pos : pos + n])


@dataclass(frozen=True)
class Section:
    """One section of an encoded message: its code and its bytes, whole (``raw``) and
    without the descriptor (``value``)."""

    code: int
    raw: bytes
    value: bytes


def sections(message: bytes) -> list[Section]:
    """The sections of an encoded message, in order.

    Raises:
        AmqpFormatError: not a sequence of described sections.
    """
    buf = message if isinstance(message, bytes) else bytes(message)
    out: list[Section] = []
    pos = 0
    while pos < len(buf):
        if buf[pos] != 0x00:
            raise AmqpFormatError(f"a section expected at byte {pos}")
        start_value = value_end(buf, pos + 1)
        end = value_end(buf, start_value)
        if start_value == pos + 3 and buf[pos + 1] == 0x53:  # a small ulong: the usual
            code = _section_code(buf[pos + 2])
        else:
            code = _section_code(decode(buf[pos + 1 : start_value]))
        out.append(Section(code, buf[pos:end], buf[start_value:end]))
        pos = end
    return out


def _section_code(descriptor: Any) -> int:
    if isinstance(descriptor, int) and HEADER <= descriptor <= FOOTER:
        return descriptor
    if isinstance(descriptor, str) and descriptor in _SECTION_NAMES:
        return _SECTION_NAMES[descriptor]
    raise AmqpFormatError(f"not a message section: descriptor {descriptor!r}")


def section(code: int, value: bytes) -> bytes:
    """A section from its code and its encoded value."""
    return bytes([0x00, 0x53, code]) + value


def compound_items(encoded: bytes) -> list[bytes]:
    """The encoded items of a list or map (a map's keys and values alternate), or of
    null (none).

    Raises:
        AmqpFormatError: not a list, a map or null, or its items do not fill it.
    """
    buf = encoded if isinstance(encoded, bytes) else bytes(encoded)
    code = buf[0] if len(buf) else None
    if code in (0x40, 0x45):
        return []
    if code in (0xC0, 0xC1):
        size, count, pos = buf[1], buf[2], 3
        end = 2 + size
    elif code in (0xD0, 0xD1):
        size = int.from_bytes(_need(buf, 1, 4), "big")
        count = int.from_bytes(_need(buf, 5, 4), "big")
        pos, end = 9, 5 + size
    else:
        raise AmqpFormatError("not a list or a map")
    items = []
    for _ in range(count):
        nxt = value_end(buf, pos)
        items.append(buf[pos:nxt])
        pos = nxt
    if pos != end or end != len(buf):
        raise AmqpFormatError("the items do not fill the list or map")
    return items


def map_entries(encoded: bytes) -> list[tuple[bytes, bytes]]:
    """The encoded (key, value) pairs of a map (or of null: none).

    Raises:
        AmqpFormatError: not a map, or an odd number of items.
    """
    if encoded[:1] in (b"\xc0", b"\xd0", b"\x45"):
        raise AmqpFormatError("a list, not a map")
    items = compound_items(encoded)
    if len(items) % 2:
        raise AmqpFormatError("a map with an odd number of items")
    return list(zip(items[::2], items[1::2], strict=True))


def encode_compound(items: Sequence[bytes], is_map: bool) -> bytes:
    """A list (or map, items alternating keys and values) of encoded items, in the
    smallest encoding that holds it."""
    body = b"".join(items)
    count = len(items)
    if not is_map and count == 0:
        return b"\x45"
    if len(body) + 1 <= 255 and count <= 255:
        return bytes([0xC1 if is_map else 0xC0, len(body) + 1, count]) + body
    return bytes([0xD1 if is_map else 0xD0]) + struct.pack(">II", len(body) + 4, count) + body


def encode_map(entries: Sequence[tuple[bytes, bytes]]) -> bytes:
    return encode_compound([part for entry in entries for part in entry], is_map=True)


def type_name(encoded: bytes) -> str:
    """The AMQP type of an encoded value (``described`` for a described one)."""
    return TYPE_NAMES[encoded[0]]


def descriptor(encoded: bytes) -> Any:
    """The descriptor of a described value, decoded (None for any other value)."""
    if not encoded or encoded[0] != 0x00:
        return None
    return decode(encoded[1 : value_end(encoded, 1)])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_NO_DATA = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0}
_STRUCTS = {
    0x50: ">B",
    0x51: ">b",
    0x52: ">B",
    0x53: ">B",
    0x54: ">b",
    0x55: ">b",
    0x60: ">H",
    0x61: ">h",
    0x70: ">I",
    0x71: ">i",
    0x72: ">f",
    0x80: ">Q",
    0x81: ">q",
    0x82: ">d",
}


def decode(encoded: bytes) -> Any:
    """The Python value of one encoded primitive (strings and symbols as ``str``,
    binary as ``bytes``, timestamps as aware datetimes, uuids as UUID, decimals as
    Decimal where the encoding allows); a described value as its value.

    Lists, maps and arrays are decoded item by item; only syphon's own reads use this
    (the values it sends stay encoded).

    Raises:
        AmqpFormatError: not one complete encoded value, or one Python cannot hold (a
            string that is not UTF-8, a timestamp beyond the year 9999, a map keyed by a
            list).
    """
    try:
        return _decode(encoded)
    except (UnicodeDecodeError, OverflowError, TypeError, ValueError) as exc:
        raise AmqpFormatError(f"a value that cannot be read: {type(exc).__name__}") from None


def _decode(encoded: bytes) -> Any:
    if value_end(encoded, 0) != len(encoded):
        raise AmqpFormatError("not exactly one encoded value")
    code = encoded[0]
    data = encoded[1:]
    if code == 0x00:
        return decode(encoded[value_end(encoded, 1) :])
    if code in _NO_DATA:
        return _NO_DATA[code]
    if code == 0x56:
        return data[0] != 0
    fmt = _STRUCTS.get(code)
    if fmt is not None:
        return struct.unpack(fmt, data)[0]
    if code == 0x73:
        return chr(struct.unpack(">I", data)[0])
    if code == 0x83:
        return _EPOCH + timedelta(milliseconds=struct.unpack(">q", data)[0])
    if code == 0x98:
        return uuid.UUID(bytes=bytes(data))
    if code in (0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3):
        raw = bytes(data[1:] if code >> 4 == 0xA else data[4:])
        return raw if code in (0xA0, 0xB0) else raw.decode("utf-8")
    if code in (0x45, 0xC0, 0xD0):
        return [decode(item) for item in compound_items(encoded)]
    if code in (0xC1, 0xD1):
        return {decode(k): decode(v) for k, v in map_entries(encoded)}
    # decimals and arrays: kept as their encoding (syphon never reads them)
    return bytes(encoded)


def decode_bytes(encoded: bytes) -> bytes:
    """The payload of one encoded binary, string or symbol, undecoded.

    Raises:
        AmqpFormatError: not one complete binary, string or symbol.
    """
    if not encoded or encoded[0] not in (0xA0, 0xB0, 0xA1, 0xB1, 0xA3, 0xB3):
        raise AmqpFormatError("not a binary, a string or a symbol")
    if value_end(encoded, 0) != len(encoded):
        raise AmqpFormatError("not exactly one encoded value")
    return bytes(encoded[2:] if encoded[0] >> 4 == 0xA else encoded[5:])


def encode_string(text: str) -> bytes:
    """``text`` as an AMQP string."""
    raw = text.encode("utf-8")
    if len(raw) <= 255:
        return bytes([0xA1, len(raw)]) + raw
    return b"\xb1" + struct.pack(">I", len(raw)) + raw


def encode_symbol(text: str) -> bytes:
    raw = text.encode("ascii")
    if len(raw) <= 255:
        return bytes([0xA3, len(raw)]) + raw
    return b"\xb3" + struct.pack(">I", len(raw)) + raw


def encode_uint(value: int) -> bytes:
    if value == 0:
        return b"\x43"
    if value <= 255:
        return bytes([0x52, value])
    return b"\x70" + struct.pack(">I", value)


def encode_timestamp(value: datetime) -> bytes:
    aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    ms = (aware - _EPOCH) // timedelta(milliseconds=1)
    return b"\x83" + struct.pack(">q", ms)
