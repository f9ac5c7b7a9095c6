"""Every schema syphon reads or writes, and the words its tables use.

One notation: a schema is a tuple of :class:`Field` whose types are a few names
(``string``, ``long``, ``int``, ``double``, ``boolean``, ``binary``, ``timestamp``,
``map<string,long>``, ``map<string,double>`` and ``properties``, the typed
application-property map of :mod:`syphon.core.properties`). :mod:`syphon.core.render`
renders one for Spark or for Arrow, so a table written through either engine has the
same columns and types.

The vocabularies (verdicts, stages, outcomes, details, run statuses) are plain strings
grouped in classes, because they are stored in tables that other tools read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Field:
    """One column: its name, its type name (see the module docstring), and whether it may
    hold nulls."""

    name: str
    type: str
    nullable: bool = True


def names(fields: Iterable[Field]) -> tuple[str, ...]:
    """The column names of a schema, in order."""
    return tuple(f.name for f in fields)


# --- vocabularies -----------------------------------------------------------------------


class Verdict:
    """What the reconcile decides for a message (one each)."""

    REPLAY: Final = "replay"
    DUPLICATE: Final = "duplicate"
    CONFLICT: Final = "conflict"
    EXPIRED: Final = "expired"
    PING: Final = "ping"
    INVALID: Final = "invalid"
    #: left out by the operator's selection (:mod:`syphon.core.selection`): never sent,
    #: never settled
    UNSELECTED: Final = "unselected"
    #: removed without being sent, as the operator asked (:mod:`syphon.core.discard`)
    DISCARDED: Final = "discarded"
    #: a re-drive its destination would drop as a duplicate within its window
    #: (:mod:`syphon.core.dedupe`): never sent, never settled, until the window passes
    TOO_SOON: Final = "too_soon"
    ALL: Final = (
        REPLAY,
        DUPLICATE,
        CONFLICT,
        EXPIRED,
        PING,
        INVALID,
        UNSELECTED,
        DISCARDED,
        TOO_SOON,
    )
    #: settled by completing the backlog message (a replayed one too, once ``sent``)
    COMPLETED_AS_IS: Final = (DUPLICATE, EXPIRED, PING)
    #: settled by dead-lettering it, with the verdict's reason
    DEAD_LETTERED: Final = (INVALID, CONFLICT)


class Stage:
    """The audit's ``stage`` column: which stage wrote the row."""

    PLAN: Final = "plan"
    REPLAY: Final = "replay"
    SETTLE: Final = "settle"


class Outcome:
    """The audit's ``outcome`` column, per stage."""

    PLANNED: Final = "planned"
    SENT: Final = "sent"
    FAILED: Final = "failed"
    SKIPPED: Final = "skipped"
    IN_DOUBT: Final = "in_doubt"
    COMPLETED: Final = "completed"
    DEAD_LETTERED: Final = "dead_lettered"
    #: completed without being sent, as the operator asked; the detail is their reason
    DISCARDED: Final = "discarded"
    LEFT: Final = "left"
    GIVEN_BACK: Final = "given_back"  # a pass's count of what it gave back beyond its plan
    #: after which the destination holds the message (``in_doubt`` is not one: such a
    #: message is sent again by the next run, and marked, never settled unsent)
    REPLAYED: Final = (SENT,)


class Detail:
    """The audit's ``detail`` column: why a message was skipped, left or marked. Error
    classes (``failed``, ``in_doubt``) and the prefixed reasons carry a class name."""

    RESENT_IN_DOUBT: Final = "resent_in_doubt"
    INTERRUPTED: Final = "interrupted"  # the journal saw its transfer start, never end
    # replay skips
    EARLIER_BATCH_FAILED: Final = "earlier_batch_failed"  # an earlier batch of the key
    EARLIER_MESSAGE_UNSEEN: Final = "earlier_message_unseen"  # another receiver holds one
    EARLIER_MESSAGE_DEFERRED: Final = "earlier_message_deferred"  # a consumer deferred one
    DESTINATION_FAILING: Final = "destination_failing"
    BACKLOG_CHANGED: Final = "backlog_changed"
    EXPIRED_BEFORE_SEND: Final = "expired_before_send"
    NOT_SENDABLE: Final = "not_sendable"
    BATCH_NOT_SENDABLE: Final = "batch_not_sendable"
    NAMESPACE_FAULT: Final = "namespace_fault"
    # destinations skipped by the probes, or found missing or disabled by a send (a row
    # whose destinations were pinged says ping_failed_<Error> for probe_failed_<Error>)
    DESTINATION_MISSING: Final = "destination_missing"
    DESTINATION_UNAVAILABLE: Final = "destination_unavailable"
    PROBE_FAILED: Final = "probe_failed_"  # + the error class
    # settle
    NOT_SELECTED: Final = "not_selected"  # the verdict unselected's reason, too
    NOT_RECEIVED: Final = "not_received"
    SETTLE_FAILED: Final = "settle_failed_"  # + the error class
    RECEIVE_FAILED: Final = "receive_failed_"  # + the error class


class Status:
    """The run ledger's ``status`` column."""

    PLANNED: Final = "planned"
    REPLAYING: Final = "replaying"
    REPLAYED: Final = "replayed"
    DONE: Final = "done"
    PARTIAL: Final = "partial"
    FAILED: Final = "failed"
    EMPTY: Final = "empty"
    BUSY: Final = "busy"


# --- schemas ----------------------------------------------------------------------------

#: One typed application-property value (:mod:`syphon.core.properties`).
TYPED_VALUE: Final = (
    Field("kind", "string", False),
    Field("amqp_type", "string"),
    Field("bool", "boolean"),
    Field("int", "long"),
    Field("float", "double"),
    Field("bytes", "binary"),
    Field("string", "string"),
    Field("timestamp", "timestamp"),
    Field("text", "string"),
)

#: A peeked backlog message: where it was found, what the reconcile reads (system
#: properties, typed application properties, the body's kind, size and digest), and the
#: message itself as the service holds it (``encoded``), which the replay rebuilds.
SNAPSHOT: Final = (
    Field("backlog_queue", "string", False),
    Field("sequence_number", "long", False),
    Field("enqueued_time", "timestamp"),
    Field("delivery_count", "int"),
    Field("message_id", "string"),
    Field("session_id", "string"),
    Field("partition_key", "string"),
    Field("content_type", "string"),
    Field("correlation_id", "string"),
    Field("subject", "string"),
    Field("to", "string"),
    Field("reply_to", "string"),
    Field("reply_to_session_id", "string"),
    Field("time_to_live_ms", "long"),
    Field("scheduled_enqueue_time", "timestamp"),
    Field("dead_letter_source", "string"),
    Field("application_properties", "properties"),
    Field("property_problem", "string"),
    Field("body_type", "string"),
    Field("body_size", "int"),
    Field("body_sha256", "string"),
    Field("encoded", "binary"),
)

#: The audit table: one row per message per run and stage (never a body or a value).
AUDIT: Final = (
    Field("run_id", "string"),
    Field("stage", "string"),
    Field("recorded_at", "timestamp"),
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
    Field("backlog_enqueued_time", "timestamp"),
    Field("primary", "string"),
    Field("destination", "string"),
    Field("message_id", "string"),
    Field("session_id", "string"),
    Field("partition_key", "string"),
    Field("partition_key_effective", "string"),
    Field("partition_key_source", "string"),
    Field("verdict", "string"),
    Field("reason", "string"),
    Field("body_size", "int"),
    Field("body_sha256", "string"),
    Field("message_bytes", "long"),
    Field("time_to_live_ticks", "long"),
    Field("scheduled_enqueue_time", "timestamp"),
    Field("replay_order", "int"),
    Field("group_size", "long"),
    Field("group_spread", "boolean"),
    Field("group_span_seconds", "double"),
    Field("batch_id", "string"),
    Field("batch_position", "long"),
    Field("outcome", "string"),
    Field("detail", "string"),
    # where the message was read (null in a table that lacks the columns)
    Field("source", "string"),
    Field("source_kind", "string"),
    Field("source_entity", "string"),
    Field("dead_letter_reason", "string"),
    Field("dead_letter_description", "string"),
    Field("dead_letter_error_source", "string"),
    # what a repair changed in the message: "set NAME; unset NAME" (names, never values)
    Field("repaired", "string"),
    Field("job_run_id", "string"),  # the platform's job run that planned it (null: none)
)

#: Audit columns taken from a planned row under another name (the rest keep theirs).
AUDIT_FROM_PLANNED: Final = {
    "backlog_enqueued_time": "enqueued_time",
    "session_id": "original_session_id",
    "time_to_live_ticks": "original_time_to_live_ticks",
    "scheduled_enqueue_time": "original_scheduled_enqueue_time",
}

#: The run ledger: one row per run and status change.
RUNS: Final = (
    Field("run_id", "string"),
    Field("status", "string"),
    Field("recorded_at", "timestamp"),
    Field("started_at", "timestamp"),
    Field("finished_at", "timestamp"),
    Field("config_fingerprint", "string"),
    Field("counts", "map<string,long>"),
    Field("operations", "map<string,long>"),
    Field("timings", "map<string,double>"),
    Field("detail", "string"),
    Field("credits_per_replayed_message", "double"),
    Field("source", "string"),  # null: a backlog run
    # a run drained in waves: the wave a row records (null: a run of one wave)
    # and its watermark (null: the wave took every queue to its end)
    Field("wave", "long"),
    Field("watermark", "timestamp"),
    # the run's repair, the operator's words as a JSON list (null: none)
    Field("repair", "string"),
    Field("job_run_id", "string"),  # the platform's job run that wrote the row (null: none)
)

#: The lease table's rows (the lease itself lives in its commits' metadata).
LEASE: Final = (
    Field("holder", "string"),
    Field("action", "string"),
    Field("recorded_at", "timestamp"),
    Field("expires_at", "timestamp"),
)

#: What the replay returns per message.
REPLAY_RESULT: Final = (
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
    Field("outcome", "string"),
    Field("detail", "string"),
    Field("transfers", "int"),
    Field("busy_retries", "int"),
)

#: What the settle returns per message (``requests``: settlement requests, each counted
#: on the first message it settled or gave back).
SETTLE_RESULT: Final = (
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
    Field("outcome", "string"),
    Field("detail", "string"),
    Field("received", "int"),
    Field("abandoned", "int"),
    Field("requests", "int"),
)

#: What the settle is told to do per message.
SETTLE_ACTION: Final = (
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
    Field("action", "string"),
    Field("reason", "string"),
    Field("verdict", "string"),
)

#: One entity of a primary namespace and the settings the reconcile uses.
DESTINATIONS: Final = (
    Field("primary", "string"),
    Field("destination", "string"),
    Field("exists", "boolean"),
    Field("requires_duplicate_detection", "boolean"),
    Field("requires_session", "boolean"),
    Field("max_message_bytes", "long"),
    Field("partitioned", "boolean"),
    Field("duplicate_detection_window_seconds", "double"),
)

#: What earlier runs replayed (for duplicates across runs).
REPLAYED: Final = (
    Field("primary", "string"),
    Field("destination", "string"),
    Field("message_id", "string"),
    Field("body_sha256", "string"),
)

#: Messages whose earlier send is unknown.
MESSAGE_KEY: Final = (
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
)

#: The batch plan's answer per replayable message (:mod:`syphon.job.plan.batches`).
PACKED: Final = (
    Field("backlog_queue", "string"),
    Field("sequence_number", "long"),
    Field("_bytes", "long"),
    Field("_batch_no", "long"),
    Field("batch_position", "long"),
    Field("_rejected", "string"),
)

#: A destination: the primary namespace and the entity path in it.
DESTINATION_KEY: Final = ("primary", "destination")
#: A message's place in the backlog (unique within a snapshot).
PLACE: Final = ("backlog_queue", "sequence_number")
#: The columns that rebuild a message (:func:`syphon.core.rebuild.rebuild`): the message as
#: the backlog holds it, what the envelope restores, and what the batch's envelope
#: carries (the replay builds from them, the batch plan measures with them).
MESSAGE_COLUMNS: Final = (
    "encoded",
    "message_id",
    "partition_key",
    "original_session_id",
    "original_time_to_live_ticks",
    "original_scheduled_enqueue_time",
)
