"""The original message rebuilt from a backlog row, and its size as the SDK measures it.

The batch plan and the replay build the message with the same function, so the bytes
the plan counted are the bytes the replay sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from syphon.core.properties import plain_value
from syphon.core.timespan import TICKS_PER_MICROSECOND

#: The longest TTL the Python SDK can send: it writes the AMQP header's TTL as an
#: unsigned 32-bit count of milliseconds (about 49.7 days) and refuses a longer one.
#: A longer original TTL is sent as this one; the entity's default TTL caps it anyway
#: when that is shorter.
MAX_SENDABLE_TTL = timedelta(milliseconds=2**32 - 1)


def restored_message(row: Mapping[str, Any], time_to_live: timedelta | None = None) -> Any:
    """The original ``ServiceBusMessage`` of a classified backlog row.

    Args:
        row: a row of :func:`syphon.job.reconcile.classify` (as a mapping).
        time_to_live: the TTL to send; None keeps the original TTL (the replay passes
            what is left of it). Either is capped at :data:`MAX_SENDABLE_TTL`.
    """
    from azure.servicebus import ServiceBusMessage

    ttl = time_to_live
    ticks = row.get("original_time_to_live_ticks")
    if ttl is None and ticks is not None:
        ttl = timedelta(microseconds=ticks // TICKS_PER_MICROSECOND)
    if ttl is not None:
        ttl = min(ttl, MAX_SENDABLE_TTL)
    props = {
        str(k): plain_value(v)
        for k, v in (row.get("original_application_properties") or {}).items()
    }
    return ServiceBusMessage(
        bytes(row["body"] or b""),
        application_properties=props or None,  # type: ignore[arg-type]
        session_id=row.get("original_session_id"),
        partition_key=row.get("partition_key"),
        message_id=row.get("message_id"),
        time_to_live=ttl,
        scheduled_enqueue_time_utc=row.get("original_scheduled_enqueue_time"),
        content_type=row.get("content_type"),
        correlation_id=row.get("correlation_id"),
        subject=row.get("subject"),
        to=row.get("to"),
        reply_to=row.get("reply_to"),
        reply_to_session_id=row.get("reply_to_session_id"),
    )


def batch_cost(message: Any) -> int:
    """The bytes ``message`` adds to a ``ServiceBusMessageBatch``, measured by adding it to
    an unbounded batch: the SDK's own count (encoded size plus its per-message overhead).
    The batch's limit is the destination link's maximum message size."""
    from azure.servicebus import ServiceBusMessageBatch

    batch = ServiceBusMessageBatch(max_size_in_bytes=2**62)
    batch.add_message(message)
    return int(batch.size_in_bytes)


def empty_batch_bytes() -> int:
    """The size the SDK gives an empty ``ServiceBusMessageBatch`` (the size bound of
    :mod:`syphon.core.sizing` assumes :data:`syphon.core.sizing.EMPTY_BATCH_BYTES`; a test
    keeps the two equal)."""
    from azure.servicebus import ServiceBusMessageBatch

    return int(ServiceBusMessageBatch(max_size_in_bytes=2**62).size_in_bytes)
