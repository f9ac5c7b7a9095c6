"""The backlog envelope: how an original message's routing properties travel in a
backlog queue: written by a plain function (the sender's), read back by a Spark expression.

When a paired-namespace sender fails over, it moves some of a message's own properties
into application properties ("aliases") so that messages for many destinations can
share one backlog queue:

=========================  ===============================  ==================================
original                   alias                            value
=========================  ===============================  ==================================
destination entity path    ``x-ms-path``                    string, always present
SessionId                  ``x-ms-sessionid``               string, only if set
TimeToLive                 ``x-ms-timetolive``              .NET ticks (long), only if finite
ScheduledEnqueueTimeUtc    ``x-ms-scheduledenqueuetimeutc`` timestamp, only if set
=========================  ===============================  ==================================

MessageId and PartitionKey stay on the message; the backlog copy's own TTL is infinite.

The paired-namespace documentation's table maps ScheduledEnqueueTimeUtc to
``x-ms-path``, a documentation error. It is read where that is unambiguous: an
``x-ms-path`` holding a timestamp (which the Python SDK returns as an integer) is taken
as the scheduled enqueue time, and the message is then invalid with reason
``path_holds_timestamp`` because its destination is lost.

Reading never raises on bad input: every problem becomes a machine-readable reason. The
TTL alias may also come as the .NET SDK's described TimeSpan (``com.microsoft:timespan``
holding the ticks): a described value is read as the value it holds.
Writing (:func:`to_backlog_properties`) raises :class:`EnvelopeError`, since there the
input comes from a program, not from a queue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.errors import SyphonError
from syphon.core.naming import MAX_ENTITY_PATH_LENGTH, match_backlog_queue_path
from syphon.core.timespan import (
    TIMESPAN_MAX_TICKS,
    is_infinite,
    timedelta_to_ticks,
)

if TYPE_CHECKING:
    from pyspark.sql import Column

PATH = "x-ms-path"
SESSION_ID = "x-ms-sessionid"
TIME_TO_LIVE = "x-ms-timetolive"
SCHEDULED_ENQUEUE_TIME = "x-ms-scheduledenqueuetimeutc"
#: syphon's own sender's stamp (string, long): which sender and its n-th backlog copy, so
#: that two copies of one key in different backlog queues within a millisecond keep order
SENDER_ID, SENDER_SEQUENCE = "x-syphon-sender-id", "x-syphon-sender-sequence"
ALIASES = (PATH, SESSION_ID, TIME_TO_LIVE, SCHEDULED_ENQUEUE_TIME, SENDER_ID, SENDER_SEQUENCE)

PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"
PING_TIME_TO_LIVE = timedelta(seconds=1)

MAX_SESSION_ID_LENGTH = 128

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The instants both Python's datetime and Spark's timestamp hold, in epoch milliseconds.
MIN_TIMESTAMP_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


class EnvelopeError(SyphonError, ValueError):
    """An original message cannot be put in the backlog form."""


@dataclass(frozen=True)
class Envelope:
    """The routing properties of an original message, as the backlog form keeps them.

    Attributes:
        destination: the primary entity path (queue or topic).
        session_id: the message's SessionId, or None.
        time_to_live: the message's own TTL, or None for infinite.
        scheduled_enqueue_time_utc: when the message is to be enqueued, or None.
        application_properties: the message's own application properties (no aliases).
    """

    destination: str
    session_id: str | None = None
    time_to_live: timedelta | None = None
    scheduled_enqueue_time_utc: datetime | None = None
    application_properties: Mapping[str, Any] = field(default_factory=dict)


def to_backlog_properties(envelope: Envelope) -> dict[str, Any]:
    """The application properties of the backlog copy of a message.

    The aliases are plain Python values: the path and session id as ``str``, the TTL as
    an ``int`` of ticks, the scheduled time as an aware UTC ``datetime``. Whoever puts
    them on the wire must send the ticks as an AMQP long (the SDK would pick a 32-bit
    int for small numbers and fail on large ones).

    Raises:
        EnvelopeError: the destination is empty, too long or itself a backlog queue; a
            property already uses an alias name; the session id is empty or too long;
            the TTL is not positive.
    """
    problems = _check_original(envelope)
    if problems:
        raise EnvelopeError("; ".join(problems))
    props: dict[str, Any] = dict(envelope.application_properties)
    props[PATH] = envelope.destination
    if envelope.session_id is not None:
        props[SESSION_ID] = envelope.session_id
    ttl = envelope.time_to_live
    if ttl is not None and not is_infinite(ttl):
        props[TIME_TO_LIVE] = timedelta_to_ticks(ttl)
    if envelope.scheduled_enqueue_time_utc is not None:
        props[SCHEDULED_ENQUEUE_TIME] = _as_utc(envelope.scheduled_enqueue_time_utc)
    return props


def _check_original(envelope: Envelope) -> list[str]:
    problems = []
    dest = envelope.destination
    if not isinstance(dest, str) or not dest:
        problems.append("the destination path must be a non-empty string")
    elif len(dest) > MAX_ENTITY_PATH_LENGTH:
        problems.append(f"the destination path is longer than {MAX_ENTITY_PATH_LENGTH}")
    elif match_backlog_queue_path(dest) is not None:
        problems.append(f"the destination {dest!r} is itself a backlog queue")
    clashes = sorted(k for k in envelope.application_properties if k in ALIASES)
    if clashes:
        problems.append(f"application properties use reserved alias names: {clashes}")
    sid = envelope.session_id
    if sid is not None and (not isinstance(sid, str) or not sid):
        problems.append("the session id must be a non-empty string")
    elif sid is not None and len(sid) > MAX_SESSION_ID_LENGTH:
        problems.append(f"the session id is longer than {MAX_SESSION_ID_LENGTH}")
    ttl = envelope.time_to_live
    if ttl is not None and ttl <= timedelta(0):
        problems.append("the time to live must be positive")
    return problems


def _as_utc(value: datetime) -> datetime:
    aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return aware.astimezone(timezone.utc)


# --------------------------------------------------------------------------- Spark


def restore_envelope_col(properties: Column, key_problem: Column) -> Column:
    """The restore of a backlog message's aliases as a Spark expression (the tests hold it
    to its plain form, ``tests/support/python_rules.py``).

    Args:
        properties: a typed application-property map
            (the ``properties`` type of :mod:`syphon.core.schema`).
        key_problem: the map's key problem (string, null when none).

    Returns:
        A struct with the fields of :class:`RestoredEnvelope` (``time_to_live_ticks`` as
        a long, ``scheduled_enqueue_time_utc`` as a timestamp).
    """
    from pyspark.sql import functions as F

    def kind_is(value: Column, *kinds: str) -> Column:
        return value.isNotNull() & value["kind"].isin(*kinds)

    def text(value: Column) -> Column:
        return F.when(value["kind"] == "string", value["string"]).when(
            (value["kind"] == "bytes") & F.is_valid_utf8(value["bytes"]),
            F.decode(value["bytes"], "UTF-8"),
        )

    def text_problem(value: Column, prefix: str) -> Column:
        return F.when(
            (value["kind"] == "bytes") & ~F.is_valid_utf8(value["bytes"]),
            F.lit(f"{prefix}_not_utf8"),
        ).when(~value["kind"].isin("string", "bytes"), F.lit(f"{prefix}_wrong_type"))

    def in_ms_range(ms: Column) -> Column:
        return ms.between(F.lit(MIN_TIMESTAMP_MS), F.lit(MAX_TIMESTAMP_MS))

    path = properties[PATH]
    path_text = text(path)
    present = path.isNotNull() & (path["kind"] != "null")
    path_reason = (
        F.when(~present, F.lit("path_missing"))
        .when(kind_is(path, "int", "timestamp"), F.lit("path_holds_timestamp"))
        .otherwise(
            F.coalesce(
                text_problem(path, "path"),
                F.when(F.length(path_text) == 0, F.lit("path_empty"))
                .when(F.length(path_text) > MAX_ENTITY_PATH_LENGTH, F.lit("path_too_long"))
                .when(_is_backlog_path(path_text), F.lit("path_is_backlog_queue")),
            )
        )
    )
    destination = F.when(kind_is(path, "string", "bytes"), path_text)
    path_time = F.when(
        kind_is(path, "int") & in_ms_range(path["int"]), F.timestamp_millis(path["int"])
    ).when(kind_is(path, "timestamp"), path["timestamp"])

    sid = properties[SESSION_ID]
    sid_text = text(sid)
    sid_set = sid.isNotNull() & (sid["kind"] != "null")
    session_reason = F.when(
        sid_set,
        F.coalesce(
            text_problem(sid, "session_id"),
            F.when(F.length(sid_text) == 0, F.lit("session_id_empty")).when(
                F.length(sid_text) > MAX_SESSION_ID_LENGTH, F.lit("session_id_too_long")
            ),
        ),
    )
    session_id = F.when(sid_set, sid_text)

    ttl = properties[TIME_TO_LIVE]
    ttl_set = ttl.isNotNull() & (ttl["kind"] != "null")
    ttl_reason = F.when(ttl_set & (ttl["kind"] != "int"), F.lit("time_to_live_wrong_type")).when(
        ttl_set & (ttl["int"] <= 0), F.lit("time_to_live_not_positive")
    )
    ttl_ticks = F.when(
        kind_is(ttl, "int") & (ttl["int"] > 0) & (ttl["int"] < F.lit(TIMESPAN_MAX_TICKS)),
        ttl["int"],
    )

    sched = properties[SCHEDULED_ENQUEUE_TIME]
    sched_set = sched.isNotNull() & (sched["kind"] != "null")
    sched_reason = F.when(
        sched_set & ~sched["kind"].isin("int", "timestamp"), F.lit("scheduled_time_wrong_type")
    ).when(kind_is(sched, "int") & ~in_ms_range(sched["int"]), F.lit("scheduled_time_out_of_range"))
    scheduled = (
        F.when(kind_is(sched, "timestamp"), sched["timestamp"])
        .when(kind_is(sched, "int") & in_ms_range(sched["int"]), F.timestamp_millis(sched["int"]))
        .when(~sched_set, path_time)
    )

    own_properties = F.map_filter(properties, lambda k, _v: ~k.isin(*ALIASES))
    return F.struct(
        destination.alias("destination"),
        session_id.alias("session_id"),
        ttl_ticks.alias("time_to_live_ticks"),
        scheduled.alias("scheduled_enqueue_time_utc"),
        own_properties.alias("application_properties"),
        F.coalesce(key_problem, path_reason, session_reason, ttl_reason, sched_reason).alias(
            "reason"
        ),
    )


def _is_backlog_path(path: Column) -> Column:
    from syphon.core.naming import backlog_primary_col

    return backlog_primary_col(path).isNotNull()
