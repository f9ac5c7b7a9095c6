"""Spark-written files committed to Delta by delta-rs, read back by delta-rs and Spark."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
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


def test_a_table_an_earlier_syphon_wrote_takes_the_new_writers_files(
    spark: Any, tmp_path: Path
) -> None:
    """Audits written before the executors wrote through the object store (Spark's own
    Parquet writer, the files' schema committed by delta-rs) take the new files as they
    are: same Delta schema, one version per append, every row readable."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    table = tmp_path / "audit"
    folder = table / "syphon-plan-old"
    frame(spark, 0, 6).write.parquet(folder.as_uri())
    files = sorted(folder.glob("*.parquet"))
    adds = [
        AddAction(
            path=f"{folder.name}/{f.name}",
            size=f.stat().st_size,
            partition_values={},
            modification_time=0,
            data_change=True,
            stats=None,
        )
        for f in files
    ]
    create_table_with_add_actions(str(table), Schema.from_arrow(pq.read_schema(files[0])), adds)
    before = DeltaTable(str(table)).schema().to_arrow()

    assert append_dataframe(frame(spark, 6, 4), table, "new") == 4
    dt = DeltaTable(str(table))
    assert dt.version() == 1
    assert dt.schema().to_arrow() == before
    got = read_table(table).to_pydict()
    assert sorted(got["n"]) == list(range(10))
    assert spark.read.parquet(*dt.file_uris()).count() == 10


def test_a_table_without_a_new_column_gains_it_and_reads_its_old_rows_as_null(
    spark: Any, tmp_path: Path
) -> None:
    """An audit an earlier syphon wrote lacks the columns added since (the source's): the
    next append adds them in a commit of their own; the old rows read as null, by delta-rs
    and by Spark through syphon's reader."""
    from syphon.store.delta import read_dataframe

    table = tmp_path / "audit"
    append_dataframe(frame(spark, 0, 4), table, "old")
    newer = frame(spark, 4, 2).selectExpr("*", "'dlq' as source")
    assert append_dataframe(newer, table, "new") == 2
    assert "source" in [f.name for f in DeltaTable(str(table)).schema().fields]
    got = read_table(table).to_pydict()
    assert sorted(zip(got["n"], got["source"], strict=True)) == [
        (0, None),
        (1, None),
        (2, None),
        (3, None),
        (4, "dlq"),
        (5, "dlq"),
    ]
    read = read_dataframe(spark, table, newer.schema)
    assert read is not None
    assert sorted((r.n, r.source) for r in read.collect()) == sorted(
        zip(got["n"], got["source"], strict=True)
    )


def test_a_ledger_without_the_source_column_gains_it(tmp_path: Path) -> None:
    """A run ledger an earlier syphon wrote has no ``source``: the next run's row adds it
    (delta-rs merges the schema); the older rows read it as None (a backlog run)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    from syphon.core.ledger import RunRecord
    from syphon.core.render import arrow_schema
    from syphon.core.schema import RUNS
    from syphon.store.delta import append_arrow
    from syphon.store.deltars import DeltaRsStore

    started = datetime(2026, 11, 1, tzinfo=timezone.utc)
    old_schema = arrow_schema([f for f in RUNS if f.name != "source"])
    old_row = RunRecord("r-old", "done", started).as_row(started)
    del old_row["source"]
    append_arrow(pa.Table.from_pylist([old_row], schema=old_schema), tmp_path / "runs")

    store = DeltaRsStore(tmp_path, lambda: None)  # type: ignore[arg-type,return-value]
    store.append_run(RunRecord("r-new", "done", started, source="orders-dlq"))  # merged
    assert [(r.run_id, r.source) for r in store.runs()] == [
        ("r-old", None),
        ("r-new", "orders-dlq"),
    ]


def test_a_ledger_without_the_wave_columns_gains_them_and_keeps_a_waves_cut(
    tmp_path: Path,
) -> None:
    """A run ledger written before waves has no ``wave`` or ``watermark``: the next row
    adds them; older rows read None (a run of one wave), a wave's row its number and cut
    (in UTC)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    from syphon.core.ledger import RunRecord
    from syphon.core.render import arrow_schema
    from syphon.core.schema import RUNS
    from syphon.store.delta import append_arrow
    from syphon.store.deltars import DeltaRsStore

    started = datetime(2026, 11, 1, tzinfo=timezone.utc)
    cut = datetime(2026, 10, 31, 23, 59, 58, 123000, tzinfo=timezone.utc)
    old_schema = arrow_schema([f for f in RUNS if f.name not in ("wave", "watermark")])
    old_row = RunRecord("r-old", "done", started).as_row(started)
    del old_row["wave"], old_row["watermark"]
    append_arrow(pa.Table.from_pylist([old_row], schema=old_schema), tmp_path / "runs")

    store = DeltaRsStore(tmp_path, lambda: None)  # type: ignore[arg-type,return-value]
    store.append_run(RunRecord("r-new", "planned", started, wave=2, watermark=cut))
    store.append_run(RunRecord("r-new", "done", started, wave=3, watermark=None))
    got = [(r.run_id, r.wave, r.watermark) for r in store.runs()]
    assert [(run, wave) for run, wave, _ in got] == [("r-old", None), ("r-new", 2), ("r-new", 3)]
    (_, _, none_old), (_, _, kept), (_, _, none_last) = got
    assert (none_old, none_last) == (None, None)
    assert kept is not None
    assert kept.astimezone(timezone.utc) == cut


def test_a_table_is_read_with_its_own_types_and_no_arrow_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``read_table`` reads through delta-rs's own engine: an Arrow dataset over delta-rs's
    file system hands Python callbacks to Arrow's I/O threads, and a process that read a
    table that way aborted at its exit now and then (exit -6). Strings come as strings
    (not the engine's views), and a column an older commit lacks reads as null."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from deltalake import DeltaTable as Table

    from syphon.store.delta import append_arrow

    table = tmp_path / "ledger"
    for n in range(5):
        columns = {"run_id": [f"r{n}"], "n": [n]}
        if n >= 3:
            columns["source"] = [f"s{n}"]
        append_arrow(pa.table(columns), table, merge_schema=True)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read through an Arrow dataset")

    monkeypatch.setattr(Table, "to_pyarrow_dataset", refused)
    got = read_table(table)
    assert got.schema == pa.schema(
        [("run_id", pa.string()), ("n", pa.int64()), ("source", pa.string())]
    )
    assert sorted(got.to_pylist(), key=lambda r: r["n"]) == [
        {"run_id": f"r{n}", "n": n, "source": f"s{n}" if n >= 3 else None} for n in range(5)
    ]
