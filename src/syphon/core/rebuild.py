"""The original message, as bytes, from a backlog message as the service holds it.

The replay sends what the sender sent, byte for byte, except what the backlog envelope
changed (see :mod:`syphon.core.envelope`) and what the service owns:

- the aliases leave the application properties; the session id goes back into the
  properties' group-id, the scheduled enqueue time into the message annotation
  ``x-opt-scheduled-enqueue-time``, the TTL into the header;
- the header is new: only the TTL that is left (the backlog copy's own is infinite);
- delivery annotations and the service's own message annotations (sequence number,
  enqueued time, lock, state, dead-letter source, partition id) are dropped; the ones a
  sender sets (``x-opt-partition-key``, ``x-opt-via-partition-key``, any of its own) stay;
- every other section (properties, the application properties that are not aliases,
  the body whatever its kind — data, value, sequence — and the footer) keeps its bytes,
  and with them every value's AMQP type;
- except what a repair changes (:mod:`syphon.core.repair`): the application properties
  it sets or removes, and the system properties of the properties list it sets or
  removes (the TTL and the scheduled time come in as the arguments above).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime

from syphon.core import amqp_bytes as ab
from syphon.core.envelope import ALIASES
from syphon.core.naming import is_dead_letter_path
from syphon.core.repaired import set_application_properties

#: The application properties the service adds to a message it dead-letters (its
#: reason and description); a re-driven message is live again and is sent without them
#: (the dead-letter source is a message annotation, dropped with the service's own).
DEAD_LETTER_PROPERTIES = frozenset({"DeadLetterReason", "DeadLetterErrorDescription"})


def dropped_properties(source_path: str | None) -> Collection[str]:
    """The application properties a message read from ``source_path`` is sent without:
    a dead-letter queue's messages lose :data:`DEAD_LETTER_PROPERTIES`, a backlog
    queue's their aliases."""
    return DEAD_LETTER_PROPERTIES if is_dead_letter_path(source_path) else ALIASES


#: Message annotations the service writes on every message it holds (a replay sends
#: none of them: the destination writes its own).
SERVICE_ANNOTATIONS = frozenset(
    {
        "x-opt-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-enqueue-sequence-number",
        "x-opt-message-state",
        "x-opt-deadletter-source",
        "x-opt-partition-id",
        "x-opt-lock-token",
    }
)
SCHEDULED_ENQUEUE_TIME = "x-opt-scheduled-enqueue-time"
#: The message annotations a replay leaves out of what it sends (it sets the scheduled
#: time anew).
_REPLACED_ANNOTATIONS = SERVICE_ANNOTATIONS | {SCHEDULED_ENQUEUE_TIME}
#: The longest TTL a message can carry: the header holds it as an unsigned 32-bit count
#: of milliseconds (about 49.7 days). A longer one is sent as this; the entity's default
#: TTL caps it anyway when that is shorter.
MAX_TTL_MS = 2**32 - 1
#: The system properties a repair may change in the properties list (their places:
#: :data:`syphon.core.amqp_bytes.PROPERTY_PLACES`).
REPAIRABLE = frozenset({"to", "subject", "reply_to", "correlation_id", "content_type"})


def rebuild(
    encoded: bytes,
    *,
    session_id: str | None,
    time_to_live_ms: int | None,
    scheduled_enqueue_time: datetime | None,
    dropped: Collection[str] = ALIASES,
    application: Mapping[str, bytes | None] | None = None,
    system: Mapping[str, bytes | None] | None = None,
    message_id: str | None = None,
) -> bytes:
    """The message to send for the backlog message ``encoded`` (as a peek returns it).

    Args:
        session_id: the original session id (from its alias), or None.
        time_to_live_ms: the TTL to send (what is left of the original), or None for none;
            capped at :data:`MAX_TTL_MS`.
        scheduled_enqueue_time: when the destination is to enqueue it, or None for now.
        dropped: the application properties left out (a backlog message's aliases; a
            dead-lettered message's :data:`DEAD_LETTER_PROPERTIES`).
        application: a repair's application properties: name to encoded value, or None
            to remove it.
        system: a repair's system properties of :data:`REPAIRABLE`, the same way.
        message_id: the MessageId to send it under instead of its own (None: its own).

    Raises:
        AmqpFormatError: ``encoded`` is not an AMQP message.
    """
    out: list[bytes] = []
    if time_to_live_ms is not None:
        ttl = ab.encode_uint(max(0, min(time_to_live_ms, MAX_TTL_MS)))
        header = ab.encode_compound([b"\x40", b"\x40", ttl], False)
        out.append(ab.section(ab.HEADER, header))
    parts = ab.sections(encoded)
    annotations = next((p for p in parts if p.code == ab.MESSAGE_ANNOTATIONS), None)
    kept = [
        (key, value)
        for key, value in (ab.map_entries(annotations.value) if annotations else [])
        if str(ab.decode(key)) not in _REPLACED_ANNOTATIONS
    ]
    if scheduled_enqueue_time is not None:
        kept.append(
            (ab.encode_symbol(SCHEDULED_ENQUEUE_TIME), ab.encode_timestamp(scheduled_enqueue_time))
        )
    if kept:
        out.append(ab.section(ab.MESSAGE_ANNOTATIONS, ab.encode_map(kept)))
    system = {k: v for k, v in (system or {}).items() if k in REPAIRABLE}
    if message_id is not None:
        system["message_id"] = ab.encode_string(message_id)
    has_properties = any(p.code == ab.PROPERTIES for p in parts)
    if not has_properties and (session_id is not None or system):
        out.append(_properties(b"\x45", session_id, system))
    has_application = any(p.code == ab.APPLICATION_PROPERTIES for p in parts)
    for part in parts:
        if part.code == ab.PROPERTIES:
            out.append(_properties(part.value, session_id, system))
        elif part.code >= ab.DATA and not has_application and application:
            out.append(_application(None, dropped, application))
            has_application = True
        if part.code == ab.APPLICATION_PROPERTIES:
            out.append(_application(part.value, dropped, application))
        elif part.code >= ab.DATA:  # the body and the footer, as they are
            out.append(part.raw)
    return b"".join(out)


def _application(
    encoded_map: bytes | None,
    dropped: Collection[str],
    application: Mapping[str, bytes | None] | None,
) -> bytes:
    """The application-properties section without ``dropped``, with the repair's
    changes; nothing when no entry is left."""
    entries = [
        (k, v)
        for k, v in (ab.map_entries(encoded_map) if encoded_map else [])
        if ab.decode(k) not in dropped
    ]
    if application:
        entries = ab.map_entries(
            set_application_properties(ab.encode_map(entries), dict(application))
        )
    return ab.section(ab.APPLICATION_PROPERTIES, ab.encode_map(entries)) if entries else b""


def _properties(
    encoded_list: bytes, session_id: str | None, system: Mapping[str, bytes | None]
) -> bytes:
    """The properties section with the session id in its group-id and a repair's
    system properties in their places (the rest as is)."""
    items = ab.compound_items(encoded_list)
    changes = dict(system)
    if session_id is not None:
        changes["session_id"] = ab.encode_string(session_id)
    for name, value in changes.items():
        place = ab.PROPERTY_PLACES[name]
        items += [b"\x40"] * (place + 1 - len(items))
        items[place] = b"\x40" if value is None else value
    return ab.section(ab.PROPERTIES, ab.encode_compound(items, is_map=False))
