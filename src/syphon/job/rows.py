"""Spark's values as plain Python ones: pandas cells (in ``mapInPandas`` and
``applyInPandas`` tasks), and the timestamps Spark hands back to the driver."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


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
