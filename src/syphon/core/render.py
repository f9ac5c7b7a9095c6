"""A schema of :mod:`syphon.core.schema` rendered for Spark or for Arrow.

Both renderings are syphon's own: no PySpark internal converts between them, because
those helpers' signatures move between Spark releases (``to_arrow_schema`` took a
``timezone`` only after 4.0). :func:`arrow_schema_of` turns a Spark schema into Arrow
the way Spark's Arrow exchange expects it (timestamps in microseconds, UTC; a map's keys
never null), for the types syphon's tables and tasks use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from syphon.core.schema import TYPED_VALUE, Field

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

_SPARK_SIMPLE = {
    "string": "StringType",
    "long": "LongType",
    "int": "IntegerType",
    "double": "DoubleType",
    "boolean": "BooleanType",
    "binary": "BinaryType",
    "timestamp": "TimestampType",
}


def spark_type(name: str) -> DataType:
    """The Spark type of a type name."""
    from pyspark.sql import types as T

    if name in _SPARK_SIMPLE:
        kind: Any = getattr(T, _SPARK_SIMPLE[name])
        return kind()  # type: ignore[no-any-return]
    if name == "properties":
        return T.MapType(T.StringType(), spark_schema(TYPED_VALUE), valueContainsNull=False)
    if name.startswith("map<string,") and name.endswith(">"):
        return T.MapType(T.StringType(), spark_type(name[len("map<string,") : -1]))
    raise ValueError(f"not a schema type: {name}")


def cast_type(name: str) -> str | DataType:
    """``Column.cast``'s argument: a simple type's name (one py4j call), else the type."""
    return name if name in _SPARK_SIMPLE else spark_type(name)


def spark_schema(fields: Iterable[Field]) -> StructType:
    """A schema as a Spark ``StructType``."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f.name, spark_type(f.type), f.nullable) for f in fields])


def _arrow_simple(name: str) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    return {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "binary": pa.binary(),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }.get(name)


def arrow_type(name: str) -> Any:
    """The Arrow type of a type name (timestamps in microseconds, UTC, as Delta stores
    them)."""
    import pyarrow as pa

    simple = _arrow_simple(name)
    if simple is not None:
        return simple
    if name == "properties":
        value = pa.field("value", arrow_schema_type(TYPED_VALUE), nullable=False)
        return pa.map_(pa.field("key", pa.string(), nullable=False), value)
    if name.startswith("map<string,") and name.endswith(">"):
        return pa.map_(pa.string(), arrow_type(name[len("map<string,") : -1]))
    raise ValueError(f"not an Arrow schema type: {name}")


def arrow_schema_type(fields: Iterable[Field]) -> Any:
    """A schema as an Arrow struct type (a nested record)."""
    import pyarrow as pa

    return pa.struct([pa.field(f.name, arrow_type(f.type), f.nullable) for f in fields])


def arrow_schema(fields: Iterable[Field]) -> Any:
    """A schema as a ``pyarrow.Schema``."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, arrow_type(f.type), f.nullable) for f in fields])


def arrow_of(dt: DataType) -> Any:
    """The Arrow type of a Spark type, as Spark exchanges it with Python's Arrow tasks."""
    import pyarrow as pa
    from pyspark.sql import types as T

    for name, kind in _SPARK_SIMPLE.items():
        if type(dt) is getattr(T, kind):
            return _arrow_simple(name)
    if isinstance(dt, T.TimestampNTZType):
        return pa.timestamp("us")
    if isinstance(dt, T.DateType):
        return pa.date32()
    if isinstance(dt, T.ArrayType):
        return pa.list_(pa.field("element", arrow_of(dt.elementType), dt.containsNull))
    if isinstance(dt, T.MapType):
        key = pa.field("key", arrow_of(dt.keyType), nullable=False)
        return pa.map_(key, pa.field("value", arrow_of(dt.valueType), dt.valueContainsNull))
    if isinstance(dt, T.StructType):
        return pa.struct([pa.field(f.name, arrow_of(f.dataType), f.nullable) for f in dt])
    raise ValueError(f"no Arrow type for Spark's {dt.simpleString()}")


def arrow_schema_of(schema: StructType) -> Any:
    """A Spark schema as a ``pyarrow.Schema`` (see :func:`arrow_of`)."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, arrow_of(f.dataType), f.nullable) for f in schema])


def with_columns_of(frame: DataFrame, fields: Iterable[Field]) -> DataFrame:
    """``frame`` with the columns of ``fields`` it lacks added as nulls of their type (a
    table whose schema has fewer columns than syphon's)."""
    from pyspark.sql import functions as F

    have = {c.lower() for c in frame.columns}
    for f in fields:
        if f.name.lower() not in have:
            frame = frame.withColumn(f.name, F.lit(None).cast(cast_type(f.type)))
    return frame
