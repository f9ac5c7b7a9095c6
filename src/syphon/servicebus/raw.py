"""The Service Bus SDK below its public surface: the one module that reaches into it.

A faithful replay needs each backlog message as the bytes the service holds (the SDK's
decoder turns a ``long`` into an ``int`` and loses ``char`` and described values, and a
decimal fails the whole peek), so syphon reads and writes encoded messages
(see :mod:`syphon.core.amqp_bytes`). The SDK has no public call for either: a peek's
answer carries every message encoded, and the SDK decodes it at once. This module
repeats the SDK's peek request (and its receive of deferred messages by sequence number)
with its own answer handler, which keeps the encoded bytes and decodes nothing; the
SDK's decoder table learns the three types it lacks, for the settle's receiver; and a
page of received messages is settled in one management request (the SDK's public calls
settle one message each). Sending encoded messages in the SDK's batch is
:mod:`syphon.servicebus.raw_batch`'s, the other module below the surface.
``tests/job/test_raw_peek.py`` fails if an SDK upgrade changes the answer this relies on
(pinned: azure-servicebus 7.15.0), and ``tests/unit/test_sdk_internals.py`` if it renames
or removes one of the names below, or if this module reaches for one not listed here.

SDK internals this module uses (where an SDK upgrade must look first):

- ``azure.servicebus._pyamqp._decode._DECODE_BY_CONSTRUCTOR`` (the decoder table)
- ``azure.servicebus.ServiceBusReceiver._create_handler``, ``._handler`` (and the
  sender's: ``azure.servicebus.ServiceBusSender._create_handler``, ``._handler``)
- ``azure.servicebus._pyamqp.client.ReceiveClient._keep_alive_interval`` (and
  ``azure.servicebus._pyamqp.client.SendClient._keep_alive_interval``)
- ``azure.servicebus.ServiceBusReceiver._amqp_transport``,
  ``._populate_message_properties``, ``._mgmt_request_response_with_retry``,
  ``._settle_message_via_mgmt_link``
- ``azure.servicebus.ServiceBusReceiver._renew_locks``, ``._receive_context``
- ``azure.servicebus.ServiceBusReceivedMessage._delivery_tag``
- ``azure.servicebus._pyamqp.client.ReceiveClient._client_ready``, ``._link``
- ``azure.servicebus._pyamqp.receiver.ReceiverLink._incoming_transfer``,
  ``._received_payload``, ``._first_frame``, ``._received_delivery_tags``
- the management request's names in ``azure.servicebus._common.constants.MGMT_REQUEST_*``
  (and ``MGMT_RESPONSE_*``, ``REQUEST_RESPONSE_*``)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)


def complete_decoder() -> None:
    """Teaches the SDK's AMQP decoder the three primitive types it lacks (``char``,
    ``decimal32``, ``decimal64``), so that a receiver gets a message holding one instead
    of failing on it (its whole receive, or its whole peek). syphon never reads these
    values from the SDK's message (the bytes are its source), so each is decoded to
    what identifies it: a ``char`` to its text, a decimal to its encoded bytes.
    Idempotent; a decoder the SDK has is never replaced."""
    from azure.servicebus._pyamqp import _decode

    table = _decode._DECODE_BY_CONSTRUCTOR

    def char(buffer: memoryview, _depth: int = 0) -> tuple[memoryview, str]:
        return buffer[4:], chr(int.from_bytes(buffer[:4], "big"))

    def fixed(width: int) -> Any:
        def decimal(buffer: memoryview, _depth: int = 0) -> tuple[memoryview, bytes]:
            return buffer[width:], bytes(buffer[:width])

        return decimal

    for code, decoder in ((0x73, char), (0x74, fixed(4)), (0x84, fixed(8))):
        if table[code] is None:
            table[code] = decoder


#: How long one readiness poll of :func:`lean` may go on reading the handshake's frames.
READY_POLL_SECONDS = 1.0


def lean(link: Any) -> Any:
    """``link`` (a ``ServiceBusReceiver`` or ``ServiceBusSender``), made to open at the
    pace of the handshake's frames and to start no keep-alive thread; returns it.

    - The SDK's open polls its handler for readiness and sleeps 50 ms between polls; a
      poll reads one frame and the handshake takes about nine (connection, session, the
      token's links and put, the link): 0.46 s per link, 0.01 s of it work. Here a poll
      reads frames until the handler is ready (each read waits for the next frame, as
      the SDK's does) or :data:`READY_POLL_SECONDS` pass, so the SDK's loop, its deadline
      and its errors are unchanged, but it rarely sleeps.
    - The SDK gives a receiver without prefetch a keep-alive thread whatever its
      ``keep_alive`` (the interval is forced to 5 s); the thread sleeps in 1 s steps and
      ``close`` waits for it: up to a second per receiver. It only listens between receive
      calls, which syphon's receivers make back to back; messages the service delivers
      between two calls are still released when the next call reads them.

    The handler is made anew on every (re)open; each one is changed.
    """
    create = link._create_handler

    def create_handler(auth: Any) -> None:
        create(auth)
        handler = link._handler
        handler._keep_alive_interval = 0
        ready = handler.client_ready

        def client_ready() -> bool:
            until = time.monotonic() + READY_POLL_SECONDS
            while not ready():
                if time.monotonic() >= until:
                    return False
            return True

        handler.client_ready = client_ready

    link._create_handler = create_handler
    return link


def peek_raw(receiver: Any, sequence_number: int, count: int) -> list[bytes]:
    """Peeks up to ``count`` messages from ``sequence_number`` on, with the request and
    retries of ``receiver.peek_messages``; each message as the bytes the service sent.

    The SDK's own answer handler decodes every message, and its decoder refuses some
    AMQP types (a decimal property fails the whole peek): this one keeps the bytes and
    decodes nothing (:mod:`syphon.core.peeked` reads them).

    Args:
        receiver: a ``ServiceBusReceiver``.

    Returns:
        The encoded messages, in sequence order.

    Raises:
        ServiceBusError: the service refused the peek (the SDK's own error classes).
    """
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
    found = _messages(receiver, REQUEST_RESPONSE_PEEK_OPERATION, request, "Message peek failed.")
    return [bytes(m[b"message"]) for m in found]


def receive_deferred_raw(receiver: Any, sequence_numbers: Sequence[int]) -> list[tuple[bytes, Any]]:
    """Receives the deferred messages ``sequence_numbers`` in peek-lock, with the request
    and retries of ``receiver.receive_deferred_messages``: (the bytes the service sent,
    the lock token) of each, in the order the service answers.

    Raises:
        ServiceBusError: the service refused (one of them is not deferred, or gone).
    """
    from azure.servicebus._common.constants import (
        MGMT_REQUEST_RECEIVER_SETTLE_MODE,
        MGMT_REQUEST_SEQUENCE_NUMBERS,
        REQUEST_RESPONSE_RECEIVE_BY_SEQUENCE_NUMBER,
    )

    transport = receiver._amqp_transport
    request = {
        MGMT_REQUEST_SEQUENCE_NUMBERS: transport.AMQP_ARRAY_VALUE(
            [transport.AMQP_LONG_VALUE(s) for s in sequence_numbers]
        ),
        MGMT_REQUEST_RECEIVER_SETTLE_MODE: transport.AMQP_UINT_VALUE(1),  # peek-lock
    }
    what = "Retrieving deferred messages failed."
    found = _messages(receiver, REQUEST_RESPONSE_RECEIVE_BY_SEQUENCE_NUMBER, request, what)
    return [(bytes(m[b"message"]), m[b"lock-token"]) for m in found]


def _messages(receiver: Any, operation: bytes, request: dict[Any, Any], what: str) -> list[Any]:
    """The ``messages`` of a management request's answer (none for 202 and 204), each
    its map as the service sent it: nothing decoded."""
    from azure.servicebus._common.constants import MGMT_RESPONSE_MESSAGE_ERROR_CONDITION

    receiver._populate_message_properties(request)

    def answer(status_code: int, message: Any, description: str, amqp_transport: Any) -> list[Any]:
        if status_code == 200:
            return list(message.value[b"messages"])
        if status_code in (202, 204):  # no message there
            return []
        condition = message.application_properties.get(MGMT_RESPONSE_MESSAGE_ERROR_CONDITION)
        amqp_transport.handle_amqp_mgmt_error(log, what, condition, description, status_code)
        return []  # not reached: the SDK raises

    found: list[Any] = receiver._mgmt_request_response_with_retry(operation, request, answer)
    return found


def keep_encoded(receiver: Any, encoded: dict[bytes, bytes]) -> Any:
    """``receiver`` (a ``ServiceBusReceiver`` in peek-lock), made to keep every message
    its link receives as the bytes the service sent, in ``encoded`` by delivery tag (a
    received message's ``_delivery_tag``); returns it.

    A receive hands out messages the SDK decoded, and its decoder loses types a faithful
    replay keeps (see the module docstring). The link assembles a message's transfer
    frames (``more`` set on all but the last) into one payload and decodes it as the
    last frame comes; here the payload is copied first, before the link's own handling,
    which is unchanged. The caller takes out what each receive hands it; a delivery the
    SDK releases unread stays until ``encoded`` is dropped with the receiver.
    """
    create = receiver._create_handler

    def create_handler(auth: Any) -> None:
        create(auth)
        handler = receiver._handler
        ready = handler._client_ready

        def client_ready() -> bool:
            done = bool(ready())
            link = handler._link
            if link is not None and not getattr(link, "syphon_keeps_payloads", False):
                _keep_payloads(link, encoded)
            return done

        handler._client_ready = client_ready

    receiver._create_handler = create_handler
    return receiver


def _keep_payloads(link: Any, encoded: dict[bytes, bytes]) -> None:
    """Copies each message's payload off ``link`` (a pyamqp ``ReceiverLink``) as its last
    transfer frame arrives (frame fields: 1 delivery id, 2 delivery tag, 5 more,
    11 payload)."""
    incoming = link._incoming_transfer

    def incoming_transfer(frame: Any) -> None:
        if not frame[5]:
            first = frame if frame[1] is not None else link._first_frame
            pending = link._received_payload
            payload = bytes(pending) + bytes(frame[11]) if pending else bytes(frame[11])
            encoded[bytes(first[2])] = payload
        incoming(frame)

    link._incoming_transfer = incoming_transfer
    link.syphon_keeps_payloads = True


class _Receiving:
    """A receiver's receive context that is always set (see :func:`keep_delivered`)."""

    def set(self) -> None:
        return None

    def clear(self) -> None:
        return None

    def is_set(self) -> bool:
        return True


def keep_delivered(receiver: Any) -> Any:
    """``receiver`` (a ``ServiceBusReceiver`` in peek-lock without prefetch), made to keep
    what its link delivers while no receive is waiting, for its next receive; returns it.

    A receive gives the link credit for what it asks; when it returns with fewer (it
    waits a fraction of a second for more after the first), the credit stays, and what
    the service delivers on it later is received while no receive waits: the SDK then
    releases it (the service counts the delivery all the same), when any call pumps the
    connection (a renewal, a settlement). Kept, it is the next receive's, which a reader
    that goes on reading wants anyway. :func:`stop_credit` ends the credit when a reader
    has read enough; the receiver's close releases what is still kept.
    """
    receiver._receive_context = _Receiving()
    return receiver


def stop_credit(receiver: Any) -> None:
    """Takes back the link credit a receive left (a flow of credit 0): the service
    delivers nothing more on it, but what it sent already."""
    handler = receiver._handler
    link = None if handler is None else handler._link
    if link is not None and link.current_link_credit > 0:
        link.flow(link_credit=0)


def forget_deliveries(receiver: Any, tags: Sequence[bytes]) -> None:
    """Has ``receiver``'s link forget the deliveries of ``tags``, messages a receive
    handed out that are settled by lock token (a management request), never through the
    link. The link remembers each delivery's tag until it is settled through the link,
    and nothing else removes it: a read of 200,000 messages kept 200,000 tags (about
    130 bytes each) until its receiver closed."""
    handler = receiver._handler
    link = None if handler is None else handler._link
    if link is not None:
        link._received_delivery_tags.difference_update(tags)


def delivery_tag(message: Any) -> bytes:
    """A received message's delivery tag (the key of :func:`keep_encoded`'s bytes)."""
    return bytes(message._delivery_tag)


def renew_lock_tokens(receiver: Any, tokens: Sequence[Any]) -> None:
    """Renews the locks of ``tokens`` (of ``receiver``'s messages) in ONE request
    (the management operation ``com.microsoft:renew-lock``), with the SDK's retries.

    Raises:
        ServiceBusError: the request failed (``MessageLockLostError``: a lock of them
            lapsed or its message is gone; the others may not have been renewed).
    """
    if tokens:
        receiver._renew_locks(*[str(t) for t in tokens])


def settle_tokens(
    receiver: Any,
    tokens: Sequence[Any],
    status: str,
    reason: str | None = None,
    description: str | None = None,
) -> None:
    """Settles the messages of lock ``tokens`` (received in peek-lock on any link of the
    queue) in ONE request: the management operation ``com.microsoft:update-disposition``
    on ``receiver``'s management link, with the tokens as an array, ``status``
    :data:`COMPLETED`, :data:`SUSPENDED` (dead-letter, with ``reason`` and
    ``description``) or :data:`ABANDONED`. The SDK settles one message per call; its
    management-link settlement takes a list, and this passes it one.

    The request succeeds or fails as a whole for the caller; a failed one may have been
    applied to some tokens (the caller settles the rest one by one and finds out which).

    Raises:
        ServiceBusError: the request failed (e.g. ``MessageLockLostError`` for a lock
            that lapsed), with the SDK's own error classes.
    """
    from azure.servicebus._common.constants import (
        MGMT_REQUEST_DEAD_LETTER_ERROR_DESCRIPTION,
        MGMT_REQUEST_DEAD_LETTER_REASON,
    )

    if not tokens:
        return
    details = None
    if status == SUSPENDED:
        details = {
            MGMT_REQUEST_DEAD_LETTER_REASON: reason or "",
            MGMT_REQUEST_DEAD_LETTER_ERROR_DESCRIPTION: description or "",
        }
    receiver._settle_message_via_mgmt_link(status, list(tokens), dead_letter_details=details)


#: ``update-disposition``'s status per settlement (the service's names).
COMPLETED, SUSPENDED, ABANDONED = "completed", "suspended", "abandoned"
