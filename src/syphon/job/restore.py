"""Restore: what a snapshot row's message was before it was parked, and where it goes.

A backlog message's destination and envelope (session id, time to live, schedule,
application properties) come from the aliases the paired-namespace sender wrote
(:mod:`syphon.core.envelope`); a message read from a primary's own entities (a
dead-letter source) or from another namespace's (a namespace source) is its own
envelope, and goes to its entity (or the entity's target) in the primary of a
:class:`Redrive`. Both add the audit's ``source_entity`` and ``dead_letter_*``
columns. Pure DataFrame transforms; the reconcile (:mod:`syphon.job.plan.reconcile`) judges
the restored rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from syphon.core.envelope import SENDER_ID, SENDER_SEQUENCE, restore_envelope_col
from syphon.core.naming import (
    backlog_primary_col,
    entity_of_dead_letter_col,
    is_dead_letter_col,
)
from syphon.core.render import spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.core.timespan import TICKS_PER_SECOND
from syphon.job.selection import property_text, with_views

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType


@dataclass(frozen=True)
class Redrive:
    """Where a dead-letter or namespace source's messages go: into ``namespace`` (a
    primary), each to the entity it was read from (a dead-letter queue's messages: to the
    queue's entity) or to that entity's target."""

    namespace: str
    targets: Mapping[str, str] = field(default_factory=dict)


def restore(snapshot: DataFrame, redrive: Redrive | None = None) -> DataFrame:
    """Adds the restored envelope to snapshot rows: a backlog message's from its aliases,
    or (``redrive``) a message's own (:func:`restore_redriven`). Either way it gains the
    audit's ``source_entity`` and ``dead_letter_*`` columns."""
    from pyspark.sql import functions as F

    if redrive is not None:
        return restore_redriven(snapshot, redrive)
    env = restore_envelope_col(F.col("application_properties"), F.col("property_problem"))
    none = F.lit(None).cast("string")
    sender = F.element_at(F.col("application_properties"), F.lit(SENDER_ID))
    copy = F.element_at(F.col("application_properties"), F.lit(SENDER_SEQUENCE))
    # one projection (a withColumn each would analyse the growing plan once per column:
    # a second of every wave's planning)
    return (
        snapshot.withColumn("_env", env)
        .withColumns(
            {
                "primary": backlog_primary_col(F.col("backlog_queue")),
                "destination": F.col("_env.destination"),
                "original_session_id": F.col("_env.session_id"),
                "original_time_to_live_ticks": F.col("_env.time_to_live_ticks"),
                "original_scheduled_enqueue_time": F.col("_env.scheduled_enqueue_time_utc"),
                "original_application_properties": F.col("_env.application_properties"),
                "envelope_reason": F.col("_env.reason"),
                "original_enqueued_time": F.col("enqueued_time"),
                # syphon's sender's stamp, which orders a key's copies in one millisecond
                "sender_id": F.when(sender["kind"] == "string", sender["string"]),
                "sender_sequence": F.when(copy["kind"] == "int", copy["int"]).cast("long"),
                "source_entity": F.col("backlog_queue"),
                "dead_letter_reason": none,
                "dead_letter_description": none,
                "dead_letter_error_source": none,
            }
        )
        .drop("_env")
    )


def restore_redriven(snapshot: DataFrame, redrive: Redrive) -> DataFrame:
    """Restores messages read from a primary's (or an old namespace's) own entities: each
    goes to the entity it was read from (``source_entity``: a dead-letter queue's entity)
    or that entity's target in ``redrive.namespace``, with its own session id and its
    properties (a dead-lettered message's reason and description among them, for
    selections and the audit; the replay sends it without them).

    An active message keeps its time to live and its scheduled time, counted from its
    first enqueue, so one that has run out is ``expired``. A dead-lettered message's are
    not sent again and never expire it here: its time to live was counted from its first
    enqueue (and ran out for many of them, which is why they were dead-lettered); the
    re-driven message takes its destination's default, and its scheduled time has passed.
    A property map the snapshot could not read makes it ``invalid`` with that reason, as
    for a backlog message."""
    from pyspark.sql import functions as F

    in_dlq = is_dead_letter_col(F.col("backlog_queue"))
    entity = entity_of_dead_letter_col(F.col("backlog_queue"))
    destination = entity
    if redrive.targets:
        pairs = [F.lit(x) for k, v in sorted(redrive.targets.items()) for x in (k, v)]
        destination = F.coalesce(F.element_at(F.create_map(*pairs), entity), entity)

    def dead_letter_property(name: str) -> Column:
        value = F.element_at(F.col("application_properties"), F.lit(name))
        return F.when(in_dlq, property_text(value))

    ttl_ticks = F.col("time_to_live_ms") * (TICKS_PER_SECOND // 1000)
    scheduled = F.when(~in_dlq, F.col("scheduled_enqueue_time")).cast("timestamp")
    return snapshot.withColumns(
        {
            "primary": F.lit(redrive.namespace),
            "destination": destination,
            "original_session_id": F.col("session_id"),
            "original_time_to_live_ticks": F.when(~in_dlq, ttl_ticks).cast("long"),
            "original_scheduled_enqueue_time": scheduled,
            # a dead letter's reason and description stay for selections (--where); the
            # replay leaves them out (syphon.core.rebuild.dropped_properties)
            "original_application_properties": F.col("application_properties"),
            "envelope_reason": F.col("property_problem"),
            "original_enqueued_time": F.col("enqueued_time"),
            "sender_id": F.lit(None).cast("string"),  # a message of its own: no stamp
            "sender_sequence": F.lit(None).cast("long"),
            "source_entity": entity,
            "dead_letter_reason": dead_letter_property("DeadLetterReason"),
            "dead_letter_description": dead_letter_property("DeadLetterErrorDescription"),
            "dead_letter_error_source": F.when(in_dlq, F.col("dead_letter_source")),
        }
    )


def expression_type(
    spark: SparkSession, expression: str, redrive: Redrive | None = None
) -> DataType:
    """The Spark type an operator's expression (a ``--where``, a ``--set``) gives over
    restored rows with the views they see (:func:`syphon.job.selection.with_views`),
    judged on an empty snapshot: nothing is read.

    Raises:
        ValueError: it does not parse, or names a column that does not exist (Spark's
            own words, their first line).
    """
    from pyspark.sql import functions as F

    empty = with_views(restore(spark.createDataFrame([], spark_schema(SNAPSHOT)), redrive))
    try:
        return empty.select(F.expr(expression)).schema[0].dataType
    except Exception as exc:  # Spark's parse and analysis errors
        words = str(exc).strip()
        raise ValueError(words.splitlines()[0] if words else type(exc).__name__) from None
