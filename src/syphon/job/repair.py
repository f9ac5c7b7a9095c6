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
from syphon.core.schema import SNAPSHOT, spark_schema
from syphon.job.restore import Redrive, restore
from syphon.job.selection import with_views

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
    from pyspark.sql import functions as F

    empty = with_views(restore(spark.createDataFrame([], spark_schema(SNAPSHOT)), redrive))
    types: dict[str, str] = {}
    for change in repair.changes:
        if change.expression is None:
            continue
        try:
            kind = empty.select(F.expr(change.expression)).schema[0].dataType
        except Exception as exc:  # Spark's parse and analysis errors
            words = str(exc).strip()
            first = words.splitlines()[0] if words else type(exc).__name__
            raise RepairError(f"--set {change.name}={change.expression}: {first}") from None
        types[change.name] = amqp_type(change, kind.simpleString())
    return types
