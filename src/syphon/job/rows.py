"""Spark's values as plain Python ones: pandas cells (in ``mapInPandas`` and
``applyInPandas`` tasks), and the timestamps Spark hands back to the driver; and the
driver's rows as the Arrow tables Spark takes from it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from syphon.core.render import arrow_schema
from syphon.core.schema import Field


def plain_cell(value: Any) -> Any:
    """A pandas cell as a plain Python value: NaN/NaT/NA become None, whole floats of
    nullable long columns become ints, Timestamps become datetimes."""
    import pandas as pd  # type: ignore[import-untyped]

    if value is None or isinstance(value, (bytes, bytearray, dict, list, tuple, str)):
        return value
    if pd.isna(value):
        return None
    if isinstance(value, pd.Timestamp):
        return value.to_pydatetime()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def utc(value: datetime) -> datetime:
    """A timestamp Spark handed back, in UTC: Spark gives naive times in the session's
    (the process's) local time."""
    if value.tzinfo is None:
        value = value.astimezone()  # naive = local time
    return value.astimezone(timezone.utc)


def arrow_rows(rows: Sequence[Sequence[Any]], fields: Sequence[Field]) -> Any:
    """Rows (each its values in the ``fields``' order) as a ``pyarrow.Table`` of their
    schema."""
    import pyarrow as pa  # type: ignore[import-untyped]

    schema = arrow_schema(fields)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(fields)
    arrays = [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)
