"""A peeked message, read from its bytes: the row of :data:`syphon.core.schema.SNAPSHOT`.

syphon reads every field it needs from the encoded message itself, never from an SDK's
decoding of it: the Python SDK's decoder refuses some AMQP types (decimals among them)
and loses others, and one message it cannot decode would fail the whole peek. What is
read here: the service's annotations (sequence number, enqueued time), the system
properties the reconcile and the audit use (as text), the application properties with
their AMQP types (:func:`syphon.core.properties.encoded_properties`), the body's kind,
size and SHA-256. The bytes themselves stay in the row for the replay.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from syphon.core import amqp_bytes as ab
from syphon.core.properties import MESSAGE_MALFORMED, TypedValue, encoded_properties
from syphon.core.schema import SNAPSHOT, names

_COLUMNS = names(SNAPSHOT)
_BODY_KINDS = {ab.DATA: "data", ab.AMQP_VALUE: "value", ab.AMQP_SEQUENCE: "sequence"}
# the properties list's fields (ab.PROPERTY_PLACES) and the header list's (AMQP 1.0,
# part 3, 3.2.1), by position
_PROPERTY_COLUMNS = ab.PROPERTY_PLACES
_HEADER_TTL, _HEADER_DELIVERY_COUNT = 2, 4
SEQUENCE_NUMBER = "x-opt-sequence-number"
ENQUEUED_TIME = "x-opt-enqueued-time"
PARTITION_KEY = "x-opt-partition-key"
SCHEDULED_ENQUEUE_TIME = "x-opt-scheduled-enqueue-time"
#: the entity a message was dead-lettered in, when it was forwarded to another's DLQ
DEAD_LETTER_SOURCE = "x-opt-deadletter-source"
#: The state the service gives a peeked message: 0 active, 1 deferred, 2 scheduled.
MESSAGE_STATE = "x-opt-message-state"
DEFERRED = 1
_UNREADABLE = object()


def read_encoded(
    encoded: bytes, parts: list[ab.Section] | None = None
) -> tuple[dict[str, TypedValue], str | None, str, bytes]:
    """What the snapshot reads from a message's sections: its typed application
    properties, their problem (or ``message_malformed`` when the bytes are not AMQP
    sections), the body's kind (``data``, ``value`` or ``sequence``; ``data`` when it has
    none) and the body's bytes: the data sections' contents joined, or the value or
    sequence sections as encoded (so that any change of type or value changes the
    digest). ``parts``: the message's sections when the caller read them already."""
    try:
        return _read_sections(ab.sections(encoded) if parts is None else parts)
    except ab.AmqpFormatError:
        return {}, MESSAGE_MALFORMED, "data", b""


def _read_sections(
    parts: list[ab.Section],
) -> tuple[dict[str, TypedValue], str | None, str, bytes]:
    """:func:`read_encoded` of a message's sections; raises AmqpFormatError."""
    found = next((p for p in parts if p.code == ab.APPLICATION_PROPERTIES), None)
    props, problem = encoded_properties(found.value if found else None)
    body_parts = [p for p in parts if p.code in _BODY_KINDS]
    kind = _BODY_KINDS[body_parts[0].code] if body_parts else "data"
    if kind == "data":
        body = b"".join(ab.decode_bytes(p.value) for p in body_parts)
    else:
        body = b"".join(p.raw for p in body_parts)
    return props, problem, kind, body


def content_columns(encoded: bytes, parts: list[ab.Section] | None = None) -> dict[str, Any]:
    """The snapshot columns that :func:`read_encoded` gives, and the bytes themselves:
    ``application_properties``, ``property_problem``, ``body_type``, ``body_size``,
    ``body_sha256``, ``encoded``. ``parts``: the message's sections when the caller
    read them already."""
    props, problem, body_type, body = read_encoded(encoded, parts)
    return {
        "application_properties": props,
        "property_problem": problem,
        "body_type": body_type,
        "body_size": len(body),
        "body_sha256": hashlib.sha256(body).hexdigest(),
        "encoded": encoded,
    }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)  # a uuid as its canonical text, a ulong as its digits


def _annotations(parts: dict[int, ab.Section]) -> dict[Any, Any]:
    """The message annotations syphon reads, decoded; one that cannot be decoded is
    :data:`_UNREADABLE` (the others are left alone: a sender's own annotation of an odd
    type must not make the message unreadable)."""
    if ab.MESSAGE_ANNOTATIONS not in parts:
        return {}
    wanted = (
        SEQUENCE_NUMBER,
        ENQUEUED_TIME,
        PARTITION_KEY,
        SCHEDULED_ENQUEUE_TIME,
        DEAD_LETTER_SOURCE,
        MESSAGE_STATE,
    )
    out: dict[Any, Any] = {}
    for key, value in ab.map_entries(parts[ab.MESSAGE_ANNOTATIONS].value):
        if ab.type_name(key) == "symbol" and (name := ab.decode(key)) in wanted:
            try:
                out[name] = ab.decode(value)
            except ab.AmqpFormatError:
                out[name] = _UNREADABLE
    return out


def _system(parts: dict[int, ab.Section], annotations: dict[Any, Any]) -> dict[str, Any]:
    """The service's annotations (as :func:`_annotations` read them from ``parts``, a
    message's sections by code) and the system properties; raises AmqpFormatError."""
    if _UNREADABLE in annotations.values():
        raise ab.AmqpFormatError("an annotation syphon reads cannot be decoded")
    props = ab.compound_items(parts[ab.PROPERTIES].value) if ab.PROPERTIES in parts else []
    header = ab.compound_items(parts[ab.HEADER].value) if ab.HEADER in parts else []

    def item(items: list[bytes], i: int) -> Any:
        return ab.decode(items[i]) if i < len(items) else None

    out: dict[str, Any] = {c: _text(item(props, i)) for c, i in _PROPERTY_COLUMNS.items()}
    ttl = item(header, _HEADER_TTL)
    scheduled = annotations.get(SCHEDULED_ENQUEUE_TIME)
    enqueued = annotations.get(ENQUEUED_TIME)
    out.update(
        enqueued_time=enqueued if isinstance(enqueued, datetime) else None,
        delivery_count=item(header, _HEADER_DELIVERY_COUNT) or 0,
        partition_key=_text(annotations.get(PARTITION_KEY)),
        time_to_live_ms=ttl if isinstance(ttl, int) else None,
        scheduled_enqueue_time=scheduled if isinstance(scheduled, datetime) else None,
        dead_letter_source=_text(annotations.get(DEAD_LETTER_SOURCE)),
    )
    return out


def sequence_number(encoded: bytes) -> int:
    """The sequence number the service gave a peeked message.

    Raises:
        AmqpFormatError: the message has none (the service gives every message one).
    """
    try:
        annotations = _annotations({p.code: p for p in ab.sections(encoded)})
    except ab.AmqpFormatError:
        annotations = {}
    return _number(annotations)


def _number(annotations: dict[Any, Any]) -> int:
    """The sequence number among a message's annotations; raises AmqpFormatError."""
    number = annotations.get(SEQUENCE_NUMBER)
    if not isinstance(number, int):
        raise ab.AmqpFormatError(f"a peeked message without {SEQUENCE_NUMBER}")
    return number


def deferred(encoded: bytes) -> bool:
    """Whether the service says a peeked message is deferred (received only by its
    sequence number, never handed out by a receive)."""
    try:
        state = _annotations({p.code: p for p in ab.sections(encoded)}).get(MESSAGE_STATE)
    except ab.AmqpFormatError:
        return False
    return state == DEFERRED


def enqueued_time(encoded: bytes) -> datetime | None:
    """When the service enqueued a peeked message (None: unreadable, or not given)."""
    try:
        value = _annotations({p.code: p for p in ab.sections(encoded)}).get(ENQUEUED_TIME)
    except ab.AmqpFormatError:
        return None
    return value if isinstance(value, datetime) else None


def snapshot_row(encoded: bytes, backlog_queue: str) -> dict[str, Any]:
    """One peeked message as a snapshot row.

    A message whose system properties cannot be read keeps its place (its sequence
    number) and ``message_malformed`` as its problem, so that it is judged ``invalid``.

    Raises:
        AmqpFormatError: it has no sequence number (it cannot be placed).
    """
    try:
        parts = ab.sections(encoded)
        by_code = {p.code: p for p in parts}
        annotations = _annotations(by_code)
    except ab.AmqpFormatError:
        parts, by_code, annotations = [], {}, {}
    number = _number(annotations)
    content = content_columns(encoded, parts)
    try:
        system = _system(by_code, annotations)
    except ab.AmqpFormatError:
        system = {c: None for c in _PROPERTY_COLUMNS}
        system.update(
            enqueued_time=None,
            delivery_count=0,
            partition_key=None,
            time_to_live_ms=None,
            scheduled_enqueue_time=None,
            dead_letter_source=None,
        )
        content["property_problem"] = MESSAGE_MALFORMED
    row = {"backlog_queue": backlog_queue, **system, "sequence_number": number, **content}
    return {c: row[c] for c in _COLUMNS}
