"""Backlog messages, one per envelope reason, as the SDK would hand them over."""

from typing import Any

from syphon.core.envelope import MAX_TIMESTAMP_MS

REASON_CASES: dict[str, dict[Any, Any]] = {
    "property_key_not_utf8": {b"x-ms-path": b"q", b"\xff": 1},
    "property_key_duplicate": {b"x-ms-path": b"q", "x-ms-path": "q"},
    "path_missing": {b"other": b"q"},
    "path_holds_timestamp": {b"x-ms-path": 1_700_000_000_000},
    "path_wrong_type": {b"x-ms-path": 1.5},
    "path_not_utf8": {b"x-ms-path": b"\xc3\x28"},
    "path_empty": {b"x-ms-path": b""},
    "path_too_long": {b"x-ms-path": b"q" * 261},
    "path_is_backlog_queue": {b"x-ms-path": b"contoso/x-servicebus-transfer/0"},
    "session_id_wrong_type": {b"x-ms-path": b"q", b"x-ms-sessionid": 7},
    "session_id_not_utf8": {b"x-ms-path": b"q", b"x-ms-sessionid": b"\xff"},
    "session_id_empty": {b"x-ms-path": b"q", b"x-ms-sessionid": b""},
    "session_id_too_long": {b"x-ms-path": b"q", b"x-ms-sessionid": b"s" * 129},
    "time_to_live_wrong_type": {b"x-ms-path": b"q", b"x-ms-timetolive": b"00:01:00"},
    "time_to_live_not_positive": {b"x-ms-path": b"q", b"x-ms-timetolive": 0},
    "scheduled_time_wrong_type": {b"x-ms-path": b"q", b"x-ms-scheduledenqueuetimeutc": True},
    "scheduled_time_out_of_range": {
        b"x-ms-path": b"q",
        b"x-ms-scheduledenqueuetimeutc": MAX_TIMESTAMP_MS + 1,
    },
}


# Valid messages at the edges of each rule.
EDGE_CASES: list[dict[Any, Any]] = [
    {b"x-ms-path": b"q" * 260},
    {b"x-ms-path": b"q", b"x-ms-sessionid": b"s" * 128},
    {b"x-ms-path": b"q", b"x-ms-timetolive": 1},
    {b"x-ms-path": b"q", b"x-ms-timetolive": 2**63 - 1},
    {b"x-ms-path": b"q", b"x-ms-scheduledenqueuetimeutc": MAX_TIMESTAMP_MS},
    {b"x-ms-path": b"q", b"x-ms-scheduledenqueuetimeutc": None},
    {b"x-ms-path": b"contoso/x-servicebus-transfer/01"},
    {b"x-ms-path": b"\xc3\xa9t\xc3\xa9", b"k": b"\xff"},
]
