"""Hand-made snapshot rows for the Spark tests (no Service Bus)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.core.properties import typed_properties
from syphon.core.schema import SNAPSHOT, names
from syphon.core.timespan import timedelta_to_ticks

SNAPSHOT_COLUMNS = names(SNAPSHOT)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)


def row(
    queue: int,
    seq: int,
    *,
    path: Any = "orders",
    minutes: float = 0,
    message_id: str | None = None,
    body: bytes | None = b"body",
    session: Any = None,
    partition_key: str | None = None,
    ttl: timedelta | None = None,
    content_type: str | None = None,
    extra: dict[Any, Any] | None = None,
    body_type: str = "data",
) -> dict[str, Any]:
    props: dict[Any, Any] = {}
    if path is not None:
        props["x-ms-path"] = path.encode() if isinstance(path, str) else path
    if session is not None:
        props["x-ms-sessionid"] = session.encode() if isinstance(session, str) else session
    if ttl is not None:
        props["x-ms-timetolive"] = timedelta_to_ticks(ttl)
    props.update(extra or {})
    typed, problem = typed_properties(props)
    values = {
        "backlog_queue": f"contoso-primary/x-servicebus-transfer/{queue}",
        "sequence_number": seq,
        "enqueued_time": T0 + timedelta(minutes=minutes),
        "delivery_count": 0,
        "message_id": message_id,
        "session_id": None,
        "partition_key": partition_key,
        "content_type": content_type,
        "correlation_id": None,
        "subject": None,
        "to": None,
        "reply_to": None,
        "reply_to_session_id": None,
        "time_to_live_ms": None,
        "scheduled_enqueue_time": None,
        "application_properties": typed,
        "property_problem": problem,
        "body_type": body_type,
        "body": body if body_type == "data" else None,
        "body_size": len(body) if body is not None and body_type == "data" else None,
    }
    return {c: values[c] for c in SNAPSHOT_COLUMNS}
