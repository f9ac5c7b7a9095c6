"""Repair on re-drive, one message at a time: a value encoded as the AMQP type it is set
as (:func:`encode_value`), what a run's changes do to one message
(:func:`repair_message`), carried from the plan to the replay as two AMQP maps
(:func:`encode_changes`), and applied to the application properties with every other
entry byte for byte (:func:`set_application_properties`). The changes themselves are
parsed and checked by :mod:`syphon.core.repair`.
"""

from __future__ import annotations

import math
import struct
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.core import amqp_bytes as ab
from syphon.core.repair import Change

_RANGES = {
    "byte": (-(2**7), 2**7 - 1, ">b", 0x51),
    "short": (-(2**15), 2**15 - 1, ">h", 0x61),
    "int": (-(2**31), 2**31 - 1, ">i", 0x71),
    "long": (-(2**63), 2**63 - 1, ">q", 0x81),
    "ubyte": (0, 2**8 - 1, ">B", 0x50),
    "ushort": (0, 2**16 - 1, ">H", 0x60),
    "uint": (0, 2**32 - 1, ">I", 0x70),
    "ulong": (0, 2**64 - 1, ">Q", 0x80),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The longest time to live a message's header holds (an unsigned 32-bit count of ms).
MAX_TTL_MS = 2**32 - 1


def _milliseconds(value: Any) -> int:
    """A time to live (a Spark day-time interval, or whole seconds) in milliseconds."""
    if isinstance(value, timedelta):
        ms = value // timedelta(milliseconds=1)
    elif isinstance(value, int) and not isinstance(value, bool):
        ms = value * 1000
    else:
        raise ValueError(f"a {type(value).__name__} is not a time to live")
    if not 0 < ms <= MAX_TTL_MS:
        raise ValueError("a time to live is more than 0 and at most about 49.7 days")
    return ms


def encode_value(value: Any, kind: str) -> bytes:
    """``value`` (what Spark computed) encoded as the AMQP type ``kind``.

    Raises:
        ValueError: the value cannot be that type (its message is the reason recorded
            for the message, which is then ``invalid``).
    """
    if value is None:
        return b"\x40"
    if kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"a {type(value).__name__} is not a string")
        return ab.encode_string(value)
    if kind == "symbol":
        if not isinstance(value, str):
            raise ValueError(f"a {type(value).__name__} is not a string")
        return ab.encode_symbol(value)
    if kind == "milliseconds":
        return ab.encode_uint(_milliseconds(value))
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"a {type(value).__name__} is not a boolean")
        return b"\x41" if value else b"\x42"
    if kind in _RANGES:
        low, high, fmt, code = _RANGES[kind]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"a {type(value).__name__} is not a whole number for {kind}")
        if not low <= value <= high:
            raise ValueError(f"the value is outside {kind}'s range")
        return bytes([code]) + struct.pack(fmt, value)
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"a {type(value).__name__} is not a number for {kind}")
        if kind == "float" and math.isfinite(value) and abs(value) > 3.4028234663852886e38:
            raise ValueError("the value is outside float's range")
        if kind == "float":
            return b"\x72" + struct.pack(">f", value)
        return b"\x82" + struct.pack(">d", value)
    if kind == "timestamp":
        if not isinstance(value, datetime):
            raise ValueError(f"a {type(value).__name__} is not a timestamp")
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return b"\x83" + struct.pack(">q", (aware - _EPOCH) // timedelta(milliseconds=1))
    if kind == "uuid":
        try:
            parsed = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
        except ValueError:
            raise ValueError(f"the {type(value).__name__} is not a uuid") from None
        return b"\x98" + parsed.bytes
    if kind == "binary":
        if not isinstance(value, (bytes, bytearray)):
            raise ValueError(f"a {type(value).__name__} is not binary")
        raw = bytes(value)
        if len(raw) <= 255:
            return bytes([0xA0, len(raw)]) + raw
        return b"\xb0" + struct.pack(">I", len(raw)) + raw
    raise ValueError(f"{kind} is not a type a property is set as")


def set_application_properties(encoded_map: bytes | None, values: dict[str, bytes | None]) -> bytes:
    """An application-properties map with ``values`` applied: each name set to its
    encoded value (replacing one of the same name in place, else added at the end), or
    removed (``None``); every other entry keeps its bytes."""
    entries = ab.map_entries(encoded_map) if encoded_map else []
    out: list[tuple[bytes, bytes]] = []
    done: set[str] = set()
    for key, value in entries:
        name = ab.decode(key)
        if isinstance(name, str) and name in values:
            done.add(name)
            new = values[name]
            if new is not None:
                out.append((key, new))
            continue
        out.append((key, value))
    for name, added in values.items():
        if name not in done and added is not None:
            out.append((ab.encode_string(name), added))
    return ab.encode_map(out)


#: What a repair's change may add to a message's sections besides its value and name
#: (a map or list header widened, a section started).
SECTION_GROWTH = 12


@dataclass(frozen=True)
class Repaired:
    """What a repair does to one message.

    Attributes:
        application: the application properties it sets (encoded values) or removes
            (``None``), as :func:`encode_changes` stores them.
        system: the same for the system properties.
        error: why a value cannot be sent (the message is then ``invalid``); None: it can.
        added: the most bytes the changes add to the message.
        names: what it changes, ``set NAME`` / ``unset NAME`` (names, never values).
    """

    application: bytes | None
    system: bytes | None
    error: str | None
    added: int
    names: list[str]


def repair_message(changes: tuple[Change, ...], values: tuple[Any, ...]) -> Repaired:
    """The repair of one message: ``values`` holds, per change, its expression's value
    (a set; null leaves the property as it is) or whether the message has the property
    (an unset; one it lacks is not changed)."""
    app: dict[str, bytes | None] = {}
    system: dict[str, bytes | None] = {}
    names: list[str] = []
    added = 0
    for change, value in zip(changes, values, strict=True):
        target = system if change.system else app
        if change.expression is None:
            if value:
                target[change.name] = None
                names.append(f"unset {change.name}")
            continue
        if value is None:
            continue
        try:
            encoded = encode_value(value, change.kind or "string")
        except ValueError as exc:
            return Repaired(None, None, f"--set {change.name}: {exc}", 0, [])
        target[change.name] = encoded
        names.append(f"set {change.name}")
        named = 0 if change.system else len(ab.encode_string(change.name))
        added += len(encoded) + named + SECTION_GROWTH
    return Repaired(encode_changes(app), encode_changes(system), None, added, names)


def encode_changes(changes: dict[str, bytes | None]) -> bytes | None:
    """Changes as an AMQP map (name: encoded value, null: removed); None for none."""
    if not changes:
        return None
    return ab.encode_map(
        [(ab.encode_string(name), b"\x40" if v is None else v) for name, v in changes.items()]
    )


def decode_changes(encoded: bytes | None) -> dict[str, bytes | None]:
    """What :func:`encode_changes` stored (name: encoded value, or None: remove it)."""
    if not encoded:
        return {}
    return {
        str(ab.decode(k)): (None if v == b"\x40" else v) for k, v in ab.map_entries(bytes(encoded))
    }


def repaired_timing(
    system: dict[str, bytes | None], time_to_live_ms: int | None, scheduled: datetime | None
) -> tuple[int | None, datetime | None]:
    """The TTL (ms) and the scheduled time a repaired message is sent with: a repair's
    where it sets or removes them, else the ones given."""
    if "time_to_live" in system:
        value = system["time_to_live"]
        time_to_live_ms = None if value is None else int(ab.decode(value))
    if "scheduled_enqueue_time" in system:
        value = system["scheduled_enqueue_time"]
        scheduled = None if value is None else ab.decode(value)
    return time_to_live_ms, scheduled
