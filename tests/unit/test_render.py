"""syphon renders its schemas for Arrow itself, the same way for its own notation and for a
Spark schema, and the same way as the Spark it runs on exchanges Arrow with Python."""

from __future__ import annotations

import inspect

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from syphon.core import schema
from syphon.core.render import arrow_of, arrow_schema, arrow_schema_of, spark_schema

SCHEMAS = {
    name: value
    for name, value in vars(schema).items()
    if isinstance(value, tuple) and value and all(isinstance(f, schema.Field) for f in value)
}


def test_every_table_schema_is_found() -> None:
    assert {"SNAPSHOT", "AUDIT", "RUNS", "LEASE", "TYPED_VALUE"} <= set(SCHEMAS)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_schema_renders_to_the_same_arrow_from_its_fields_and_from_spark(name: str) -> None:
    fields = SCHEMAS[name]
    assert arrow_schema(fields) == arrow_schema_of(spark_schema(fields))
    assert arrow_schema(fields).names == list(schema.names(fields))


def _spark_own(struct: T.StructType) -> pa.Schema:
    """The running PySpark's own conversion, as a cross-check only (its signature differs
    between releases: 4.0 has no ``timezone`` and always says UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(struct, timezone="UTC")
    return to_arrow_schema(struct)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_schema_renders_as_the_running_spark_renders_it(name: str) -> None:
    struct = spark_schema(SCHEMAS[name])
    assert arrow_schema_of(struct).equals(_spark_own(struct), check_metadata=False)


def test_the_properties_map_keeps_its_values_non_null() -> None:
    arrow = arrow_schema(schema.SNAPSHOT).field("application_properties").type
    assert isinstance(arrow, pa.MapType)
    assert not arrow.item_field.nullable
    assert not arrow.key_field.nullable
    assert arrow.item_type.names == list(schema.names(schema.TYPED_VALUE))


def test_nested_and_other_spark_types_render() -> None:
    struct = T.StructType(
        [
            T.StructField("day", T.DateType()),
            T.StructField("local", T.TimestampNTZType()),
            T.StructField("tags", T.ArrayType(T.StringType(), containsNull=False)),
        ]
    )
    arrow = arrow_schema_of(struct)
    assert arrow.field("day").type == pa.date32()
    assert arrow.field("local").type == pa.timestamp("us")
    assert arrow.field("tags").type == pa.list_(pa.field("element", pa.string(), False))
    assert arrow_schema_of(struct).equals(_spark_own(struct), check_metadata=False)


def test_a_type_syphon_does_not_render_is_named() -> None:
    with pytest.raises(ValueError, match="decimal"):
        arrow_of(T.DecimalType(10, 2))
