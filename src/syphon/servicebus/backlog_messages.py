"""Backlog messages, as the paired sender writes them (the SDK's side of the envelope)."""

from __future__ import annotations

from typing import Any

from syphon.core.envelope import (
    PING_CONTENT_TYPE,
    PING_TIME_TO_LIVE,
    SENDER_ID,
    SENDER_SEQUENCE,
    TIME_TO_LIVE,
    Envelope,
    to_backlog_properties,
)


def counts_as_outage(exc: BaseException) -> bool:
    """True for errors that start (or continue) the failover timer.

    Server-busy is transient and never fails over; errors about the message itself
    (size, bad values) would fail on any entity and do not count either.
    """
    from azure.servicebus.exceptions import (
        MessageSizeExceededError,
        ServiceBusError,
        ServiceBusServerBusyError,
    )

    if isinstance(exc, (ServiceBusServerBusyError, MessageSizeExceededError)):
        return False
    return isinstance(exc, (ServiceBusError, TimeoutError, ConnectionError))


def ping_message() -> Any:
    """The paired sender's ping: empty, its own content type, TTL 1 second."""
    from azure.servicebus import ServiceBusMessage

    return ServiceBusMessage(b"", content_type=PING_CONTENT_TYPE, time_to_live=PING_TIME_TO_LIVE)


def to_backlog_message(message: Any, destination: str, stamp: tuple[str, int] | None = None) -> Any:
    """The backlog form of ``message`` (a ``ServiceBusMessage``) bound for ``destination``;
    ``stamp`` (a sender's id and its count of backlog copies) orders copies whose enqueue
    times tie (``x-syphon-sender-id``, ``x-syphon-sender-sequence``: the replay removes
    them with the aliases).

    Raises:
        EnvelopeError: the message cannot be put in the backlog form (see
            :func:`syphon.core.envelope.to_backlog_properties`).
        TypeError: not a ``ServiceBusMessage`` with a data body.
    """
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
    from azure.servicebus.amqp import AmqpMessageBodyType

    if not isinstance(message, ServiceBusMessage):
        raise TypeError(f"expected a ServiceBusMessage, got {type(message).__name__}")
    if message.body_type != AmqpMessageBodyType.DATA:
        raise TypeError("only messages with data bodies can be sent through the backlog")
    app: dict[str, Any] = {}
    for key, value in (message.application_properties or {}).items():
        app[key.decode("utf-8") if isinstance(key, bytes) else str(key)] = value
    envelope = Envelope(
        destination=destination,
        session_id=message.session_id,
        time_to_live=message.time_to_live,
        scheduled_enqueue_time_utc=message.scheduled_enqueue_time_utc,
        application_properties=app,
    )
    props = to_backlog_properties(envelope)
    if TIME_TO_LIVE in props:  # ticks go on the wire as an AMQP long, as .NET sends them
        props[TIME_TO_LIVE] = {TYPE: AMQPTypes.long, VALUE: props[TIME_TO_LIVE]}
    if stamp is not None:
        props[SENDER_ID] = stamp[0]
        props[SENDER_SEQUENCE] = {TYPE: AMQPTypes.long, VALUE: stamp[1]}
    return ServiceBusMessage(
        b"".join(message.body),
        application_properties=props,  # type: ignore[arg-type]  # the typed long is pyamqp's
        message_id=message.message_id,
        partition_key=message.partition_key,
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        to=message.to,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
    )


def is_message(value: Any) -> bool:
    """True for one ``ServiceBusMessage`` (not a list of them)."""
    from azure.servicebus import ServiceBusMessage

    return isinstance(value, ServiceBusMessage)


def is_authorization_error(exc: BaseException) -> bool:
    """True when a namespace refused the credentials' rights."""
    from azure.servicebus.exceptions import ServiceBusAuthorizationError

    return isinstance(exc, ServiceBusAuthorizationError)


def is_size_exceeded(exc: BaseException) -> bool:
    """True when a message does not fit a batch."""
    from azure.servicebus.exceptions import MessageSizeExceededError

    return isinstance(exc, MessageSizeExceededError)
