"""Repair on re-drive in Spark: a run's ``--set`` expressions judged against the restored
snapshot's columns before anything is peeked (:func:`check_repair`), as the selection's
``where`` is (:func:`syphon.job.plan.planning.check_selection`); then computed per message
(:func:`with_repair`), by the plan (which judges and audits them) and again by the
replay from the same snapshot (which sends them).

An expression sees what ``--where`` sees (:mod:`syphon.job.selection`): every column of a
restored row and the ``properties`` / ``typed_properties`` views of the application
properties. What it gives decides the AMQP type its property is sent as, unless the
change names one (:func:`syphon.core.repair.amqp_type`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from syphon.core.repair import Change, Repair, RepairError, amqp_type
from syphon.core.repaired import repair_message
from syphon.job.restore import Redrive, expression_type
from syphon.job.selection import with_views

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: The restored column that holds each system property (an unset changes a message
#: only where it is not null).
SYSTEM_COLUMNS = {
    "subject": "subject",
    "to": "to",
    "reply_to": "reply_to",
    "content_type": "content_type",
    "correlation_id": "correlation_id",
    "time_to_live": "original_time_to_live_ticks",
    "scheduled_enqueue_time": "original_scheduled_enqueue_time",
}

#: The column :func:`with_repair` adds: :class:`syphon.core.repaired.Repaired`.
REPAIR = "_repair"
_REPAIRED_TYPE = (
    "struct<application:binary,system:binary,error:string,added:int,names:array<string>>"
)


def check_repair(
    spark: SparkSession, repair: Repair | None, redrive: Redrive | None = None
) -> Repair | None:
    """``repair`` with what each ``--set`` encodes its value as, judged on an empty
    snapshot: an expression that does not parse or names a column that does not exist
    fails before anything is peeked.

    Raises:
        RepairError: with Spark's own words (their first line), or a type no property
            matches on its own.
    """
    if repair is None:
        return None
    types: dict[str, str] = {}
    for change in repair.changes:
        if change.expression is None:
            continue
        try:
            kind = expression_type(spark, change.expression, redrive)
        except ValueError as exc:
            raise RepairError(
                f"--set {change.name}={change.expression}: {exc}",
                fix="correct the expression: Spark SQL over the snapshot's columns (the "
                'README\'s "Repair before re-drive" says which), quoting strings '
                "with '...'",
            ) from None
        types[change.name] = amqp_type(change, kind.simpleString())
    return repair.resolved(types)


def with_repair(restored: DataFrame, repair: Repair | None) -> DataFrame:
    """Restored rows with :data:`REPAIR`: what ``repair`` (checked by
    :func:`check_repair`) does to each message; none without a repair."""
    if repair is None:
        return restored
    from pyspark.sql import functions as F

    viewed = with_views(restored)
    repairer = _Repairer(repair.changes)
    # a plain Python UDF (a lambda: no type hints for Spark to read as a pandas UDF's)
    repaired = F.udf(lambda *values: repairer(*values), _REPAIRED_TYPE)
    return viewed.withColumn(REPAIR, repaired(*_inputs(repair.changes))).drop(
        "properties", "typed_properties"
    )


def carried_changes(df: DataFrame) -> list[Column]:
    """What rebuilds a repaired message, as the columns ``repair_application`` and
    ``repair_system`` (:func:`syphon.core.repaired.encode_changes`; null without a
    repair): the size measure and the replay read them."""
    from pyspark.sql import functions as F

    if REPAIR not in df.columns:
        return [F.lit(None).cast("binary").alias(f"repair_{p}") for p in ("application", "system")]
    return [F.col(f"{REPAIR}.{p}").alias(f"repair_{p}") for p in ("application", "system")]


def _inputs(changes: Iterable[Change]) -> list[Column]:
    """Per change, what :func:`syphon.core.repaired.repair_message` reads: a set's value,
    or whether the message has the property an unset removes."""
    from pyspark.sql import functions as F

    out = []
    for change in changes:
        if change.expression is not None:
            out.append(F.expr(change.expression))
        elif change.system:
            out.append(F.col(SYSTEM_COLUMNS[change.name]).isNotNull())
        else:
            props = F.col("original_application_properties")
            out.append(F.coalesce(F.map_contains_key(props, change.name), F.lit(False)))
    return out


class _Repairer:
    """The function of the repair's column (pickled to the Python workers)."""

    def __init__(self, changes: tuple[Change, ...]) -> None:
        self.changes = changes

    def __call__(self, *values: Any) -> tuple[Any, ...]:
        done = repair_message(self.changes, values)
        return (done.application, done.system, done.error, done.added, done.names)
