"""Duplicate detection on re-drive: when the destination would drop a message, and the
MessageId a message is sent under instead when the operator asks for one.

An entity that requires duplicate detection remembers every MessageId it accepted for
its window (``DuplicateDetectionHistoryTimeWindow``, 20 s to 7 days) and accepts, then
silently drops, a message that carries one of them: the send succeeds and nothing is
kept. A dead letter re-driven to the entity whose dead-letter queue holds it (or, for a
subscription's, to its topic) carries exactly such an id, accepted when the message was
enqueued there. So the plan judges each such message against its destination's window,
counted from the dead letter's enqueue time (the service keeps the message's enqueue time
when it dead-letters it; were it the time of the dead-lettering, the wait would only be
longer, never too short):

- within the window, the message is ``too_soon``: not sent, not removed, its plan row's
  ``detail`` the UTC time the window passes for it (:data:`WINDOW`); when the
  destination's settings are unknown (its management API did not answer), the service's
  longest window is assumed (:data:`UNKNOWN`);
- with the operator's ``--new-message-ids``, it is sent instead under a MessageId derived
  from its own (:func:`new_message_id`: the same on every rerun, so a resend after a crash
  is still deduplicated), the original kept in the application property
  :data:`ORIGINAL_ID_PROPERTY` and in the audit (the row's ``message_id``; the plan row's
  ``detail`` is the id it is sent under, its reason :data:`NEW_MESSAGE_ID`).

A backlog message whose MessageId the primary already holds is a real duplicate: the
sender's copy arrived before the outage, and the service's drop of the replay is right.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import Column

#: The reason of a ``too_soon`` message whose destination's window is known.
WINDOW: Final = "duplicate_detection_window"
#: The reason of one whose destination's settings are unknown (the longest window).
UNKNOWN: Final = "duplicate_detection_unknown"
#: The reason of a replay sent under a new MessageId.
NEW_MESSAGE_ID: Final = "new_message_id"
#: The application property that carries a re-driven message's original MessageId.
ORIGINAL_ID_PROPERTY: Final = "syphon-original-message-id"
#: The service's longest duplicate detection window (7 days), assumed when unknown.
LONGEST_WINDOW_SECONDS: Final = 7 * 24 * 3600

#: How much of the original id the new one keeps, and what it appends.
_KEPT = 88
_MARK = "+redrive-"
_DIGEST = 16


def new_message_id(message_id: str) -> str:
    """The MessageId a re-driven message is sent under instead of ``message_id``: its
    first 88 characters, ``+redrive-`` and 16 hex digits of the SHA-256 of the whole id
    (at most 113 characters; the service allows 128)."""
    digest = hashlib.sha256(message_id.encode("utf-8")).hexdigest()[:_DIGEST]
    return f"{message_id[:_KEPT]}{_MARK}{digest}"


def new_message_id_col(message_id: Column) -> Column:
    """Spark expression: :func:`new_message_id` of a MessageId column."""
    from pyspark.sql import functions as F

    return F.concat(
        F.substring(message_id, 1, _KEPT),
        F.lit(_MARK),
        F.substring(F.sha2(message_id, 256), 1, _DIGEST),
    )


def renamed_bytes_col(message_id: Column) -> Column:
    """Spark expression: the bytes a message sent under :func:`new_message_id` may gain
    (the new id in place of the old, and the property that keeps the old one, with their
    AMQP framing)."""
    from pyspark.sql import functions as F

    framing = 16
    longest = _KEPT + len(_MARK) + _DIGEST
    return F.lit(longest + len(ORIGINAL_ID_PROPERTY) + framing) + F.octet_length(message_id)
