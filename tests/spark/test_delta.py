"""Spark-written files committed to Delta by delta-rs, read back by delta-rs and Spark."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from syphon.store.delta import append_dataframe, read_table


def frame(spark: Any, start: int, n: int) -> Any:
    stamp = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    return spark.createDataFrame(
        [(f"r{i}", i, stamp, b"\x00\x01", {"k": i}) for i in range(start, start + n)],
        "id string, n long, at timestamp, raw binary, m map<string, long>",
    ).repartition(3)


def test_append_commits_spark_files_in_one_version(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "audit"
    assert append_dataframe(frame(spark, 0, 50), table, "run-1") == 50
    assert append_dataframe(frame(spark, 50, 25), table, "run-2") == 25
    dt = DeltaTable(str(table))
    assert dt.version() == 1  # one commit per append
    got = read_table(table).to_pydict()
    assert sorted(got["n"]) == list(range(75))
    assert {t.microsecond for t in got["at"]} == {123456}  # microseconds survive
    # Spark reads the table's current files (not the folder) and agrees
    files = dt.file_uris()
    assert spark.read.parquet(*files).count() == 75


def test_empty_append_creates_the_table(spark: Any, tmp_path: Path) -> None:
    table = tmp_path / "empty"
    assert append_dataframe(frame(spark, 0, 0), table) == 0
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 0
    assert append_dataframe(frame(spark, 0, 3), table) == 3
    assert read_table(table).num_rows == 3


def test_a_relative_table_path_is_taken_from_the_working_directory(
    spark: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    assert append_dataframe(frame(spark, 0, 4), Path(".syphon") / "audit", "rel") == 4
    assert read_table(tmp_path / ".syphon" / "audit").num_rows == 4
