"""Repair on re-drive: what an operator changes in the messages a run sends.

``--set NAME=SQL`` sets a property to the value of a Spark SQL expression over the
restored snapshot (the columns and the ``properties`` / ``typed_properties`` maps that
``--where`` sees); ``--set NAME:TYPE=SQL`` gives the AMQP type where the expression's
would be ambiguous (``--set 'retries:long=0'``); ``--unset NAME`` removes one. ``NAME``
is an application property, or one of the system properties an operator legitimately
fixes (:data:`SYSTEM_PROPERTIES`). The session id, the partition key and the MessageId
decide order and duplicate detection and are refused (:data:`REFUSED`).

A value null for a message leaves its property as it is (``CASE WHEN ... END`` repairs
only the messages that need it); a message without the property an unset names is not
changed. This module parses and checks what the operator typed (before anything is
read); the values are computed per message by Spark and encoded by
:mod:`syphon.core.repaired`. An expression is the operator's words, recorded in the run's
ledger: one that embeds a literal that looks like a secret is refused, as in the config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

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


#: The fix of a refused repair that names none more precise.
REPAIR_FIX = (
    "write --set NAME=SQL or NAME:TYPE=SQL, the SQL a Spark SQL expression over the "
    "snapshot's columns, and --unset NAME (see the README's \"Repair before re-drive\")"
)


class RepairError(SyphonError):
    """What an operator typed cannot be a repair (exit 2, before anything is read)."""

    exit_code = ExitCode.CONFIG

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message, fix=fix or REPAIR_FIX)


def _folded(name: str) -> str:
    """A name as a user may mean it: case, ``-``, ``_`` and white space left out."""
    return re.sub(r"[\s_-]", "", name).lower()


#: :data:`REFUSED` by folded name: ``SessionId``, ``session-id``, ``SESSION_ID`` alike.
_REFUSED_FOLDED = {_folded(k): k for k in REFUSED}


@dataclass(frozen=True)
class Change:
    """One ``--set`` (an expression) or ``--unset`` (none).

    Attributes:
        name: the property, as typed (an application property's name keeps its case).
        system: whether it is a system property (:data:`SYSTEM_PROPERTIES`).
        expression: the Spark SQL expression its value comes from; None: remove it.
        type: the AMQP type the operator named; None: the expression's own.
        kind: what its value is encoded as, once the run has judged the expression
            (:func:`amqp_type`); None until then, and for an unset.
    """

    name: str
    system: bool
    expression: str | None = None
    type: str | None = None
    kind: str | None = None

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
    refused = _REFUSED_FOLDED.get(_folded(name))
    if refused is not None:
        raise RepairError(
            f"{option} {name}: not changeable ({REFUSED[refused]}; refused in any spelling)",
            fix="a repair may change other properties; to send a message under "
            "another id, session or partition key, send it yourself",
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
    if kind is not None and system:
        raise RepairError(
            f"--set {name}:{kind}: {name} is a system property, sent as the service types it",
            fix=f"write --set {name}=SQL",
        )
    if kind is not None and kind not in TYPES:
        raise RepairError(
            f"--set {name}:{kind}: not an AMQP type",
            fix=f"name one of {', '.join(TYPES)} (a decimal: cast it in the SQL, e.g. "
            f"--set {name}:double=CAST(... AS DOUBLE), or send it as a string)",
        )
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
        """The changes in the operator's words, as the run's ledger records them."""
        return [c.describe() for c in self.changes]

    @classmethod
    def from_described(cls, lines: list[str] | None) -> Repair | None:
        """The repair a ledger recorded (:meth:`describe`), checked again; None: none."""
        sets = [line[4:] for line in lines or () if line.startswith("set ")]
        unsets = [line[6:] for line in lines or () if line.startswith("unset ")]
        return cls.from_options(sets, unsets)

    def resolved(self, kinds: dict[str, str]) -> Repair:
        """These changes with what each value is encoded as (by property name)."""
        return Repair(tuple(replace(c, kind=kinds.get(c.name)) for c in self.changes))


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
    "void": "string",  # a bare null literal: null leaves every property as it is
}


#: What a system property's value is encoded as, and the Spark types its expression
#: may give (``interval``: any day-time interval; whole numbers are seconds).
SYSTEM_KINDS = {
    "subject": ("string", ("string",)),
    "to": ("string", ("string",)),
    "reply_to": ("string", ("string",)),
    "correlation_id": ("string", ("string",)),
    "content_type": ("symbol", ("string",)),
    "time_to_live": ("milliseconds", ("interval", "tinyint", "smallint", "int", "bigint")),
    "scheduled_enqueue_time": ("timestamp", ("timestamp", "timestamp_ntz")),
}


def amqp_type(change: Change, spark_type: str) -> str:
    """What ``change`` encodes its value as: for an application property the AMQP type
    it names, else the one its expression's Spark type maps to; for a system property
    the service's type, when the expression gives what that property holds (checked once
    per run, before anything is read).

    Raises:
        RepairError: no type named and the expression's type maps to none; a system
            property's expression of the wrong type.
    """
    if change.system:
        kind, takes = SYSTEM_KINDS[change.name]
        if spark_type != "void" and not spark_type.startswith(takes):
            raise RepairError(
                f"--set {change.name}: the expression gives a {spark_type}; "
                f"{change.name} takes a {' or '.join(takes)}",
                fix=f"give {change.name} a {' or '.join(takes)}: cast it in the SQL"
                + (
                    " (an interval, INTERVAL 2 HOURS, or whole seconds as a number)"
                    if change.name == "time_to_live"
                    else ""
                ),
            )
        return kind
    if change.type is not None:
        return change.type
    mapped = SPARK_TYPES.get(spark_type)
    if mapped is None:
        raise RepairError(
            f"--set {change.name}: the expression gives a {spark_type}, which no property "
            "type matches on its own",
            fix=f"name a type, --set {change.name}:TYPE=SQL (one of {', '.join(TYPES)}), "
            "and cast the value to it in the SQL; a map or an array is no property value",
        )
    return mapped
