"""The classify: every restored snapshot row gets exactly one verdict, in this order of
precedence:

0. ``unselected`` — left out by the operator's selection (reason ``not_selected``,
   :mod:`syphon.core.selection`); only when a run has one;
1. ``ping`` — content type ``application/vnd.ms-servicebus-ping`` (nothing to replay);
2. ``invalid`` — with a machine-readable reason: the envelope's (missing or malformed
   aliases, property key problems, bytes that are not an AMQP message),
   ``message_id_too_long`` and ``reply_to_session_id_too_long`` (over the service's 128
   characters), ``destination_unknown`` (the destination does not exist, when known),
   ``partition_key_differs_from_session_id`` and the other partition-key reasons,
   ``repair_invalid`` (a value the operator's repair gives cannot be sent; the row's
   ``detail`` says why), ``too_large`` (the replayed message exceeds the destination's
   limit, a repair's added bytes counted),
   ``not_sendable`` (the message cannot be rebuilt from its bytes);
3. ``expired`` — the original TTL has passed, counted from the original enqueue time
   (the backlog copy's enqueue time: the sender wrote it when the original was sent),
   unless a repair gives the message a TTL of its own, counted from its re-drive;
4. ``duplicate`` — the same destination and MessageId with the same body hash was seen
   earlier in this snapshot (``duplicate_in_snapshot``) or replayed by an earlier run
   (``already_replayed``);
5. ``conflict`` — the same destination and MessageId with a different body
   (``message_id_reused_in_snapshot`` or ``message_id_reused_after_replay``);
6. ``too_soon`` — a dead letter re-driven to the entity that accepted its MessageId
   within that entity's duplicate detection window, which would drop it
   (``duplicate_detection_window``, or ``duplicate_detection_unknown`` when the
   destination's settings are unknown; :mod:`syphon.job.plan.too_soon`); with
   ``--new-message-ids`` it is a ``replay`` under a new id instead (``new_message_id``);
7. ``replay``.

A run that discards then turns what it takes into ``discarded``
(:func:`syphon.job.plan.reconcile.with_discards`).

The verdicts' order is :func:`verdict_rules`; each step of :data:`STEPS` adds the
columns the next ones read. "Earlier" is the replay order: original enqueue time, then
backlog queue, then sequence number. Messages without a MessageId are never duplicates.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from syphon.core.dedupe import NEW_MESSAGE_ID, renamed_bytes_col
from syphon.core.envelope import PING_CONTENT_TYPE
from syphon.core.partitioning import effective_partition_key_col
from syphon.core.render import with_columns_of
from syphon.core.schema import (
    DESTINATION_KEY,
    DESTINATIONS,
    MESSAGE_COLUMNS,
    Verdict,
)
from syphon.core.selection import NOT_SELECTED
from syphon.core.sizing import ENVELOPE_RESERVE
from syphon.core.timespan import TICKS_PER_SECOND
from syphon.job.plan.too_soon import COLUMNS as WINDOW_COLUMNS
from syphon.job.plan.too_soon import detail, renamed, too_soon, with_window
from syphon.job.repair import REPAIR, carried_changes
from syphon.job.selection import SELECTED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The reason of a replay the operator asked for although an earlier run replayed it.
RESEND_ALLOWED = "resend_allowed"

#: The reason of a message whose repaired value cannot be sent (``detail``: why).
REPAIR_INVALID = "repair_invalid"

#: The order of messages within a (destination, partition key) group; in one millisecond,
#: syphon's sender's stamp where it is (``envelope.SENDER_ID``), then the place.
ORDER_COLUMNS = (
    "original_enqueued_time",
    "sender_id",
    "sender_sequence",
    "backlog_queue",
    "sequence_number",
)

#: The reason of an invalid message whose destination the listing did not find.
DESTINATION_UNKNOWN = "destination_unknown"

#: The service refuses a MessageId or a ReplyToSessionId longer than 128 characters.
_ID_LENGTH = 128


@dataclass(frozen=True)
class Against:
    """What the classify judges a snapshot's rows against, besides the rows themselves.

    Attributes:
        now: the run's reference time (a timestamp column or literal).
        destinations: :data:`syphon.core.schema.DESTINATIONS` per primary entity, when the
            management API told them; missing destinations count as unknown settings
            (duplicate detection assumed, existence not checked).
        replayed: :data:`syphon.core.schema.REPLAYED` of earlier runs' replays.
        default_max_message_bytes: the limit when a destination's is unknown.
        listed_primaries: primaries whose every entity is in ``destinations`` (their
            management API listed them all): a destination missing there does not exist.
        allow_resend: MessageIds the operator asks to send again although an earlier
            run replayed them (``--allow-resend``): judged as if never replayed, and a
            replay of one that was is recorded with the reason ``resend_allowed``.
        redrive_window: whether a re-driven dead letter is judged against its
            destination's duplicate detection window (a dead-letter source's: its
            messages go back to the entities that accepted their MessageIds).
        new_message_ids: whether one its window would drop is sent under a new
            MessageId instead of waiting (``--new-message-ids``).
    """

    now: Column
    destinations: DataFrame | None = None
    replayed: DataFrame | None = None
    default_max_message_bytes: int = 256 * 1024
    listed_primaries: tuple[str, ...] = ()
    allow_resend: tuple[str, ...] = ()
    redrive_window: bool = False
    new_message_ids: bool = False


#: A step of the classify: the rows so far, what they are judged against -> the rows with
#: the columns the step adds.
Step = Callable[["DataFrame", Against], "DataFrame"]


def classify(restored: DataFrame, against: Against) -> DataFrame:
    """Gives every restored row (the output of :func:`restore`) its verdict, reason and
    effective partition key: the steps of :data:`STEPS`, in order, each adding the
    columns the next ones read (the ones starting with ``_`` are dropped at the end)."""
    df = restored
    for step in STEPS:
        df = step(df, against)
    return df


def with_destination_settings(df: DataFrame, against: Against) -> DataFrame:
    """The destination's settings (:data:`syphon.core.schema.DESTINATIONS`), null where
    unknown."""
    from pyspark.sql import functions as F

    settings = [f for f in DESTINATIONS if f.name not in DESTINATION_KEY]
    if against.destinations is None:
        return df.withColumns({f.name: F.lit(None).cast(f.type) for f in settings})
    # a listing without a setting (an older one) leaves it unknown
    known = with_columns_of(against.destinations, settings).select(
        *[F.col(k).alias(f"_k_{k}") for k in DESTINATION_KEY], *[f.name for f in settings]
    )
    same = [F.col(k) == F.col(f"_k_{k}") for k in DESTINATION_KEY]
    return df.join(known, reduce(operator.and_, same), "left").drop(
        *[f"_k_{k}" for k in DESTINATION_KEY]
    )


def with_partition_key(df: DataFrame, against: Against) -> DataFrame:
    """The effective partition key (``_key``: key, source, reason) and, for a primary the
    management API listed whole, ``exists`` false for a destination it did not list."""
    from pyspark.sql import functions as F

    # columns that do not depend on each other are added by one projection: each
    # withColumn analyses the plan so far again (a second of every wave's planning)
    added: dict[str, Column] = {
        "_key": effective_partition_key_col(
            F.col("original_session_id"),
            F.col("partition_key"),
            F.col("message_id"),
            F.col("requires_duplicate_detection"),
            F.col("requires_session"),
        )
    }
    if against.listed_primaries:
        missing = F.col("exists").isNull() & F.col("primary").isin(*against.listed_primaries)
        added["exists"] = F.when(missing, F.lit(False)).otherwise(F.col("exists"))
    return df.withColumns(added)


def with_duplicate_window(df: DataFrame, against: Against) -> DataFrame:
    """When a re-driven dead letter's destination would drop it as a duplicate
    (:mod:`syphon.job.plan.too_soon`)."""
    return with_window(df, against.now, against.redrive_window)


def with_checks(df: DataFrame, against: Against) -> DataFrame:
    """What the message is: a ping (``_is_ping``), invalid and why (``_invalid``),
    expired (``_expired``); its size bound (``message_bytes``) against its destination's
    limit (``_limit``), what rebuilds the few over it (``_measure_input``), how its
    batches are packed (``_pack_by_key``), and whether it is a candidate for the
    duplicate checks (``_candidate``). The messages' bytes go no further: the shuffles
    after this step carry metadata only."""
    from pyspark.sql import functions as F

    repaired = REPAIR in df.columns
    # the room a batch has for messages: the service measures the whole batch, the
    # envelope the SDK copies from the first message included
    limit = F.coalesce(
        F.col("max_message_bytes"), F.lit(against.default_max_message_bytes)
    ) - F.lit(ENVELOPE_RESERVE)
    invalid_reason = F.coalesce(
        F.col("envelope_reason"),
        F.when(F.char_length("message_id") > _ID_LENGTH, F.lit("message_id_too_long")),
        F.when(
            F.char_length("reply_to_session_id") > _ID_LENGTH,
            F.lit("reply_to_session_id_too_long"),
        ),
        F.when(F.col("exists") == F.lit(False), F.lit(DESTINATION_UNKNOWN)),
        F.col("_key.reason"),
        *(
            [F.when(F.col(f"{REPAIR}.error").isNotNull(), F.lit(REPAIR_INVALID))]
            if repaired
            else []
        ),
        F.when(F.col("body_size") > limit, F.lit("too_large")),
    )
    ttl_seconds = F.col("original_time_to_live_ticks") / F.lit(TICKS_PER_SECOND)
    expires = F.col("original_enqueued_time") + F.make_dt_interval(secs=ttl_seconds)
    expired = F.col("original_time_to_live_ticks").isNotNull() & (expires <= against.now)
    if repaired:  # a TTL the repair sets or removes counts from the re-drive
        names = F.col(f"{REPAIR}.names")
        own_ttl = F.array_contains(names, "set time_to_live") | F.array_contains(
            names, "unset time_to_live"
        )
        expired = expired & ~F.coalesce(own_ttl, F.lit(False))
    df = df.withColumns(
        {
            "_is_ping": F.coalesce(F.col("content_type") == PING_CONTENT_TYPE, F.lit(False)),
            "_invalid": invalid_reason,
            "_expired": expired,
            "_limit": limit,
            # one key per batch where the service requires it (partitioned entities),
            # where a batch's envelope carries its session, and where the settings are
            # unknown; elsewhere a batch may hold many keys (each key's messages in order)
            "_pack_by_key": F.coalesce(F.col("partitioned"), F.lit(True))
            | F.coalesce(F.col("requires_session"), F.lit(True)),
        }
    )
    # the size bound of every message that could be sent; the few over their limit by
    # it carry what rebuilds them, for the exact measure in the batch plan
    sendable = ~F.col("_is_ping") & F.col("_invalid").isNull()
    # duplicates are judged among the messages that could be replayed (a copy the
    # selection leaves for later must not make the one taken now a duplicate)
    candidate = _selected(df) & sendable & ~F.col("_expired") & F.col("message_id").isNotNull()
    bound = message_bytes_col()
    if repaired:  # the bytes a repair adds
        bound = bound + F.coalesce(F.col(f"{REPAIR}.added"), F.lit(0))
    if against.new_message_ids:  # the bytes a new MessageId may add
        more = renamed_bytes_col(F.col("message_id"))
        bound = bound + F.when(renamed(True), more).otherwise(F.lit(0))
    # what rebuilds the message for the exact measure, a repair's changes included
    rebuilt_from = [*[F.col(c) for c in MESSAGE_COLUMNS], *carried_changes(df)]
    df = df.withColumns({"message_bytes": F.when(sendable, bound), "_candidate": candidate})
    over = sendable & (F.col("message_bytes") > F.col("_limit"))
    return df.withColumn("_measure_input", F.when(over, F.struct(*rebuilt_from))).drop("encoded")


def with_replayed(df: DataFrame, against: Against) -> DataFrame:
    """The body hashes earlier runs replayed under the candidate's destination and
    MessageId (``_r_hashes``; null: never replayed, or a resend the operator allows,
    which ``_resend`` marks)."""
    from pyspark.sql import functions as F

    if against.replayed is not None:
        earlier = against.replayed.select(
            F.col("primary").alias("_r_primary"),
            F.col("destination").alias("_r_dest"),
            F.col("message_id").alias("_r_id"),
            F.col("body_sha256").alias("_r_hash"),
        ).dropDuplicates(["_r_primary", "_r_dest", "_r_id", "_r_hash"])
        hashes = earlier.groupBy("_r_primary", "_r_dest", "_r_id").agg(
            F.collect_set("_r_hash").alias("_r_hashes")
        )
        df = df.join(
            hashes,
            F.col("_candidate")
            & (F.col("primary") == F.col("_r_primary"))
            & (F.col("destination") == F.col("_r_dest"))
            & (F.col("message_id") == F.col("_r_id")),
            "left",
        ).drop("_r_primary", "_r_dest", "_r_id")
    else:
        df = df.withColumn("_r_hashes", F.lit(None).cast("array<string>"))
    if not against.allow_resend:
        return df.withColumn("_resend", F.lit(False))
    allowed = F.col("message_id").isin(*sorted(set(against.allow_resend)))
    return df.withColumns(
        {
            "_resend": allowed & F.col("_r_hashes").isNotNull(),
            "_r_hashes": F.when(allowed, F.lit(None).cast("array<string>")).otherwise(
                F.col("_r_hashes")
            ),
        }
    )


def with_duplicate_reasons(df: DataFrame, against: Against) -> DataFrame:
    """Why a candidate is a duplicate or a conflict (``_dup_reason``): against earlier
    runs' replays, then against the same destination and MessageId earlier in this
    snapshot, in replay order. A window over the whole frame (no join back): the rows
    travel through one shuffle."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_id = Window.partitionBy(*DESTINATION_KEY, "message_id", "_candidate").orderBy(
        *[F.col(c) for c in ORDER_COLUMNS]
    )
    rank = F.row_number().over(by_id)
    first_hash = F.first("body_sha256").over(by_id)
    replayed = F.col("_r_hashes").isNotNull()
    same_as_replayed = F.array_contains(F.col("_r_hashes"), F.col("body_sha256"))
    reason = F.when(
        F.col("_candidate"),
        F.when(replayed & same_as_replayed, F.lit("already_replayed"))
        .when(replayed, F.lit("message_id_reused_after_replay"))
        .when((rank > 1) & (F.col("body_sha256") == first_hash), F.lit("duplicate_in_snapshot"))
        .when(rank > 1, F.lit("message_id_reused_in_snapshot")),
    )
    return df.withColumn("_dup_reason", reason)


def verdict_rules(df: DataFrame, against: Against) -> list[tuple[Column, str, Column]]:
    """The verdicts in their order of precedence (the module docstring's): (when it
    holds, the verdict, its reason). The first that holds decides; a row none holds is
    ``replay``, with the reason ``new_message_id`` for one sent under a new MessageId,
    :data:`RESEND_ALLOWED` for a resend the operator allowed."""
    from pyspark.sql import functions as F

    from syphon.job.plan import too_soon as window

    duplicate = F.col("_dup_reason").isin("already_replayed", "duplicate_in_snapshot")
    return [
        (~_selected(df), Verdict.UNSELECTED, F.lit(NOT_SELECTED)),
        (F.col("_is_ping"), Verdict.PING, F.lit(None).cast("string")),
        (F.col("_invalid").isNotNull(), Verdict.INVALID, F.col("_invalid")),
        (F.col("_expired"), Verdict.EXPIRED, F.lit("time_to_live_passed")),
        (duplicate, Verdict.DUPLICATE, F.col("_dup_reason")),
        (F.col("_dup_reason").isNotNull(), Verdict.CONFLICT, F.col("_dup_reason")),
        (too_soon(against.new_message_ids), Verdict.TOO_SOON, window.reason()),
    ]


def with_verdicts(df: DataFrame, against: Against) -> DataFrame:
    """``verdict``, ``reason`` and ``detail`` by :func:`verdict_rules` (``detail``: what
    :func:`syphon.job.plan.too_soon.detail` gives, else null), the effective partition key
    and its source; the steps' own columns dropped."""
    from pyspark.sql import functions as F

    (holds, name, why), *rest = verdict_rules(df, against)
    verdict, reason = F.when(holds, F.lit(name)), F.when(holds, why)
    for holds, name, why in rest:
        verdict, reason = verdict.when(holds, F.lit(name)), reason.when(holds, why)
    verdict = verdict.otherwise(F.lit(Verdict.REPLAY))
    reason = reason.otherwise(
        F.when(renamed(against.new_message_ids), F.lit(NEW_MESSAGE_ID)).when(
            F.col("_resend"), F.lit(RESEND_ALLOWED)
        )
    )
    done = df.withColumns(
        {
            "verdict": verdict,
            "reason": reason,
            "detail": detail(verdict, against.new_message_ids),
            "partition_key_effective": F.col("_key.key"),
            "partition_key_source": F.col("_key.source"),
        }
    )
    steps_own = ("_key", "_is_ping", "_invalid", "_expired", "_dup_reason", "_candidate")
    return done.drop(*steps_own, *WINDOW_COLUMNS, "_r_hashes", "_resend", SELECTED)


#: The classify, step by step.
STEPS: tuple[Step, ...] = (
    with_destination_settings,
    with_partition_key,
    with_duplicate_window,
    with_checks,
    with_replayed,
    with_duplicate_reasons,
    with_verdicts,
)


def _selected(df: DataFrame) -> Column:
    """Whether the operator's selection takes the row (every row without a selection)."""
    from pyspark.sql import functions as F

    return F.col(SELECTED) if SELECTED in df.columns else F.lit(True)


def message_bytes_col() -> Column:
    """The batch-size bound of a classified row's replayed message
    (:mod:`syphon.core.sizing`)."""
    from pyspark.sql import functions as F

    from syphon.core.sizing import message_bytes_bound_col

    return message_bytes_bound_col(
        F.col("encoded"),
        F.col("original_session_id"),
        F.col("original_time_to_live_ticks"),
        F.col("original_scheduled_enqueue_time"),
    )
