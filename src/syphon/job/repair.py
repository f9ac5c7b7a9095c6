"""Repair on re-drive in Spark: a run's ``--set`` expressions judged against the restored
snapshot's columns before anything is peeked (:func:`check_repair`), as the selection's
``where`` is (:func:`syphon.job.plan.check_selection`).

An expression sees what ``--where`` sees (:mod:`syphon.job.selection`): every column of a
restored row and the ``properties`` / ``typed_properties`` views of the application
properties. What it gives decides the AMQP type its property is sent as, unless the
change names one (:func:`syphon.core.repair.amqp_type`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from syphon.core.repair import Repair, RepairError, amqp_type
from syphon.job.restore import Redrive, expression_type

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def check_repair(
    spark: SparkSession, repair: Repair | None, redrive: Redrive | None = None
) -> dict[str, str]:
    """The AMQP type each ``--set`` sets its property as, by property name, judged on an
    empty snapshot: an expression that does not parse or names a column that does not
    exist fails before anything is peeked.

    Raises:
        RepairError: with Spark's own words (their first line), or a type no property
            matches on its own.
    """
    if repair is None:
        return {}
    types: dict[str, str] = {}
    for change in repair.changes:
        if change.expression is None:
            continue
        try:
            kind = expression_type(spark, change.expression, redrive)
        except ValueError as exc:
            raise RepairError(f"--set {change.name}={change.expression}: {exc}") from None
        types[change.name] = amqp_type(change, kind.simpleString())
    return types
