"""The Spark expressions give the same answers as the Python functions, nulls included."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from support.envelope_cases import EDGE_CASES, REASON_CASES
from support.python_rules import (
    backlog_index_col,
    effective_partition_key,
    restore_from_typed,
    typed_properties,
)
from syphon.core.envelope import (
    ALIASES,
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    PATH,
    restore_envelope_col,
)
from syphon.core.naming import (
    MAX_INDEX,
    backlog_primary_col,
    backlog_queue_path,
    match_backlog_queue_path,
)
from syphon.core.partitioning import effective_partition_key_col
from syphon.core.properties import KEY_DUPLICATE
from syphon.core.render import spark_type
from syphon.core.timespan import TIMESPAN_MAX_TICKS

pytestmark = pytest.mark.spark
spark_settings = settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _micros(value: datetime | None) -> int | None:
    return None if value is None else (value - EPOCH) // timedelta(microseconds=1)


# ------------------------------------------------------------------ backlog paths

path_samples = st.one_of(
    st.builds(
        backlog_queue_path,
        st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{4,48}[A-Za-z0-9]\Z"),
        st.integers(0, MAX_INDEX),
    ),
    st.sampled_from(
        [
            "contoso/X-SERVICEBUS-TRANSFER/2",
            "contoso/x-servicebus-transfer/01",
            "contoso/x-servicebus-transfer/2147483648",
            "contoso/x-servicebus-transfer/1\n",
            "contoso/x-servicebus-transfer/1/x",
            "abc/x-servicebus-transfer/1",
            "orders",
            "",
        ]
    ),
    st.text(max_size=40),
    st.none(),
)


@spark_settings
@given(st.lists(path_samples, min_size=1, max_size=40))
def test_backlog_path_columns_agree_with_python(
    spark: SparkSession, paths: list[str | None]
) -> None:
    rows = [(i, p) for i, p in enumerate(paths)]
    df = spark.createDataFrame(rows, "id int, path string")
    actual = df.select(
        "id",
        backlog_primary_col(F.col("path")).alias("primary"),
        backlog_index_col(F.col("path")).alias("index"),
    )
    parsed = [(i, match_backlog_queue_path(p)) for i, p in rows]
    expected = spark.createDataFrame(
        [(i, q.primary if q else None, q.index if q else None) for i, q in parsed],
        "id int, primary string, index int",
    )
    assert_df_equality(actual, expected, ignore_nullable=True)


# ------------------------------------------------------------------ envelope

raw_values = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(
        [0, -1, 1, 600_000_000, TIMESPAN_MAX_TICKS, TIMESPAN_MAX_TICKS - 1, MAX_TIMESTAMP_MS]
    ),
    st.sampled_from([MAX_TIMESTAMP_MS + 1, MIN_TIMESTAMP_MS, MIN_TIMESTAMP_MS - 1]),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**63, max_value=2**70),
    st.floats(allow_nan=False),
    st.binary(max_size=8),
    st.sampled_from([b"\xff", b"\xc3\x28", b"", b"q" * 261, b"contoso/x-servicebus-transfer/3"]),
    st.text(max_size=12).map(str.encode),
    st.text(max_size=12),
    st.sampled_from(["", "s" * 129, "p" * 261, "contoso/x-servicebus-transfer/0"]),
    st.datetimes(min_value=datetime(1000, 1, 1), timezones=st.just(timezone.utc)),
    st.uuids(),
    st.just(Decimal("1.5")),
)
property_maps = st.dictionaries(
    st.sampled_from([*ALIASES, "k1", "k2"]), raw_values, max_size=6
) | st.builds(lambda v: {PATH: v}, st.text(min_size=1, max_size=12).map(str.encode))


def _typed_rows(maps: list[dict[str, Any]], problems: list[bool]) -> list[tuple[Any, ...]]:
    rows = []
    for i, (raw, dup) in enumerate(zip(maps, problems, strict=True)):
        typed, problem = typed_properties(raw)
        rows.append((i, typed, KEY_DUPLICATE if dup else problem))
    rows.append((len(rows), {}, None))
    return rows


@spark_settings
@given(st.lists(property_maps, min_size=1, max_size=30), st.lists(st.booleans(), max_size=30))
def test_envelope_column_agrees_with_python(
    spark: SparkSession, maps: list[dict[str, Any]], problems: list[bool]
) -> None:
    problems = (problems + [False] * len(maps))[: len(maps)]
    _assert_envelope_agrees(spark, _typed_rows(maps, problems))


def test_envelope_column_agrees_with_python_on_every_reason_and_edge(spark: SparkSession) -> None:
    maps = [*REASON_CASES.values(), *EDGE_CASES]
    _assert_envelope_agrees(spark, _typed_rows(maps, [False] * len(maps)))


def _assert_envelope_agrees(spark: SparkSession, rows: list[tuple[Any, ...]]) -> None:
    schema = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("props", spark_type("properties")),
            T.StructField("key_problem", T.StringType()),
        ]
    )
    df = spark.createDataFrame(rows, schema)
    restored = df.select(
        "id", restore_envelope_col(F.col("props"), F.col("key_problem")).alias("e")
    )
    actual = restored.select(
        "id",
        "e.destination",
        "e.session_id",
        "e.time_to_live_ticks",
        F.unix_micros("e.scheduled_enqueue_time_utc").alias("scheduled_micros"),
        F.array_sort(F.map_keys("e.application_properties")).alias("own_keys"),
        "e.reason",
    )
    expected_rows = []
    for i, typed, problem in rows:
        r = restore_from_typed(typed, problem)
        expected_rows.append(
            (
                i,
                r.destination,
                r.session_id,
                r.time_to_live_ticks,
                _micros(r.scheduled_enqueue_time_utc),
                sorted(r.application_properties),
                r.reason,
            )
        )
    expected = spark.createDataFrame(
        expected_rows,
        "id int, destination string, session_id string, time_to_live_ticks long, "
        "scheduled_micros long, own_keys array<string>, reason string",
    )
    assert_df_equality(actual, expected, ignore_nullable=True)


def test_envelope_column_handles_a_null_map(spark: SparkSession) -> None:
    schema = T.StructType([T.StructField("props", spark_type("properties"))])
    df = spark.createDataFrame([(None,)], schema)
    row = df.select(restore_envelope_col(F.col("props"), F.lit(None)).alias("e")).first()
    assert row is not None
    assert row["e"]["reason"] == "path_missing"
    assert restore_from_typed({}).reason == "path_missing"


def test_own_properties_survive_the_column_with_their_values(spark: SparkSession) -> None:
    typed, _ = typed_properties(
        {b"x-ms-path": b"orders", b"n": 7, b"u": uuid.UUID(int=1), b"s": b"v"}
    )
    schema = T.StructType([T.StructField("props", spark_type("properties"))])
    df = spark.createDataFrame([(typed,)], schema)
    row = df.select(restore_envelope_col(F.col("props"), F.lit(None)).alias("e")).first()
    assert row is not None
    own = row["e"]["application_properties"]
    assert sorted(own) == ["n", "s", "u"]
    assert own["n"]["int"] == 7
    assert own["s"]["bytes"] == bytearray(b"v")
    assert own["u"]["text"] == "00000000-0000-0000-0000-000000000001"


# ------------------------------------------------------------------ partition keys

optional_keys = st.none() | st.sampled_from(["a", "b", "A", "", "p" * 129, "p" * 128])
optional_flags = st.none() | st.booleans()


@spark_settings
@given(
    st.lists(
        st.tuples(optional_keys, optional_keys, optional_keys, optional_flags, optional_flags),
        min_size=1,
        max_size=60,
    )
)
def test_partition_key_column_agrees_with_python(
    spark: SparkSession, cases: list[tuple[Any, ...]]
) -> None:
    rows = [(i, *case) for i, case in enumerate(cases)]
    df: DataFrame = spark.createDataFrame(
        rows, "id int, sid string, pk string, mid string, dedup boolean, sessions boolean"
    )
    actual = df.select(
        "id",
        effective_partition_key_col(
            F.col("sid"), F.col("pk"), F.col("mid"), F.col("dedup"), F.col("sessions")
        ).alias("k"),
    ).select("id", "k.key", "k.source", "k.reason")
    expected_rows = []
    for i, sid, pk, mid, dedup, sessions in rows:
        r = effective_partition_key(sid, pk, mid, dedup, sessions)
        expected_rows.append((i, r.key, r.source, r.reason))
    expected = spark.createDataFrame(
        expected_rows, "id int, key string, source string, reason string"
    )
    assert_df_equality(actual, expected, ignore_nullable=True)
