"""Encoded messages sent in the SDK's own batch: the other module below the SDK's public
surface (:mod:`syphon.servicebus.raw` is the first). A faithful replay sends each message
as the bytes the backlog holds (restored by :mod:`syphon.core.rebuild`); the SDK's batch
only takes messages it encodes itself, so an encoded one is added to it as the SDK adds
its own, counted the same way. ``tests/job/test_raw_peek.py`` checks the batch on the
wire and ``tests/unit/test_sdk_internals.py`` the names below.

SDK internals this module uses (where an SDK upgrade must look first):

- ``azure.servicebus.ServiceBusMessageBatch._message``, ``._size``, ``._count``,
  ``._amqp_transport``
- ``azure.servicebus._common.constants._BATCH_MESSAGE_OVERHEAD_COST``
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EncodedMessage:
    """A message to send as it is encoded, and what the batch's envelope takes from it
    when it is a batch's first message (the service routes a batch by them)."""

    encoded: bytes
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None

    def __repr__(self) -> str:  # never show a body
        return f"EncodedMessage({len(self.encoded)} bytes, message_id={self.message_id!r})"


def encoded_batch_cost(size: int) -> int:
    """The bytes an encoded message of ``size`` bytes adds to a ``ServiceBusMessageBatch``
    (its size and the SDK's per-message overhead)."""
    from azure.servicebus._common.constants import _BATCH_MESSAGE_OVERHEAD_COST

    return size + _BATCH_MESSAGE_OVERHEAD_COST[0 if size < 256 else 1]


def encoded_batch(sender: Any, messages: Sequence[EncodedMessage]) -> Any:
    """A ``ServiceBusMessageBatch`` of ``sender`` (its link's size limit) holding
    ``messages`` in order, the envelope taken from the first.

    Raises:
        MessageSizeExceededError: they do not fit in one batch.
    """
    batch = sender.create_message_batch()
    for m in messages:
        add_encoded(batch, m.encoded, (m.message_id, m.session_id, m.partition_key))
    return batch


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
    from azure.servicebus.exceptions import MessageSizeExceededError

    after = batch._size + encoded_batch_cost(len(encoded))
    if after > batch.max_size_in_bytes:
        raise MessageSizeExceededError(
            message=f"ServiceBusMessageBatch has reached its size limit: {batch.max_size_in_bytes}"
        )
    batch._message[5].append(bytearray(encoded))
    batch._size = after
    batch._count += 1
    if batch._count == 1:
        batch._amqp_transport.set_batch_envelope_properties(batch._message, *envelope)
