"""Reconcile: pure DataFrame transforms from a snapshot to verdicts and replay order.

Every snapshot row gets exactly one verdict, in this order of precedence:

0. ``unselected`` — left out by the operator's selection (reason ``not_selected``,
   :mod:`syphon.core.selection`); only when a run has one;
1. ``ping`` — content type ``application/vnd.ms-servicebus-ping`` (nothing to replay);
2. ``invalid`` — with a machine-readable reason: the envelope's (missing or malformed
   aliases, property key problems, bytes that are not an AMQP message),
   ``message_id_too_long`` and ``reply_to_session_id_too_long`` (over the service's 128
   characters), ``destination_unknown`` (the destination does not exist, when known),
   ``partition_key_differs_from_session_id`` and the other partition-key reasons,
   ``too_large`` (the replayed message exceeds the destination's limit),
   ``not_sendable`` (the message cannot be rebuilt from its bytes);
3. ``expired`` — the original TTL has passed, counted from the original enqueue time
   (the backlog copy's enqueue time: the sender wrote it when the original was sent);
4. ``duplicate`` — the same destination and MessageId with the same body hash was seen
   earlier in this snapshot (``duplicate_in_snapshot``) or replayed by an earlier run
   (``already_replayed``);
5. ``conflict`` — the same destination and MessageId with a different body
   (``message_id_reused_in_snapshot`` or ``message_id_reused_after_replay``);
6. ``replay``.

A run that discards (:mod:`syphon.core.discard`) then turns what it takes into
``discarded``: the duplicates (keeping their reason), or every selected message (reason
``operator_selected``); the operator's reason is the row's ``detail``.

"Earlier" is the replay order: original enqueue time, then backlog queue, then sequence
number. Messages without a MessageId are never duplicates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from syphon.core.discard import DUPLICATES, OPERATOR_SELECTED, Discard
from syphon.core.envelope import PING_CONTENT_TYPE
from syphon.core.partitioning import effective_partition_key_col
from syphon.core.schema import (
    DESTINATION_KEY,
    DESTINATIONS,
    MESSAGE_COLUMNS,
    ORDER_COLUMNS,
    Verdict,
    names,
)
from syphon.core.selection import NOT_SELECTED, Selection
from syphon.core.sizing import ENVELOPE_RESERVE
from syphon.core.timespan import TICKS_PER_SECOND
from syphon.job.batches import plan_batches
from syphon.job.restore import Redrive, restore
from syphon.job.selection import SELECTED, select

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The reason of a replay the operator asked for although an earlier run replayed it.
RESEND_ALLOWED = "resend_allowed"

#: The service refuses a MessageId or a ReplyToSessionId longer than 128 characters.
_ID_LENGTH = 128


def classify(
    restored: DataFrame,
    now: Column,
    destinations: DataFrame | None = None,
    replayed: DataFrame | None = None,
    default_max_message_bytes: int = 256 * 1024,
    listed_primaries: tuple[str, ...] = (),
    allow_resend: tuple[str, ...] = (),
) -> DataFrame:
    """Gives every restored row its verdict, reason and effective partition key.

    Args:
        restored: the output of :func:`restore`.
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
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    df = restored
    if destinations is not None:
        known = destinations.select(*names(DESTINATIONS))
        known = known.withColumnRenamed("primary", "_k_primary").withColumnRenamed(
            "destination", "_k_dest"
        )
        df = df.join(
            known,
            (F.col("primary") == F.col("_k_primary")) & (F.col("destination") == F.col("_k_dest")),
            "left",
        ).drop("_k_primary", "_k_dest")
    else:
        unknown = {"exists": "boolean", "requires_duplicate_detection": "boolean",
                   "requires_session": "boolean", "max_message_bytes": "long",
                   "partitioned": "boolean"}  # fmt: skip
        df = df.withColumns({name: F.lit(None).cast(kind) for name, kind in unknown.items()})

    # columns that do not depend on each other are added by one projection: each
    # withColumn analyses the plan so far again (a second of every wave's planning)
    key = effective_partition_key_col(
        F.col("original_session_id"),
        F.col("partition_key"),
        F.col("message_id"),
        F.col("requires_duplicate_detection"),
        F.col("requires_session"),
    )
    keyed: dict[str, Column] = {"_key": key}
    if listed_primaries:
        missing = F.col("exists").isNull() & F.col("primary").isin(*listed_primaries)
        keyed["exists"] = F.when(missing, F.lit(False)).otherwise(F.col("exists"))
    df = df.withColumns(keyed)
    # the room a batch has for messages: the service measures the whole batch, the
    # envelope the SDK copies from the first message included
    limit = F.coalesce(F.col("max_message_bytes"), F.lit(default_max_message_bytes)) - F.lit(
        ENVELOPE_RESERVE
    )
    invalid_reason = F.coalesce(
        F.col("envelope_reason"),
        F.when(F.char_length("message_id") > _ID_LENGTH, F.lit("message_id_too_long")),
        F.when(
            F.char_length("reply_to_session_id") > _ID_LENGTH,
            F.lit("reply_to_session_id_too_long"),
        ),
        F.when(F.col("exists") == F.lit(False), F.lit("destination_unknown")),
        F.col("_key.reason"),
        F.when(F.col("body_size") > limit, F.lit("too_large")),
    )
    ttl_seconds = F.col("original_time_to_live_ticks") / F.lit(TICKS_PER_SECOND)
    expires = F.col("original_enqueued_time") + F.make_dt_interval(secs=ttl_seconds)
    expired = F.col("original_time_to_live_ticks").isNotNull() & (expires <= now)
    df = df.withColumns({
        "_is_ping": F.coalesce(F.col("content_type") == PING_CONTENT_TYPE, F.lit(False)),
        "_invalid": invalid_reason,
        "_expired": expired,
        "_limit": limit,
        # one key per batch where the service requires it (partitioned entities), where
        # a batch's envelope carries its session, and where the settings are unknown;
        # elsewhere a batch may hold many keys (each key's messages in order)
        "_pack_by_key": F.coalesce(F.col("partitioned"), F.lit(True))
        | F.coalesce(F.col("requires_session"), F.lit(True)),
    })  # fmt: skip
    # the size bound of every message that could be sent; the few over their limit by
    # it carry what rebuilds them, for the exact measure in the batch plan. The
    # messages' bytes go no further: the shuffles below carry metadata only
    sendable = ~F.col("_is_ping") & F.col("_invalid").isNull()
    # duplicates are judged among the messages that could be replayed, in replay order;
    # windows over the whole frame (no join back): the rows travel through one shuffle
    # (messages the selection leaves out are not: a copy left for later must not make
    # the one taken now a duplicate)
    selected = F.col(SELECTED) if SELECTED in df.columns else F.lit(True)
    candidate = selected & sendable & ~F.col("_expired") & F.col("message_id").isNotNull()
    df = df.withColumns({"message_bytes": F.when(sendable, message_bytes_col()),
                         "_candidate": candidate})  # fmt: skip
    over = sendable & (F.col("message_bytes") > F.col("_limit"))
    df = df.withColumn(
        "_measure_input", F.when(over, F.struct(*[F.col(c) for c in MESSAGE_COLUMNS]))
    ).drop("encoded")
    if replayed is not None:
        earlier = replayed.select(
            F.col("primary").alias("_r_primary"),
            F.col("destination").alias("_r_dest"),
            F.col("message_id").alias("_r_id"),
            F.col("body_sha256").alias("_r_hash"),
        ).dropDuplicates(["_r_primary", "_r_dest", "_r_id", "_r_hash"])
        earlier_agg = earlier.groupBy("_r_primary", "_r_dest", "_r_id").agg(
            F.collect_set("_r_hash").alias("_r_hashes")
        )
        df = df.join(
            earlier_agg,
            F.col("_candidate")
            & (F.col("primary") == F.col("_r_primary"))
            & (F.col("destination") == F.col("_r_dest"))
            & (F.col("message_id") == F.col("_r_id")),
            "left",
        ).drop("_r_primary", "_r_dest", "_r_id")
    else:
        df = df.withColumn("_r_hashes", F.lit(None).cast("array<string>"))
    resend = F.lit(False)
    if allow_resend:
        allowed = F.col("message_id").isin(*sorted(set(allow_resend)))
        resend = allowed & F.col("_r_hashes").isNotNull()
        df = df.withColumns({
            "_resend": resend,
            "_r_hashes": F.when(allowed, F.lit(None).cast("array<string>")).otherwise(
                F.col("_r_hashes")),
        })  # fmt: skip
        resend = F.col("_resend")
    by_id = Window.partitionBy(*DESTINATION_KEY, "message_id", "_candidate").orderBy(
        *[F.col(c) for c in ORDER_COLUMNS]
    )
    rank = F.row_number().over(by_id)
    first_hash = F.first("body_sha256").over(by_id)
    same_as_replayed = F.array_contains(F.col("_r_hashes"), F.col("body_sha256"))
    dup_reason = F.when(
        F.col("_candidate"),
        F.when(F.col("_r_hashes").isNotNull() & same_as_replayed, F.lit("already_replayed"))
        .when(F.col("_r_hashes").isNotNull(), F.lit("message_id_reused_after_replay"))
        .when((rank > 1) & (F.col("body_sha256") == first_hash), F.lit("duplicate_in_snapshot"))
        .when(rank > 1, F.lit("message_id_reused_in_snapshot")),
    )
    df = df.withColumn("_dup_reason", dup_reason)

    unselected = ~selected
    verdict = (
        F.when(unselected, F.lit(Verdict.UNSELECTED))
        .when(F.col("_is_ping"), F.lit(Verdict.PING))
        .when(F.col("_invalid").isNotNull(), F.lit(Verdict.INVALID))
        .when(F.col("_expired"), F.lit(Verdict.EXPIRED))
        .when(
            F.col("_dup_reason").isin("already_replayed", "duplicate_in_snapshot"),
            F.lit(Verdict.DUPLICATE),
        )
        .when(F.col("_dup_reason").isNotNull(), F.lit(Verdict.CONFLICT))
        .otherwise(F.lit(Verdict.REPLAY))
    )
    reason = (
        F.when(unselected, F.lit(NOT_SELECTED))
        .when(F.col("_is_ping"), F.lit(None).cast("string"))
        .when(F.col("_invalid").isNotNull(), F.col("_invalid"))
        .when(F.col("_expired"), F.lit("time_to_live_passed"))
        .otherwise(F.coalesce(F.col("_dup_reason"), F.when(resend, F.lit(RESEND_ALLOWED))))
    )
    return (
        df.withColumns(
            {
                "verdict": verdict,
                "reason": reason,
                "partition_key_effective": F.col("_key.key"),
                "partition_key_source": F.col("_key.source"),
            }
        )
        .drop("_key", "_is_ping", "_invalid", "_expired", "_dup_reason", "_candidate", "_r_hashes")
        .drop(SELECTED, "_resend")
    )


def with_discards(classified: DataFrame, discard: Discard | None) -> DataFrame:
    """Classified rows with the verdict ``discarded`` for what ``discard`` takes, and a
    ``detail`` column: the operator's reason on a discarded row, else null."""
    from pyspark.sql import functions as F

    detail = F.lit(None).cast("string")
    if discard is None:
        return classified.withColumn("detail", detail)
    verdict = F.col("verdict")
    if discard.what == DUPLICATES:
        taken = verdict == Verdict.DUPLICATE
        reason = F.col("reason")  # why it is a duplicate
    else:
        taken = verdict != Verdict.UNSELECTED
        reason = F.lit(OPERATOR_SELECTED)
    return (
        classified.withColumn("_discard", taken)
        .withColumn(
            "verdict", F.when(F.col("_discard"), F.lit(Verdict.DISCARDED)).otherwise(verdict)
        )
        .withColumn("reason", F.when(F.col("_discard"), reason).otherwise(F.col("reason")))
        .withColumn("detail", F.when(F.col("_discard"), F.lit(discard.reason)).otherwise(detail))
        .drop("_discard")
    )


def order_groups(classified: DataFrame) -> DataFrame:
    """Adds the replay order within (destination, partition key), the group's size,
    whether it is spread over several backlog queues, and its time span (seconds).

    Keyless messages of a destination form one group (their order is kept, though the
    service does not promise it to receivers). Windows over the whole frame, with the
    verdict in the partition: no join back.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    replay = F.col("verdict") == Verdict.REPLAY
    group = [*DESTINATION_KEY, "partition_key_effective", "_in_replay"]
    ordered = Window.partitionBy(*group).orderBy(*[F.col(c) for c in ORDER_COLUMNS])
    whole = Window.partitionBy(*group)

    def only_replay(value: Column) -> Column:
        return F.when(F.col("_in_replay"), value)

    span = (F.max("original_enqueued_time").over(whole).cast("double")
            - F.min("original_enqueued_time").over(whole).cast("double"))  # fmt: skip
    return (
        classified.withColumn("_in_replay", replay)
        .withColumns(
            {
                "replay_order": only_replay(F.row_number().over(ordered)),
                "group_size": only_replay(F.count(F.lit(1)).over(whole)),
                "group_spread": only_replay(
                    F.min("backlog_queue").over(whole) != F.max("backlog_queue").over(whole)
                ),
                "group_span_seconds": only_replay(span),
            }
        )
        .drop("_in_replay")
    )


def message_bytes_col() -> Column:
    """The batch-size bound of a classified row's replayed message
    (:mod:`syphon.core.sizing`)."""
    from pyspark.sql import functions as F

    from syphon.core.sizing import message_bytes_bound_col

    return message_bytes_bound_col(
        F.col("encoded"), F.col("original_session_id"), F.col("original_time_to_live_ticks"),
        F.col("original_scheduled_enqueue_time"),
    )  # fmt: skip


def reconcile_snapshot(
    snapshot: DataFrame,
    now: Column,
    destinations: DataFrame | None = None,
    replayed: DataFrame | None = None,
    default_max_message_bytes: int = 256 * 1024,
    listed_primaries: tuple[str, ...] = (),
    selection: Selection | None = None,
    redrive: Redrive | None = None,
    allow_resend: tuple[str, ...] = (),
    discard: Discard | None = None,
) -> DataFrame:
    """The whole reconcile of a snapshot: :func:`restore` (of dead letters with
    ``redrive``), the ``selection``
    (:mod:`syphon.job.selection`; a message it leaves out is ``unselected``),
    :func:`classify`, the ``discard`` (:func:`with_discards`), :func:`order_groups` and
    :func:`plan_batches` (the other arguments as :func:`classify`'s). The messages'
    bytes are dropped by the classify once measured, the property maps after it, so the
    shuffles carry the audit's columns only."""
    restored = select(restore(snapshot, redrive), selection).drop("application_properties")
    classified = classify(
        restored,
        now,
        destinations,
        replayed,
        default_max_message_bytes,
        listed_primaries,
        allow_resend,
    ).drop("original_application_properties")
    classified = with_discards(classified, discard)
    # materialized once: the batch plan reads it twice (its groups, and the join back)
    ordered = order_groups(classified).localCheckpoint(eager=True)
    return plan_batches(ordered)
