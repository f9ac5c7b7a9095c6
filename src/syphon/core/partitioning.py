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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

MAX_PARTITION_KEY_LENGTH = 128

SOURCE_SESSION_ID = "session_id"
SOURCE_PARTITION_KEY = "partition_key"
SOURCE_MESSAGE_ID = "message_id"


def effective_partition_key_col(
    session_id: Column,
    partition_key: Column,
    message_id: Column,
    requires_duplicate_detection: Column,
    requires_session: Column,
) -> Column:
    """The rules of the module docstring as a Spark expression (the tests hold it to
    their plain form, ``tests/support/python_rules.py``).

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
