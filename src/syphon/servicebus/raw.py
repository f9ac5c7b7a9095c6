"""The Service Bus SDK below its public surface: the one module that reaches into it.

A faithful replay needs each backlog message as the bytes the service holds (the SDK's
decoder turns a ``long`` into an ``int``, a ``binary`` property into ``str`` and loses
``char``, decimals and described values), so syphon reads and writes encoded messages
(see :mod:`syphon.core.amqp_bytes`). The SDK has no public call for either: a peek's
answer carries every message encoded, and the SDK decodes it at once. This module
repeats the SDK's peek request with its own answer handler, which keeps the encoded
bytes beside the SDK's message. ``tests/job/test_raw_peek.py`` fails if an SDK upgrade
changes the names or the answer this relies on (pinned: azure-servicebus 7.15.0).
"""

from __future__ import annotations

from typing import Any


def peek_raw(receiver: Any, sequence_number: int, count: int) -> list[tuple[bytes, Any]]:
    """Peeks up to ``count`` messages from ``sequence_number`` on, as
    ``receiver.peek_messages`` does (same request, same retries, same parsing); each
    message with its encoded bytes as the service sent them.

    Args:
        receiver: a ``ServiceBusReceiver``.

    Returns:
        ``(encoded message, ServiceBusReceivedMessage)`` pairs, in sequence order.
    """
    from azure.servicebus._common import mgmt_handlers
    from azure.servicebus._common.constants import (
        MGMT_REQUEST_FROM_SEQUENCE_NUMBER,
        MGMT_REQUEST_MAX_MESSAGE_COUNT,
        REQUEST_RESPONSE_PEEK_OPERATION,
    )

    transport = receiver._amqp_transport
    request = {
        MGMT_REQUEST_FROM_SEQUENCE_NUMBER: transport.AMQP_LONG_VALUE(sequence_number),
        MGMT_REQUEST_MAX_MESSAGE_COUNT: count,
    }
    receiver._populate_message_properties(request)

    def answer(
        status_code: int, message: Any, description: str, amqp_transport: Any
    ) -> list[tuple[bytes, Any]]:
        parsed = mgmt_handlers.peek_op(  # type: ignore[no-untyped-call]  # the SDK's own
            status_code, message, description, receiver=receiver, amqp_transport=amqp_transport
        )
        if not parsed:
            return []
        encoded = [bytes(m[b"message"]) for m in message.value[b"messages"]]
        return list(zip(encoded, parsed, strict=True))

    pairs: list[tuple[bytes, Any]] = receiver._mgmt_request_response_with_retry(
        REQUEST_RESPONSE_PEEK_OPERATION, request, answer
    )
    return pairs


def add_encoded(
    batch: Any,
    encoded: bytes,
    envelope: tuple[str | None, str | None, str | None] = (None, None, None),
) -> None:
    """Adds one encoded message to a ``ServiceBusMessageBatch`` (from the sender's
    ``create_message_batch``), counted as the SDK counts a message it encodes itself, so
    that it goes on the wire exactly as given.

    Args:
        envelope: the message id, session id and partition key to put on the batch's
            envelope when this is its first message (the SDK copies them from its first
            message; the service routes a batch to a partition or session by them).

    Raises:
        MessageSizeExceededError: the batch would pass its size limit (it is unchanged).
    """
    from azure.servicebus._common.constants import _BATCH_MESSAGE_OVERHEAD_COST
    from azure.servicebus.exceptions import MessageSizeExceededError

    size = len(encoded)
    after = batch._size + size + _BATCH_MESSAGE_OVERHEAD_COST[0 if size < 256 else 1]
    if after > batch.max_size_in_bytes:
        raise MessageSizeExceededError(
            message=f"ServiceBusMessageBatch has reached its size limit: {batch.max_size_in_bytes}"
        )
    batch._message[5].append(bytearray(encoded))
    batch._size = after
    batch._count += 1
    if batch._count == 1:
        batch._amqp_transport.set_batch_envelope_properties(batch._message, *envelope)
