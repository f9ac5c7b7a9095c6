"""The effective partition key of a message bound for a partitioned entity.

Service Bus pins a message to a partition by, in order:

1. its SessionId, when set; a PartitionKey set as well must equal it, otherwise the
   service rejects the send ("invalid operation");
2. else its PartitionKey, when set;
3. else its MessageId, when the destination requires duplicate detection;
4. else nothing: the service spreads keyless messages round robin.

syphon replays one partition key per batch and keeps order within a key, so it computes
the same key. When it is not known whether the destination requires duplicate detection
(no management access), syphon assumes it does: that only makes batches smaller, while
the opposite guess could mix keys in one batch, which a partitioned entity rejects.

Keys are compared as the service compares them: exactly, case-sensitively.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

MAX_PARTITION_KEY_LENGTH = 128

SOURCE_SESSION_ID = "session_id"
SOURCE_PARTITION_KEY = "partition_key"
SOURCE_MESSAGE_ID = "message_id"

#: Every reason :func:`effective_partition_key` can give.
REASONS = (
    "partition_key_differs_from_session_id",
    "partition_key_too_long",
    "session_id_required",
)


@dataclass(frozen=True)
class PartitionKey:
    """The effective partition key of one message.

    Attributes:
        key: the key, or None for a keyless message (and for an invalid one).
        source: which property gave the key (``session_id``, ``partition_key``,
            ``message_id``), or None.
        reason: why the combination is invalid (one of :data:`REASONS`), or None.
    """

    key: str | None
    source: str | None
    reason: str | None = None


def effective_partition_key(
    session_id: str | None,
    partition_key: str | None,
    message_id: str | None,
    requires_duplicate_detection: bool | None = None,
    requires_session: bool | None = None,
) -> PartitionKey:
    """Applies the rules of the module docstring to one message.

    Args:
        session_id: the original SessionId (restored from the backlog form).
        partition_key: the message's PartitionKey.
        message_id: the message's MessageId as text.
        requires_duplicate_detection: the destination's setting; None when unknown
            (treated as True).
        requires_session: the destination's setting; True makes a message without a
            SessionId invalid. None when unknown (not checked).
    """
    if partition_key is not None and len(partition_key) > MAX_PARTITION_KEY_LENGTH:
        return PartitionKey(None, None, "partition_key_too_long")
    if session_id is not None:
        if partition_key is not None and partition_key != session_id:
            return PartitionKey(None, None, "partition_key_differs_from_session_id")
        return PartitionKey(session_id, SOURCE_SESSION_ID)
    if requires_session:
        return PartitionKey(None, None, "session_id_required")
    if partition_key is not None:
        return PartitionKey(partition_key, SOURCE_PARTITION_KEY)
    if requires_duplicate_detection is not False and message_id is not None:
        return PartitionKey(message_id, SOURCE_MESSAGE_ID)
    return PartitionKey(None, None)


def effective_partition_key_col(
    session_id: Column,
    partition_key: Column,
    message_id: Column,
    requires_duplicate_detection: Column,
    requires_session: Column,
) -> Column:
    """Spark expression mirroring :func:`effective_partition_key`.

    Returns:
        A struct ``(key string, source string, reason string)``.
    """
    from pyspark.sql import functions as F

    too_long = partition_key.isNotNull() & (F.length(partition_key) > MAX_PARTITION_KEY_LENGTH)
    differs = session_id.isNotNull() & partition_key.isNotNull() & (partition_key != session_id)
    missing_session = session_id.isNull() & F.coalesce(requires_session, F.lit(False))
    reason = (
        F.when(too_long, F.lit("partition_key_too_long"))
        .when(differs, F.lit("partition_key_differs_from_session_id"))
        .when(missing_session, F.lit("session_id_required"))
    )
    use_message_id = F.coalesce(requires_duplicate_detection, F.lit(True))
    key = (
        F.when(session_id.isNotNull(), session_id)
        .when(partition_key.isNotNull(), partition_key)
        .when(use_message_id & message_id.isNotNull(), message_id)
    )
    source = (
        F.when(session_id.isNotNull(), F.lit(SOURCE_SESSION_ID))
        .when(partition_key.isNotNull(), F.lit(SOURCE_PARTITION_KEY))
        .when(use_message_id & message_id.isNotNull(), F.lit(SOURCE_MESSAGE_ID))
    )
    valid = reason.isNull()
    return F.struct(
        F.when(valid, key).alias("key"),
        F.when(valid, source).alias("source"),
        reason.alias("reason"),
    )
