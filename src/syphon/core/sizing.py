"""An upper bound of the bytes a restored message adds to a ``ServiceBusMessageBatch``,
as a Spark column: no message is built, no body is read.

The SDK measures a message by encoding it in AMQP 1.0 (header, message annotations,
properties, application properties, one data section) and adds 5 or 8 bytes of batch
overhead. Measuring every message that way costs about 0.1 ms of Python per message:
at a million messages it was most of the plan. The bound here counts every field at
the widest encoding the SDK's encoder can choose for its value (a string or binary as
its UTF-8 bytes plus 2 up to 255 bytes, else 5; a list or map with a 9-byte header; an
absent field as 1 byte; a number at its type's full width), plus the empty batch's own
size, so it is never below the SDK's count and is a
few dozen bytes above it for a typical message (tested against the SDK's own measure).

Packing by the bound means a planned batch always fits the destination's limit when
the replay sends it; a batch may hold a few messages fewer than the SDK would pack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Batch overhead per message (the SDK's 5 or 8 by encoded size: the larger).
_BATCH_OVERHEAD = 8
#: Described list: descriptor (3) plus list32 constructor, size and count (9).
_SECTION = 12
#: Header fields: durable (2), priority (2), ttl (5), first-acquirer (2), delivery-count (5).
_HEADER = _SECTION + 16
#: Properties fields that are never strings here: user-id and content-encoding (absent,
#: 1 each), absolute-expiry-time and creation-time (timestamps, 9 each), group-sequence (5).
_PROPERTIES_FIXED = _SECTION + 25
#: Data section: descriptor (3) plus vbin32 constructor and size (5).
_DATA = 8
#: Message annotations the SDK writes (the partition key's only when one is set).
_PARTITION_KEY_NAME = len("x-opt-partition-key")
_SCHEDULED_NAME = len("x-opt-scheduled-enqueue-time")
#: Widest encodings of a typed application-property value by kind (text kinds apart).
#: (integers are 32-bit: the reconcile rejects wider ones, which the SDK cannot send)
_VALUE_WIDTH = {"null": 1, "bool": 2, "int": 5, "float": 9, "timestamp": 9, "uuid": 17}


#: The size the SDK gives an empty ``ServiceBusMessageBatch`` (checked against the SDK
#: by a test: :func:`syphon.servicebus.messages.empty_batch_bytes`).
EMPTY_BATCH_BYTES = 0


def _text(col: Column) -> Column:
    """A string or binary value: ``str8``/``vbin8`` (2 bytes) up to 255 bytes, else 5."""
    from pyspark.sql import functions as F

    n = F.octet_length(col)
    return n + F.when(n <= 255, F.lit(2)).otherwise(F.lit(5))


def _string(col: Column) -> Column:
    from pyspark.sql import functions as F

    return F.when(col.isNull(), F.lit(1)).otherwise(_text(col))


def _property_value(v: Column) -> Column:
    from pyspark.sql import functions as F

    width = F.when(v["kind"] == "bytes", _text(v["bytes"])).when(
        v["kind"] == "string", _text(v["string"])
    )
    for kind, size in _VALUE_WIDTH.items():
        width = width.when(v["kind"] == kind, F.lit(size))
    # ``other``: the SDK sends its text
    return width.otherwise(_text(F.coalesce(v["text"], F.lit(""))))


def message_bytes_bound_col(
    body_size: Column,
    message_id: Column,
    session_id: Column,
    partition_key: Column,
    scheduled_enqueue_time: Column,
    application_properties: Column,
    content_type: Column,
    correlation_id: Column,
    subject: Column,
    to: Column,
    reply_to: Column,
    reply_to_session_id: Column,
) -> Column:
    """The bound (see the module docstring) for the restored message's columns."""
    from pyspark.sql import functions as F

    # the SDK gives a message without an id a UUID's text (36 bytes)
    properties = F.lit(_PROPERTIES_FIXED) + F.coalesce(_text(message_id), F.lit(2 + 36))
    strings = [to, subject, reply_to, correlation_id, content_type, session_id,
               reply_to_session_id]  # fmt: skip
    for s in strings:
        properties = properties + _string(s)

    def annotation(name_length: int, value: Column) -> Column:
        return F.when(value.isNull(), F.lit(0)).otherwise(F.lit(2 + name_length) + value)

    key_value = _text(partition_key)
    annotations = (
        F.lit(_SECTION)
        + annotation(_PARTITION_KEY_NAME, key_value)
        + annotation(_SCHEDULED_NAME, F.when(scheduled_enqueue_time.isNotNull(), F.lit(9)))
    )
    entries = F.coalesce(
        F.aggregate(
            F.map_entries(application_properties),
            F.lit(0),
            lambda acc, e: acc + _text(e["key"]) + _property_value(e["value"]),
        ),
        F.lit(0),
    )
    return (
        F.lit(EMPTY_BATCH_BYTES + _BATCH_OVERHEAD + _HEADER + _DATA)
        + properties
        + annotations
        + F.lit(_SECTION)
        + entries
        + F.coalesce(body_size, F.lit(0))
    ).cast("long")
