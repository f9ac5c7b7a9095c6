"""Reading backlog queues by peeking: never a lock, never a removal.

:func:`peek_rows` walks one backlog queue by sequence number and turns every message
into a row of :data:`syphon.core.schema.SNAPSHOT`: everything the replay needs (the body's exact
bytes, every system property, the typed application properties) plus where it was
found. A peek answers at most a few hundred messages and may answer fewer than asked
(the service caps a call at 256 KB; a partitioned queue answers one partition at a
time), so the walk goes on from the last sequence number seen until a peek is empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from syphon.core.properties import typed_properties

PEEK_PAGE = 250


def peek_receiver(client: Any, queue: str) -> Any:
    """A receiver on ``queue`` for peeking only, which closes at once.

    The SDK gives every receiver without prefetch a keep-alive thread that sleeps in
    1 s steps, and its ``close`` waits for that thread: about half a second per receiver,
    paid by every peek of every queue. With a prefetch of one and ``keep_alive`` None it
    starts none. The prefetch never takes effect: a receiver grants the service credit
    only when it receives, and this one only peeks, so nothing is delivered to it or
    locked (tests/job/test_peek_receiver.py fails if an SDK upgrade changes either).

    Args:
        client: a ``ServiceBusClient`` of the queue's namespace.
    """
    return client.get_queue_receiver(queue, prefetch_count=1, keep_alive=None)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def message_row(message: Any, backlog_queue: str) -> dict[str, Any]:
    """One peeked ``ServiceBusReceivedMessage`` as a snapshot row.

    Data bodies keep their exact bytes; a value or sequence body (which a paired sender
    never writes) has ``body`` None and its kind in ``body_type``, for the reconcile to
    judge.
    """
    from azure.servicebus.amqp import AmqpMessageBodyType

    props, problem = typed_properties(message.application_properties)
    body_type = message.body_type
    body: bytes | None = None
    if body_type == AmqpMessageBodyType.DATA:
        body = b"".join(bytes(part) for part in message.body)
    ttl = message.time_to_live
    return {
        "backlog_queue": backlog_queue,
        "sequence_number": message.sequence_number,
        "enqueued_time": _utc(message.enqueued_time_utc),
        "delivery_count": message.delivery_count,
        "message_id": _text(message.message_id),
        "session_id": _text(message.session_id),
        "partition_key": _text(message.partition_key),
        "content_type": _text(message.content_type),
        "correlation_id": _text(message.correlation_id),
        "subject": _text(message.subject),
        "to": _text(message.to),
        "reply_to": _text(message.reply_to),
        "reply_to_session_id": _text(message.reply_to_session_id),
        "time_to_live_ms": None if ttl is None else int(ttl.total_seconds() * 1000),
        "scheduled_enqueue_time": _utc(message.scheduled_enqueue_time_utc),
        "application_properties": props,
        "property_problem": problem,
        "body_type": str(body_type.value if hasattr(body_type, "value") else body_type),
        "body": body,
        "body_size": None if body is None else len(body),
    }


def peek_rows(
    receiver: Any,
    backlog_queue: str,
    from_sequence_number: int = 1,
    until_sequence_number: int | None = None,
    page: int = PEEK_PAGE,
) -> Iterator[dict[str, Any]]:
    """Every message of a backlog queue from ``from_sequence_number`` on, as rows.

    Args:
        receiver: a ``ServiceBusReceiver`` on the backlog queue (only ``peek_messages``
            is called: nothing is locked or removed).
        backlog_queue: the queue's path, recorded in each row.
        from_sequence_number: the first sequence number to read.
        until_sequence_number: the last one to read (inclusive); None reads to the end.
        page: messages asked per peek.
    """
    next_seq = max(1, from_sequence_number)
    while True:
        messages = receiver.peek_messages(page, sequence_number=next_seq)
        if not messages:
            return
        for message in messages:
            if until_sequence_number is not None and message.sequence_number > (
                until_sequence_number
            ):
                return
            yield message_row(message, backlog_queue)
        next_seq = messages[-1].sequence_number + 1


def first_sequence_number(access: Any, queue: str) -> int | None:
    """The lowest sequence number in ``queue`` (one peek), or None when it is empty.

    Args:
        access: a :class:`syphon.servicebus.access.Access` of the queue's namespace.
    """
    with access.client() as client, peek_receiver(client, queue) as receiver:
        peeked = receiver.peek_messages(1, sequence_number=1)
    return int(peeked[0].sequence_number) if peeked else None
