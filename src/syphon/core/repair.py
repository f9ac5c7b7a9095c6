"""Repair on re-drive: what an operator changes in the messages a run sends.

``--set NAME=SQL`` sets a property to the value of a Spark SQL expression over the
restored snapshot (the columns and the ``properties`` / ``typed_properties`` maps that
``--where`` sees); ``--set NAME:TYPE=SQL`` gives the AMQP type where the expression's
would be ambiguous (``--set 'retries:long=0'``); ``--unset NAME`` removes one. ``NAME``
is an application property, or one of the system properties an operator legitimately
fixes (:data:`SYSTEM_PROPERTIES`). The session id, the partition key and the MessageId
decide order and duplicate detection and are refused (:data:`REFUSED`).

This module parses and checks what the operator typed (before anything is read), and
encodes one value as the AMQP type it is set with; the values themselves are computed
per message by Spark. An expression is the operator's words, recorded in the run's
ledger: one that embeds a literal that looks like a secret is refused, as in the config.
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.core import amqp_bytes as ab
from syphon.core.configreader import looks_like_a_secret
from syphon.core.errors import ExitCode, SyphonError

#: The system properties ``--set`` and ``--unset`` may change, by the name the operator
#: types (the SDK's attribute names).
SYSTEM_PROPERTIES = (
    "subject",
    "to",
    "reply_to",
    "content_type",
    "correlation_id",
    "time_to_live",
    "scheduled_enqueue_time",
)

#: What decides order and duplicate detection: never changed by a repair.
REFUSED = {
    "session_id": "the session id decides the order of a session's messages",
    "partition_key": "the partition key decides the order of a key's messages",
    "message_id": "the MessageId decides duplicate detection",
}

#: The AMQP types a value can be set as (the names the audit uses for a value's type).
TYPES = (
    "string",
    "boolean",
    "byte",
    "short",
    "int",
    "long",
    "ubyte",
    "ushort",
    "uint",
    "ulong",
    "float",
    "double",
    "timestamp",
    "uuid",
    "binary",
)

#: The longest application property name the service takes (its limit on a key).
MAX_NAME_CHARS = 128

_SET = re.compile(
    r"^\s*(?P<name>[^:=\s][^:=]*?)\s*(?::\s*(?P<type>[A-Za-z0-9_]+)\s*)?=(?P<sql>.*)$", re.S
)


class RepairError(SyphonError):
    """What an operator typed cannot be a repair (exit 2, before anything is read)."""

    exit_code = ExitCode.CONFIG


@dataclass(frozen=True)
class Change:
    """One ``--set`` (an expression) or ``--unset`` (none).

    Attributes:
        name: the property, as typed (an application property's name keeps its case).
        system: whether it is a system property (:data:`SYSTEM_PROPERTIES`).
        expression: the Spark SQL expression its value comes from; None: remove it.
        type: the AMQP type its value is sent as; None: the expression's own.
    """

    name: str
    system: bool
    expression: str | None = None
    type: str | None = None

    def describe(self) -> str:
        """The change as the ledger records it: the operator's words."""
        if self.expression is None:
            return f"unset {self.name}"
        typed = f":{self.type}" if self.type else ""
        return f"set {self.name}{typed}={self.expression}"


def _property(name: str, option: str) -> tuple[str, bool]:
    """(name, whether a system property); refuses the order- and identity-deciding ones."""
    key = re.sub(r"[\s-]", "_", name.strip()).lower()
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.strip()).lower()
    for candidate in (key, snake):
        if candidate in REFUSED:
            raise RepairError(
                f"{option} {name}: not changeable ({REFUSED[candidate]})",
                fix="a repair may change other properties; to send a message under "
                "another id, send it yourself",
            )
    for candidate in (key, snake):
        if candidate in SYSTEM_PROPERTIES:
            return candidate, True
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise RepairError(f"{option} {name!r}: a property name of 1-{MAX_NAME_CHARS} characters")
    return name, False


def parse_set(text: str) -> Change:
    """``NAME=SQL`` or ``NAME:TYPE=SQL`` (what ``--set`` was given).

    Raises:
        RepairError: no ``=``, an empty expression, an unknown type, a refused property,
            or an expression that embeds what looks like a literal secret.
    """
    match = _SET.match(text)
    if match is None:
        raise RepairError(f"--set {text!r}: write NAME=SQL or NAME:TYPE=SQL")
    name, system = _property(match["name"], "--set")
    sql = match["sql"].strip()
    if not sql:
        raise RepairError(f"--set {name}: the expression after = is empty")
    kind = match["type"]
    if kind is not None and kind not in TYPES:
        raise RepairError(f"--set {name}:{kind}: not an AMQP type (one of {', '.join(TYPES)})")
    if looks_like_a_secret(sql):
        raise RepairError(
            f"--set {name}: the expression looks like it holds a literal secret; it would be "
            "recorded in the run's ledger",
            fix="compute the value from the message, or set it outside syphon",
        )
    return Change(name, system, sql, kind)


def parse_unset(text: str) -> Change:
    """``NAME`` (what ``--unset`` was given).

    Raises:
        RepairError: a refused property, or no name.
    """
    name, system = _property(text, "--unset")
    return Change(name, system)


@dataclass(frozen=True)
class Repair:
    """Every change of one run, checked against each other."""

    changes: tuple[Change, ...]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for change in self.changes:
            key = change.name if not change.system else change.name.lower()
            if key in seen:
                raise RepairError(f"{change.name}: set or unset twice in one run")
            seen.add(key)

    @classmethod
    def from_options(cls, sets: list[str], unsets: list[str]) -> Repair | None:
        """The repair ``--set`` and ``--unset`` ask for; None when they ask for none."""
        changes = tuple([parse_set(s) for s in sets] + [parse_unset(u) for u in unsets])
        return cls(changes) if changes else None

    def names(self) -> tuple[str, ...]:
        """What it changes, by name (the audit names these, never the values)."""
        return tuple(c.name for c in self.changes)

    def describe(self) -> list[str]:
        return [c.describe() for c in self.changes]


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
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"a {type(value).__name__} is not a boolean")
        return b"\x41" if value else b"\x42"
    if kind in _RANGES:
        low, high, fmt, code = _RANGES[kind]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"a {type(value).__name__} is not a whole number for {kind}")
        if not low <= value <= high:
            raise ValueError(f"{value} is outside {kind}'s range")
        return bytes([code]) + struct.pack(fmt, value)
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"a {type(value).__name__} is not a number for {kind}")
        if kind == "float" and math.isfinite(value) and abs(value) > 3.4028234663852886e38:
            raise ValueError(f"{value} is outside float's range")
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
            raise ValueError(f"{value!r} is not a uuid") from None
        return b"\x98" + parsed.bytes
    if kind == "binary":
        if not isinstance(value, (bytes, bytearray)):
            raise ValueError(f"a {type(value).__name__} is not binary")
        raw = bytes(value)
        if len(raw) <= 255:
            return bytes([0xA0, len(raw)]) + raw
        return b"\xb0" + struct.pack(">I", len(raw)) + raw
    raise ValueError(f"{kind} is not a type a property is set as")


#: The AMQP type a value is sent as when ``--set`` names none, by the Spark type of its
#: expression (``DataType.simpleString()``); any other (a decimal, a date, a map, an
#: array, a struct) needs ``NAME:TYPE``.
SPARK_TYPES = {
    "string": "string",
    "boolean": "boolean",
    "tinyint": "byte",
    "smallint": "short",
    "int": "int",
    "bigint": "long",
    "float": "float",
    "double": "double",
    "timestamp": "timestamp",
    "timestamp_ntz": "timestamp",
    "binary": "binary",
    "void": "string",  # a bare null literal: the property is set to null
}


def amqp_type(change: Change, spark_type: str) -> str:
    """The AMQP type ``change`` sets its property as: the one it names, else the one its
    expression's Spark type maps to (checked once per run, before anything is read).

    Raises:
        RepairError: no type named and the expression's type maps to none.
    """
    if change.type is not None:
        return change.type
    kind = SPARK_TYPES.get(spark_type)
    if kind is None:
        raise RepairError(
            f"--set {change.name}: the expression gives a {spark_type}, which no property "
            f"type matches on its own; name one: {change.name}:TYPE=... "
            f"(one of {', '.join(TYPES)})"
        )
    return kind


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
