"""The product's rules written once more in plain Python, for the tests only: the
product applies them as Spark expressions over a wave's rows (``syphon.core``'s ``*_col``
functions), and the tests hold each expression to its plain form here, example by
example and by property. Also the few helpers only tests ask for (a backlog path parsed
or its index as a column, the SDK's empty batch, a local audit folder, a report's
path)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.envelope import (
    ALIASES,
    MAX_SESSION_ID_LENGTH,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    PATH,
    SCHEDULED_ENQUEUE_TIME,
    SESSION_ID,
    TIME_TO_LIVE,
)
from syphon.core.errors import BacklogPathError
from syphon.core.naming import (
    _SPARK_BACKLOG_PATH_PATTERN,
    MAX_ENTITY_PATH_LENGTH,
    TRANSFER_SEGMENT,
    BacklogQueue,
    _valid_backlog_path,
    match_backlog_queue_path,
)
from syphon.core.partitioning import (
    MAX_PARTITION_KEY_LENGTH,
    SOURCE_MESSAGE_ID,
    SOURCE_PARTITION_KEY,
    SOURCE_SESSION_ID,
)
from syphon.core.properties import KEY_DUPLICATE, KEY_NOT_UTF8, TypedValue, typed_value
from syphon.core.sizing import BATCH_OVERHEAD, EMPTY_BATCH_BYTES, SCHEDULE, SESSION, TTL_HEADER
from syphon.core.timespan import TICKS_PER_MICROSECOND, TIMESPAN_MAX_TICKS
from syphon.store.location import Location, as_location
from syphon.store.reports import REPORTS_DIR

if TYPE_CHECKING:
    from pyspark.sql import Column

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# ----------------------------------------------------------------- application properties


def typed_properties(
    properties: Mapping[Any, Any] | None,
) -> tuple[dict[str, TypedValue], str | None]:
    """Types every value of an application-property map and decodes its keys.

    Args:
        properties: the map as the SDK returns it (keys ``str`` or ``bytes``), or None.

    Returns:
        ``(typed map, problem)``: ``problem`` is ``property_key_not_utf8`` when a key is
        not UTF-8 (kept under its lossy decoding) or ``property_key_duplicate`` when two
        keys decode to the same text (the first is kept); else None.
    """
    typed: dict[str, TypedValue] = {}
    problem: str | None = None
    for raw_key, value in (properties or {}).items():
        if isinstance(raw_key, (bytes, bytearray, memoryview)):
            try:
                key = bytes(raw_key).decode("utf-8")
            except UnicodeDecodeError:
                key = bytes(raw_key).decode("utf-8", errors="replace")
                problem = problem or KEY_NOT_UTF8
        else:
            key = str(raw_key)
        if key in typed:
            problem = problem or KEY_DUPLICATE
            continue
        typed[key] = typed_value(value)
    return typed, problem


# ----------------------------------------------------------------------- envelope


def ticks_to_timedelta(ticks: int) -> timedelta:
    """Converts .NET ticks to a timedelta, truncating below one microsecond.

    Args:
        ticks: a tick count; values beyond what timedelta holds raise OverflowError.
    """
    return timedelta(microseconds=ticks // TICKS_PER_MICROSECOND)


#: Every reason :func:`restore_from_backlog` can give, in the order they are checked.
ENVELOPE_REASONS = (
    "property_key_not_utf8",
    "property_key_duplicate",
    "path_missing",
    "path_holds_timestamp",
    "path_wrong_type",
    "path_not_utf8",
    "path_empty",
    "path_too_long",
    "path_is_backlog_queue",
    "session_id_wrong_type",
    "session_id_not_utf8",
    "session_id_empty",
    "session_id_too_long",
    "time_to_live_wrong_type",
    "time_to_live_not_positive",
    "scheduled_time_wrong_type",
    "scheduled_time_out_of_range",
)


@dataclass(frozen=True)
class RestoredEnvelope:
    """What a backlog message says about its original, read back from its aliases.

    Fields that could be read are filled even when ``reason`` names a problem
    elsewhere, so the audit can show as much as is known.

    Attributes:
        destination: the primary entity path, or None.
        session_id: the original SessionId, or None.
        time_to_live_ticks: the original TTL in .NET ticks; None when infinite or unset.
        scheduled_enqueue_time_utc: the original scheduled time (aware UTC), or None.
        application_properties: the typed application properties without the aliases.
        reason: the first problem found (one of :data:`ENVELOPE_REASONS`), or None when
            valid.
    """

    destination: str | None
    session_id: str | None
    time_to_live_ticks: int | None
    scheduled_enqueue_time_utc: datetime | None
    application_properties: dict[str, TypedValue]
    reason: str | None

    @property
    def time_to_live(self) -> timedelta | None:
        """The original TTL as a timedelta, or None when infinite or unset."""
        if self.time_to_live_ticks is None:
            return None
        return ticks_to_timedelta(self.time_to_live_ticks)


def restore_from_backlog(properties: Mapping[Any, Any] | None) -> RestoredEnvelope:
    """Reads the aliases of a backlog message's application properties.

    Args:
        properties: the application properties as the SDK returns them (keys and
            string values may be ``bytes``), or None.
    """
    typed, key_problem = typed_properties(properties)
    return restore_from_typed(typed, key_problem)


def restore_from_typed(
    typed: Mapping[str, TypedValue], key_problem: str | None = None
) -> RestoredEnvelope:
    """Like :func:`restore_from_backlog`, from already typed properties.

    The Spark expression :func:`syphon.core.envelope.restore_envelope_col` mirrors it.
    """
    reasons: list[str] = [key_problem] if key_problem else []

    destination, path_time, path_reason = _read_path(typed.get(PATH))
    session_id, session_reason = _read_session_id(typed.get(SESSION_ID))
    ttl_ticks, ttl_reason = _read_ttl(typed.get(TIME_TO_LIVE))
    sched_value = typed.get(SCHEDULED_ENQUEUE_TIME)
    if sched_value is not None and sched_value["kind"] != "null":
        scheduled, sched_reason = _read_scheduled(sched_value)
    else:
        scheduled, sched_reason = path_time, None
    reasons += [r for r in (path_reason, session_reason, ttl_reason, sched_reason) if r]
    return RestoredEnvelope(
        destination=destination,
        session_id=session_id,
        time_to_live_ticks=ttl_ticks,
        scheduled_enqueue_time_utc=scheduled,
        application_properties={k: v for k, v in typed.items() if k not in ALIASES},
        reason=reasons[0] if reasons else None,
    )


def _text(value: TypedValue) -> tuple[str | None, str | None]:
    """(text, problem) of a string-like typed value; problem is a suffix of a reason."""
    if value["kind"] == "string":
        return value["string"], None
    if value["kind"] == "bytes":
        try:
            return value["bytes"].decode("utf-8"), None
        except UnicodeDecodeError:
            return None, "not_utf8"
    return None, "wrong_type"


def _read_path(value: TypedValue | None) -> tuple[str | None, datetime | None, str | None]:
    """(destination, scheduled time under the documentation table's reading, reason)."""
    if value is None or value["kind"] == "null":
        return None, None, "path_missing"
    if value["kind"] in ("int", "timestamp"):
        scheduled, _ = _read_scheduled(value)
        return None, scheduled, "path_holds_timestamp"
    text, problem = _text(value)
    if text is None:
        return None, None, f"path_{problem}"
    if not text:
        return text, None, "path_empty"
    if len(text) > MAX_ENTITY_PATH_LENGTH:
        return text, None, "path_too_long"
    if match_backlog_queue_path(text) is not None:
        return text, None, "path_is_backlog_queue"
    return text, None, None


def _read_session_id(value: TypedValue | None) -> tuple[str | None, str | None]:
    if value is None or value["kind"] == "null":
        return None, None
    text, problem = _text(value)
    if text is None:
        return None, f"session_id_{problem}"
    if not text:
        return text, "session_id_empty"
    if len(text) > MAX_SESSION_ID_LENGTH:
        return text, "session_id_too_long"
    return text, None


def _read_ttl(value: TypedValue | None) -> tuple[int | None, str | None]:
    if value is None or value["kind"] == "null":
        return None, None
    if value["kind"] != "int":
        return None, "time_to_live_wrong_type"
    ticks: int = value["int"]
    if ticks <= 0:
        return None, "time_to_live_not_positive"
    if ticks >= TIMESPAN_MAX_TICKS:
        return None, None
    return ticks, None


def _read_scheduled(value: TypedValue) -> tuple[datetime | None, str | None]:
    if value["kind"] == "timestamp":
        return value["timestamp"], None
    if value["kind"] != "int":
        return None, "scheduled_time_wrong_type"
    ms: int = value["int"]
    if not MIN_TIMESTAMP_MS <= ms <= MAX_TIMESTAMP_MS:
        return None, "scheduled_time_out_of_range"
    return _ms_to_datetime(ms), None


def _ms_to_datetime(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


# ------------------------------------------------------------------- partition key

#: Every reason :func:`effective_partition_key` can give.
PARTITION_REASONS = (
    "partition_key_differs_from_session_id",
    "partition_key_too_long",
    "session_id_required",
)


@dataclass(frozen=True)
class PartitionKey:
    """The effective partition key of one message.

    Attributes:
        key: the key, or None for a keyless message (and for an invalid one).
        source: which property gave the key (``session_id``, ``partition_key``,
            ``message_id``), or None.
        reason: why the combination is invalid (one of :data:`PARTITION_REASONS`), or
            None.
    """

    key: str | None
    source: str | None
    reason: str | None = None


def effective_partition_key(
    session_id: str | None,
    partition_key: str | None,
    message_id: str | None,
    requires_duplicate_detection: bool | None = None,
    requires_session: bool | None = None,
) -> PartitionKey:
    """Applies the rules of the module docstring to one message.

    Args:
        session_id: the original SessionId (restored from the backlog form).
        partition_key: the message's PartitionKey.
        message_id: the message's MessageId as text.
        requires_duplicate_detection: the destination's setting; None when unknown
            (treated as True).
        requires_session: the destination's setting; True makes a message without a
            SessionId invalid. None when unknown (not checked).
    """
    if partition_key is not None and len(partition_key) > MAX_PARTITION_KEY_LENGTH:
        return PartitionKey(None, None, "partition_key_too_long")
    if session_id is not None:
        if partition_key is not None and partition_key != session_id:
            return PartitionKey(None, None, "partition_key_differs_from_session_id")
        return PartitionKey(session_id, SOURCE_SESSION_ID)
    if requires_session:
        return PartitionKey(None, None, "session_id_required")
    if partition_key is not None:
        return PartitionKey(partition_key, SOURCE_PARTITION_KEY)
    if requires_duplicate_detection is not False and message_id is not None:
        return PartitionKey(message_id, SOURCE_MESSAGE_ID)
    return PartitionKey(None, None)


# ------------------------------------------------------------------ the size bound


def message_bytes_bound(
    encoded_size: int, session_id: str | None, has_ttl: bool, has_schedule: bool
) -> int:
    """The bound (see the module docstring) for a backlog message of ``encoded_size``
    bytes whose restored envelope has ``session_id``, a TTL, a scheduled time."""
    bound = EMPTY_BATCH_BYTES + BATCH_OVERHEAD + encoded_size
    if has_ttl:
        bound += TTL_HEADER
    if has_schedule:
        bound += SCHEDULE
    if session_id is not None:
        bound += SESSION + len(session_id.encode("utf-8"))
    return bound


# ------------------------------------------------------------------ the rest


def is_infinite_ticks(ticks: int) -> bool:
    """True for `TimeSpan.MaxValue`, the .NET SDK's "never expires"."""
    return ticks >= TIMESPAN_MAX_TICKS


def parse_backlog_queue_path(path: str) -> BacklogQueue:
    """Parses ``<primary>/x-servicebus-transfer/<index>``.

    Raises:
        BacklogPathError: ``path`` is not a backlog queue path.
    """
    parsed = match_backlog_queue_path(path)
    if parsed is None:
        raise BacklogPathError(
            f"{path!r} is not a backlog queue path (<primary namespace>/{TRANSFER_SEGMENT}/<index>)"
        )
    return parsed


def backlog_index_col(path: Column) -> Column:
    """Spark expression: the index (int) of a backlog path, or null when not one."""
    from pyspark.sql import functions as F

    index = F.regexp_extract(path, _SPARK_BACKLOG_PATH_PATTERN, 2)
    return F.when(_valid_backlog_path(path), index.cast("int"))


def empty_batch_bytes() -> int:
    """The size the SDK gives an empty ``ServiceBusMessageBatch`` (the size bound of
    :mod:`syphon.core.sizing` assumes :data:`syphon.core.sizing.EMPTY_BATCH_BYTES`; a test
    keeps the two equal)."""
    from azure.servicebus import ServiceBusMessageBatch

    return int(ServiceBusMessageBatch(max_size_in_bytes=2**62).size_in_bytes)


def local_location(path: str | os.PathLike[str]) -> Location:
    """A local folder (tests, the embedded default)."""
    absolute = os.path.abspath(os.fspath(path))
    return Location(absolute, absolute)


def report_path(root: Location | str | os.PathLike[str], run_id: str) -> str:
    """Where a run's report is written, as shown: ``<audit.path>/reports/<run_id>.html``."""
    return as_location(root).child(REPORTS_DIR, f"{run_id}.html").shown
