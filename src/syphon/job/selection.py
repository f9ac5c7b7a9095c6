"""A :class:`syphon.core.selection.Selection` as a Spark condition on restored snapshot
rows (:func:`syphon.job.plan.reconcile.restore`); :func:`syphon.job.plan.planning.check_selection`
judges a ``where`` before a run peeks anything.

The ``where`` predicate sees every column of a restored row (``destination``,
``primary``, ``message_id``, ``session_id``, ``partition_key``, ``subject``,
``content_type``, ``correlation_id``, ``to``, ``reply_to``, ``original_enqueued_time``,
``backlog_queue``, ``sequence_number``, ``body_size``, ``source_entity``,
``dead_letter_reason``, ``dead_letter_description``, ``dead_letter_error_source``, …)
and two views of the original application properties: ``properties``, each value as
text (strings as they are, numbers and booleans in Spark's text, times as ISO 8601 UTC),
and ``typed_properties``, each value as its typed struct (``.int``, ``.float``,
``.string``, ``.timestamp``, ``.bool``, ``.kind``, ``.amqp_type``).
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from syphon.core.selection import Selection

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The column a selection is evaluated into (dropped by the classify).
SELECTED = "_selected"


def with_views(restored: DataFrame) -> DataFrame:
    """``restored`` with the ``properties`` and ``typed_properties`` views the ``where``
    predicate reads (see the module docstring)."""
    from pyspark.sql import functions as F

    props = F.col("original_application_properties")
    return restored.withColumn(
        "properties", F.transform_values(props, lambda _key, value: property_text(value))
    ).withColumn("typed_properties", props)


def property_text(value: Column) -> Column:
    """A typed application-property value as text (see the module docstring)."""
    from pyspark.sql import functions as F

    return F.coalesce(
        value["string"],
        value["int"].cast("string"),
        value["float"].cast("string"),
        value["bool"].cast("string"),
        F.date_format(value["timestamp"], "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"),
        value["text"],
    )


def selected_col(selection: Selection) -> Column:
    """True for a row the selection takes, on :func:`with_views` of restored rows (a
    ``where`` that is null for a row leaves it out)."""
    from pyspark.sql import functions as F

    conditions: list[Column] = []
    if selection.destinations:
        wanted = sorted({d.lower() for d in selection.destinations})
        conditions.append(F.lower(F.col("destination")).isin(*wanted))
    if selection.message_ids:
        conditions.append(F.col("message_id").isin(*sorted(set(selection.message_ids))))
    if selection.enqueued_from is not None:
        conditions.append(F.col("original_enqueued_time") >= F.lit(selection.enqueued_from))
    if selection.enqueued_until is not None:
        conditions.append(F.col("original_enqueued_time") < F.lit(selection.enqueued_until))
    if selection.dead_letter_reasons:
        reasons = sorted(set(selection.dead_letter_reasons))
        conditions.append(F.col("dead_letter_reason").isin(*reasons))
    if selection.where is not None:
        conditions.append(F.expr(selection.where))
    if not conditions:
        return F.lit(True)
    return F.coalesce(reduce(lambda a, b: a & b, conditions), F.lit(False))


def select(restored: DataFrame, selection: Selection | None) -> DataFrame:
    """``restored`` with the :data:`SELECTED` column (only when a selection is given)."""
    if selection is None or selection.everything:
        return restored
    viewed = with_views(restored)
    return viewed.withColumn(SELECTED, selected_col(selection)).drop(
        "properties", "typed_properties"
    )
