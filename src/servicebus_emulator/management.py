"""``<entity>/$management`` requests: peek, locks, scheduling, deferral, sessions."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from proton import UNDESCRIBED, Array, Data, timestamp

from servicebus_emulator.broker import Broker
from servicebus_emulator.codec import parse_message, render_message
from servicebus_emulator.model import ARGUMENT_ERROR, BrokerError, StoredMessage

log = logging.getLogger(__name__)

_UNDESCRIBED: Any = UNDESCRIBED

Response = tuple[int, str, Any, str | None]  # status, description, body, error condition

#: Tells the AMQP layer that messages became available on an entity (or its locks were
#: released), so its receivers get them.
Wake = Callable[[str], None]

#: One operation: (broker, wake, entity path, request body) -> response.
Operation = Callable[[Broker, Wake, str, dict[Any, Any]], Response]

NO_CONTENT: Response = (204, "No Content", None, None)

#: The disposition-status values of ``update-disposition`` and what they do.
_DISPOSITIONS = {
    "completed": "complete",
    "abandoned": "abandon",
    "defered": "defer",  # the spelling some clients send
    "deferred": "defer",
    "suspended": "dead-letter",
}


def _ok(body: Any = None) -> Response:
    return 200, "OK", body, None


def _peek(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    msgs = broker.peek(
        entity,
        int(body.get("from-sequence-number", 1)),
        int(body.get("message-count", 1)),
        _opt_text(body.get("session-id")),
    )
    if not msgs:
        return NO_CONTENT
    path = broker.entity(entity).path
    return _ok({"messages": [{"message": render_message(m, path)} for m in msgs]})


def _renew_lock(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    tokens = [_uuid(t) for t in _items(body.get("lock-tokens"))]
    expirations = [timestamp(e) for e in broker.renew_locks(entity, tokens)]
    return _ok({"expirations": Array(_UNDESCRIBED, Data.TIMESTAMP, *expirations)})


def _schedule(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    items = []
    for item in _items(body.get("messages")):
        raw = bytes(item["message"])
        parsed = parse_message(raw)
        due = parsed.annotation("x-opt-scheduled-enqueue-time")
        items.append((parsed, len(raw), int(due)))
    seqs = broker.schedule(entity, items)
    wake(entity)
    return _ok({"sequence-numbers": Array(_UNDESCRIBED, Data.LONG, *seqs)})


def _cancel_scheduled(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    broker.cancel_scheduled(entity, [int(s) for s in _items(body.get("sequence-numbers"))])
    return _ok({})


def _receive_deferred(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    msgs = broker.receive_deferred(
        entity,
        [int(s) for s in _items(body.get("sequence-numbers"))],
        peek_lock=int(body.get("receiver-settle-mode", 1)) == 1,
        session_id=_opt_text(body.get("session-id")),
    )
    path = broker.entity(entity).path
    return _ok({"messages": [_deferred(m, path) for m in msgs]})


def _update_disposition(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    status = _opt_text(body.get("disposition-status")) or ""
    outcome = _DISPOSITIONS.get(status)
    if outcome is None:
        raise BrokerError(ARGUMENT_ERROR, f"unknown disposition-status {status!r}")
    tokens = _items(body.get("lock-tokens"))
    broker.disposition_requests.append((entity, status, len(tokens)))
    # applied in order; the first that fails ends the request (those before it stay
    # settled: a client cannot assume all or nothing)
    for token in tokens:
        broker.settle(
            entity,
            _uuid(token),
            outcome,
            reason=_opt_text(body.get("deadletter-reason")),
            description=_opt_text(body.get("deadletter-description")),
            properties=body.get("properties-to-modify"),
        )
    wake(entity)
    return _ok({})


def _renew_session(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    until = broker.renew_session(entity, _text(body.get("session-id")), None)
    return _ok({"expiration": timestamp(until)})


def _get_state(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    state = broker.get_session_state(entity, _text(body.get("session-id")), None)
    return _ok({"session-state": state})


def _set_state(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    value = body.get("session-state")
    state = None if value is None else bytes(value)
    broker.set_session_state(entity, _text(body.get("session-id")), state, None)
    return _ok({})


def _list_sessions(broker: Broker, wake: Wake, entity: str, body: dict[Any, Any]) -> Response:
    since = int(body.get("last-updated-time", 0) or 0)
    skip = int(body.get("skip", 0) or 0)
    top = int(body.get("top", 100) or 100)
    sessions = broker.list_sessions(entity, since)[skip : skip + top]
    if not sessions:
        return NO_CONTENT
    ids = Array(_UNDESCRIBED, Data.STRING, *sessions)
    return _ok({"skip": skip + len(sessions), "sessions-ids": ids})


#: Every operation the ``$management`` node answers, by name (``com.microsoft:`` off).
OPERATIONS: dict[str, Operation] = {
    "peek-message": _peek,
    "renew-lock": _renew_lock,
    "schedule-message": _schedule,
    "cancel-scheduled-message": _cancel_scheduled,
    "receive-by-sequence-number": _receive_deferred,
    "update-disposition": _update_disposition,
    "renew-session-lock": _renew_session,
    "get-session-state": _get_state,
    "set-session-state": _set_state,
    "get-message-sessions": _list_sessions,
}


def handle_management(
    broker: Broker, wake: Wake, entity: str, operation: str, body: Any
) -> Response:
    """Runs one management operation; errors come back as status and condition."""
    run = OPERATIONS.get(operation.removeprefix("com.microsoft:"))
    if run is None:
        return 400, f"unsupported operation {operation}", None, "amqp:not-implemented"
    try:
        return run(broker, wake, entity, body if isinstance(body, dict) else {})
    except BrokerError as exc:
        return _status_for(exc.condition), exc.description, None, exc.condition


def _deferred(msg: StoredMessage, path: str) -> dict[str, Any]:
    item: dict[str, Any] = {"message": render_message(msg, path)}
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
