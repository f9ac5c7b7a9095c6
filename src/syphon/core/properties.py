"""Typed application-property values, the same in Python and in a Spark column.

syphon reads a backlog message's application properties from its encoded bytes
(:func:`encoded_properties`), so each value keeps the AMQP type it had on the wire
(``amqp_type``: ``long``, ``timestamp``, ``binary``, ``symbol``, a described value's
descriptor such as ``com.microsoft:timespan``...) beside a *kind* that says how syphon
reads it. The Python functions and the Spark expressions apply the same checks to the
same data. The replay never rebuilds a value from this: it sends the encoded bytes
(:mod:`syphon.core.rebuild`); the kinds serve the envelope's aliases and selections.

A typed value is a mapping (Python) or struct (Spark) with a ``kind``, the
``amqp_type`` (None for a value that came from Python, not from the wire) and one filled
slot::

    kind       slot       Python values of that kind
    null       -          None
    bool       bool       bool
    int        int        int within a signed 64-bit long
    float      float      float
    bytes      bytes      bytes, bytearray, memoryview (AMQP string or binary)
    string     string     str
    timestamp  timestamp  datetime (naive read as UTC)
    uuid       text       uuid.UUID, as its canonical text
    other      text       anything else (decimals, lists, big ints), as repr()

From the wire: the integer types are ``int`` (a ``ulong`` beyond a signed long is
``other``), ``float`` and ``double`` are ``float``, ``string``, ``symbol`` and ``char``
are ``string`` (a string that is not UTF-8 is ``bytes``), ``binary`` is ``bytes``, a
``timestamp`` outside the years 1 to 9999 is ``int`` (its milliseconds), a described
value is its value's kind, and decimals, lists, maps and arrays are ``other`` with no
text.
"""

from __future__ import annotations

import struct
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.core import amqp_bytes as ab

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

TypedValue = dict[str, Any]

#: Reasons an application-property map as a whole can be wrong.
KEY_NOT_UTF8 = "property_key_not_utf8"
KEY_DUPLICATE = "property_key_duplicate"
KEY_WRONG_TYPE = "property_key_wrong_type"
#: The message's bytes are not AMQP sections (nothing of it can be read).
MESSAGE_MALFORMED = "message_malformed"


def typed_value(value: Any) -> TypedValue:
    """Tags a Python value with its kind (see the module docstring)."""
    out: TypedValue = {
        "kind": "other",
        "amqp_type": None,
        "bool": None,
        "int": None,
        "float": None,
        "bytes": None,
        "string": None,
        "timestamp": None,
        "text": None,
    }
    if value is None:
        out["kind"] = "null"
    elif isinstance(value, bool):
        out["kind"], out["bool"] = "bool", value
    elif isinstance(value, int) and _LONG_MIN <= value <= _LONG_MAX:
        out["kind"], out["int"] = "int", value
    elif isinstance(value, float):
        out["kind"], out["float"] = "float", value
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out["kind"], out["bytes"] = "bytes", bytes(value)
    elif isinstance(value, str):
        out["kind"], out["string"] = "string", value
    elif isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        out["kind"], out["timestamp"] = "timestamp", aware.astimezone(timezone.utc)
    elif isinstance(value, uuid.UUID):
        out["kind"], out["text"] = "uuid", str(value)
    else:
        out["text"] = repr(value)
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_TEXT_TYPES = ("string", "symbol")


def typed_encoded(encoded: bytes) -> TypedValue:
    """Types one encoded AMQP value (see the module docstring).

    Raises:
        AmqpFormatError: not one complete encoded value.
    """
    amqp_type = ab.type_name(encoded)
    if amqp_type == "described":
        inner = encoded[ab.value_end(encoded, 1) :]
        out = typed_encoded(inner)
        out["amqp_type"] = str(ab.descriptor(encoded))
        return out
    if amqp_type in _TEXT_TYPES:
        raw = ab.decode_bytes(encoded)
        try:
            out = typed_value(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out = typed_value(raw)
    elif amqp_type == "timestamp":
        ms = struct.unpack(">q", encoded[1:9])[0]
        in_range = _MIN_MS <= ms <= _MAX_MS
        out = typed_value(_EPOCH + timedelta(milliseconds=ms) if in_range else ms)
    elif amqp_type.startswith("decimal") or amqp_type in ("list", "map", "array"):
        ab.value_end(encoded, 0)  # checks it is whole
        out = typed_value(None)
        out["kind"] = "other"
    else:
        out = typed_value(ab.decode(encoded))
        if out["kind"] == "other":  # a ulong beyond a signed long: kept as text
            out["text"] = str(ab.decode(encoded))
    out["amqp_type"] = amqp_type
    return out


def encoded_properties(section_value: bytes | None) -> tuple[dict[str, TypedValue], str | None]:
    """Types an encoded application-properties map (the section's value, without its
    descriptor), as :func:`typed_value` does a Python value.

    Returns:
        ``(typed map, problem)``: ``problem`` is ``property_key_wrong_type`` when a key
        is not text (string, symbol or binary; kept under its type's name and
        position), ``property_key_not_utf8`` or ``property_key_duplicate``, else None.

    Raises:
        AmqpFormatError: not an encoded map.
    """
    typed: dict[str, TypedValue] = {}
    problem: str | None = None
    for i, (raw_key, value) in enumerate(ab.map_entries(section_value or b"\x40")):
        key_type = ab.type_name(raw_key)
        if key_type in (*_TEXT_TYPES, "binary"):
            raw = ab.decode_bytes(raw_key)
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                key = raw.decode("utf-8", errors="replace")
                problem = problem or KEY_NOT_UTF8
        else:
            key = f"<{key_type} key {i}>"
            problem = problem or KEY_WRONG_TYPE
        if key in typed:
            problem = problem or KEY_DUPLICATE
            continue
        typed[key] = typed_encoded(value)
    return typed, problem
