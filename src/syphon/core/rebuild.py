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
  and with them every value's AMQP type.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from syphon.core import amqp_bytes as ab
from syphon.core.envelope import ALIASES
from syphon.core.naming import is_dead_letter_path

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
#: The longest TTL a message can carry: the header holds it as an unsigned 32-bit count
#: of milliseconds (about 49.7 days). A longer one is sent as this; the entity's default
#: TTL caps it anyway when that is shorter.
MAX_TTL_MS = 2**32 - 1
_GROUP_ID = 10  # the properties list's group-id: the session id


def rebuild(
    encoded: bytes,
    *,
    session_id: str | None,
    time_to_live_ms: int | None,
    scheduled_enqueue_time: datetime | None,
    dropped: Collection[str] = ALIASES,
) -> bytes:
    """The message to send for the backlog message ``encoded`` (as a peek returns it).

    Args:
        session_id: the original session id (from its alias), or None.
        time_to_live_ms: the TTL to send (what is left of the original), or None for none;
            capped at :data:`MAX_TTL_MS`.
        scheduled_enqueue_time: when the destination is to enqueue it, or None for now.
        dropped: the application properties left out (a backlog message's aliases; a
            dead-lettered message's :data:`DEAD_LETTER_PROPERTIES`).

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
        if str(ab.decode(key)) not in SERVICE_ANNOTATIONS | {SCHEDULED_ENQUEUE_TIME}
    ]
    if scheduled_enqueue_time is not None:
        kept.append(
            (ab.encode_symbol(SCHEDULED_ENQUEUE_TIME), ab.encode_timestamp(scheduled_enqueue_time))
        )
    if kept:
        out.append(ab.section(ab.MESSAGE_ANNOTATIONS, ab.encode_map(kept)))
    has_properties = any(p.code == ab.PROPERTIES for p in parts)
    if not has_properties and session_id is not None:
        out.append(_properties(b"\x45", session_id))
    for part in parts:
        if part.code == ab.PROPERTIES:
            out.append(_properties(part.value, session_id))
        elif part.code == ab.APPLICATION_PROPERTIES:
            entries = [(k, v) for k, v in ab.map_entries(part.value) if ab.decode(k) not in dropped]
            if entries:
                out.append(ab.section(ab.APPLICATION_PROPERTIES, ab.encode_map(entries)))
        elif part.code >= ab.DATA:  # the body and the footer, as they are
            out.append(part.raw)
    return b"".join(out)


def _properties(encoded_list: bytes, session_id: str | None) -> bytes:
    """The properties section with the session id in its group-id (the rest as is)."""
    items = ab.compound_items(encoded_list)
    if session_id is not None:
        items += [b"\x40"] * (_GROUP_ID + 1 - len(items))
        items[_GROUP_ID] = ab.encode_string(session_id)
    return ab.section(ab.PROPERTIES, ab.encode_compound(items, is_map=False))
