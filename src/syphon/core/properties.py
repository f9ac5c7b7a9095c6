"""Typed application-property values, the same in Python and in a Spark column.

The ``azure-servicebus`` SDK hands application properties back with keys and string
values as ``bytes`` and AMQP timestamps as integers (milliseconds since the epoch), so
the type a value had on the wire is partly lost before syphon sees it. syphon keeps
what it gets, tagged with its Python kind, so that the Python functions and the Spark
expressions apply the same type checks to the same data and a replay can restore the
value exactly.

A typed value is a mapping (Python) or struct (Spark) with a ``kind`` and one filled
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
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

KINDS = ("null", "bool", "int", "float", "bytes", "string", "timestamp", "uuid", "other")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

TypedValue = dict[str, Any]

#: Reasons an application-property map as a whole can be wrong.
KEY_NOT_UTF8 = "property_key_not_utf8"
KEY_DUPLICATE = "property_key_duplicate"


def typed_value(value: Any) -> TypedValue:
    """Tags a Python value with its kind (see the module docstring)."""
    out: TypedValue = {
        "kind": "other",
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


def typed_properties(
    properties: Mapping[Any, Any] | None,
) -> tuple[dict[str, TypedValue], str | None]:
    """Types every value of an application-property map and decodes its keys.

    Args:
        properties: the map as the SDK returns it (keys ``str`` or ``bytes``), or None.

    Returns:
        ``(typed map, problem)``: ``problem`` is ``property_key_not_utf8`` when a key is
        not UTF-8 (kept under its lossy decoding) or ``property_key_duplicate`` when two
        keys decode to the same text (the first is kept); else None.
    """
    typed: dict[str, TypedValue] = {}
    problem: str | None = None
    for raw_key, value in (properties or {}).items():
        if isinstance(raw_key, (bytes, bytearray, memoryview)):
            try:
                key = bytes(raw_key).decode("utf-8")
            except UnicodeDecodeError:
                key = bytes(raw_key).decode("utf-8", errors="replace")
                problem = problem or KEY_NOT_UTF8
        else:
            key = str(raw_key)
        if key in typed:
            problem = problem or KEY_DUPLICATE
            continue
        typed[key] = typed_value(value)
    return typed, problem


def plain_value(typed: Mapping[str, Any]) -> Any:
    """The Python value of a typed value (``uuid`` back to UUID; ``other``, which only a
    foreign sender writes, as its text)."""
    kind = typed["kind"]
    if kind == "null":
        return None
    if kind == "uuid":
        return uuid.UUID(typed["text"])
    if kind == "other":
        return typed["text"]
    value = typed[kind]
    if kind == "timestamp" and isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value
