"""``<entity>/$management`` requests: peek, locks, scheduling, deferral, sessions."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from proton import UNDESCRIBED, Array, Data, symbol, timestamp

from servicebus_emulator.broker import ARGUMENT_ERROR, BrokerError, StoredMessage
from servicebus_emulator.codec import parse_message, render_message

if TYPE_CHECKING:
    from servicebus_emulator.amqp import AmqpHandler

log = logging.getLogger(__name__)

_UNDESCRIBED: Any = UNDESCRIBED

Response = tuple[int, str, Any, str | None]  # status, description, body, error condition


def _ok(body: Any = None) -> Response:
    return 200, "OK", body, None


def handle_management(handler: AmqpHandler, entity: str, operation: str, body: Any) -> Response:
    """Runs one management operation; errors come back as status and condition."""
    broker = handler.broker
    body = body if isinstance(body, dict) else {}
    op = operation.removeprefix("com.microsoft:")
    try:
        if op == "peek-message":
            msgs = broker.peek(
                entity,
                int(body.get("from-sequence-number", 1)),
                int(body.get("message-count", 1)),
                _opt_text(body.get("session-id")),
            )
            if not msgs:
                return 204, "No Content", None, None
            path = broker.entity(entity).path
            return _ok({"messages": [{"message": render_message(m, path)} for m in msgs]})
        if op == "renew-lock":
            tokens = [_uuid(t) for t in _items(body.get("lock-tokens"))]
            expirations = broker.renew_locks(entity, tokens)
            return _ok(
                {
                    "expirations": Array(
                        _UNDESCRIBED, Data.TIMESTAMP, *[timestamp(e) for e in expirations]
                    )
                }
            )
        if op == "schedule-message":
            items = []
            for item in _items(body.get("messages")):
                raw = bytes(item["message"])
                parsed = parse_message(raw)
                due = parsed.annotation("x-opt-scheduled-enqueue-time")
                items.append((parsed, len(raw), int(due)))
            seqs = broker.schedule(entity, items)
            handler.wake(entity)
            return _ok({"sequence-numbers": Array(_UNDESCRIBED, Data.LONG, *seqs)})
        if op == "cancel-scheduled-message":
            broker.cancel_scheduled(entity, [int(s) for s in _items(body.get("sequence-numbers"))])
            return _ok({})
        if op == "receive-by-sequence-number":
            peek_lock = int(body.get("receiver-settle-mode", 1)) == 1
            msgs = broker.receive_deferred(
                entity,
                [int(s) for s in _items(body.get("sequence-numbers"))],
                peek_lock=peek_lock,
                session_id=_opt_text(body.get("session-id")),
            )
            path = broker.entity(entity).path
            return _ok({"messages": [_deferred(m, path, render_message) for m in msgs]})
        if op == "update-disposition":
            status = _opt_text(body.get("disposition-status")) or ""
            outcome = {
                "completed": "complete",
                "abandoned": "abandon",
                "defered": "defer",
                "deferred": "defer",
                "suspended": "dead-letter",
            }.get(status)
            if outcome is None:
                raise BrokerError(ARGUMENT_ERROR, f"unknown disposition-status {status!r}")
            tokens = _items(body.get("lock-tokens"))
            broker.disposition_requests.append((entity, status, len(tokens)))
            # applied in order; the first that fails ends the request (those before it
            # stay settled: a client cannot assume all or nothing)
            for token in tokens:
                broker.settle(
                    entity,
                    _uuid(token),
                    outcome,
                    reason=_opt_text(body.get("deadletter-reason")),
                    description=_opt_text(body.get("deadletter-description")),
                    properties=body.get("properties-to-modify"),
                )
            handler.wake(entity)
            return _ok({})
        if op == "renew-session-lock":
            until = broker.renew_session(entity, _text(body.get("session-id")), None)
            return _ok({"expiration": timestamp(until)})
        if op == "get-session-state":
            state = broker.get_session_state(entity, _text(body.get("session-id")), None)
            return _ok({"session-state": state})
        if op == "set-session-state":
            value = body.get("session-state")
            broker.set_session_state(
                entity,
                _text(body.get("session-id")),
                None if value is None else bytes(value),
                None,
            )
            return _ok({})
        if op == "get-message-sessions":
            since = int(body.get("last-updated-time", 0) or 0)
            skip = int(body.get("skip", 0) or 0)
            top = int(body.get("top", 100) or 100)
            sessions = broker.list_sessions(entity, since)[skip : skip + top]
            if not sessions:
                return 204, "No Content", None, None
            return _ok(
                {
                    "skip": skip + len(sessions),
                    "sessions-ids": Array(_UNDESCRIBED, Data.STRING, *sessions),
                }
            )
    except BrokerError as exc:
        return _status_for(exc.condition), exc.description, None, exc.condition
    return 400, f"unsupported operation {operation}", None, "amqp:not-implemented"


def _deferred(msg: StoredMessage, path: str, render: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"message": render(msg, path)}
    if msg.lock_token is not None:
        item["lock-token"] = msg.lock_token
    return item


def _status_for(condition: str) -> int:
    return {
        "amqp:not-found": 404,
        "com.microsoft:message-not-found": 404,
        "com.microsoft:message-lock-lost": 410,
        "com.microsoft:session-lock-lost": 410,
        "com.microsoft:server-busy": 503,
        "com.microsoft:entity-disabled": 400,
    }.get(condition, 400)


def _items(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, (bytes, memoryview)):
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))


def _opt_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).decode("utf-8")
    return str(value)


def _text(value: Any) -> str:
    text = _opt_text(value)
    if text is None:
        raise BrokerError(ARGUMENT_ERROR, "session-id is required")
    return text


__all__ = ["handle_management", "symbol"]
