"""``audit.engine: spark``: the audit and the run ledger as Delta tables of Spark's
catalog, written through Spark's own Delta (delta-spark's jars, which the set-up copies:
tests/support/delta_jars.py), for whole ``syphon run``s against the local Service Bus:
appends, reads, the ledger through Spark, the duplicate check against earlier runs, the
report; the tables' history and time travel; the same tables read by delta-rs; and an
older table gaining the columns added since."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from chispa import assert_df_equality

from support.paired_env import Pair, context, job_config, run_job, send_raw
from syphon.core.configfile import load_config
from syphon.core.errors import ExitCode
from syphon.job.run.status import status
from syphon.job.sources import run_source
from syphon.servicebus.backlog_messages import to_backlog_message

pytestmark = pytest.mark.timeout(300)


def test_a_run_keeps_its_audit_and_ledger_in_catalog_tables(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = f"syphon_it_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {database} LOCATION '{(tmp_path / 'warehouse').as_uri()}'")

    def park(queue: int, message_id: str, body: bytes) -> None:
        message = ServiceBusMessage(body, message_id=message_id, partition_key="k")
        send_raw(pair, queue, [to_backlog_message(message, "orders")])

    park(0, "c1", b"a")
    park(1, "c2", b"b")
    path = job_config(pair, tmp_path, monkeypatch).source
    config = load_config(
        path,
        environ={
            "SYPHON__AUDIT__ENGINE": "spark",
            "SYPHON__AUDIT__TABLE": f"{database}.audit",
        },
    )
    assert context(config, spark).store.where == f"table {database}.audit"

    first = run_job(config, spark)
    assert (first.status, first.exit_code) == ("done", ExitCode.DONE), first
    orders = pair.primary.broker.entity("orders")
    assert sorted(str(m.message_id) for m in orders.messages.values()) == ["c1", "c2"]

    # the audit, the ledger and the lease are catalog tables; audit.path (a volume on
    # Databricks) keeps the reports, and the journals while a wave replays and settles: no table
    tables = {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {database}").collect()}
    assert tables == {"audit", "audit_runs", "audit_leases"}
    leases = spark.sql(f"DESCRIBE HISTORY {database}.audit_leases").collect()
    operations = [r["operation"] for r in reversed(leases)]  # oldest first
    # created, then each action a change of its properties: acquire, renewals, release
    assert operations[0] == "CREATE TABLE"
    assert operations[1:] == ["SET TBLPROPERTIES"] * (len(operations) - 1)
    assert len(operations) >= 3
    audit = spark.table(f"{database}.audit")
    rows = {(r["message_id"], r["stage"], r["outcome"]) for r in audit.collect()}
    assert rows == {
        ("c1", "plan", "planned"),
        ("c1", "replay", "sent"),
        ("c1", "settle", "completed"),
        ("c2", "plan", "planned"),
        ("c2", "replay", "sent"),
        ("c2", "settle", "completed"),
    }
    delta = tmp_path / "delta"
    assert not list(delta.rglob("_delta_log"))
    assert {p.name for p in delta.iterdir()} <= {"reports", "journal", "settle-journal"}
    assert first.report is not None
    assert Path(first.report).parent == delta / "reports"
    assert "orders" in Path(first.report).read_text(encoding="utf-8")

    runs = context(config, spark).store.runs()
    assert [r.status for r in runs] == ["planned", "replaying", "replayed", "done"]
    assert runs[-1].operations.replay_messages_sent == 2
    ctx = context(config, spark)
    assert status(ctx, run_source(ctx)).runs[0].status == "done"

    # a later run reads the catalog audit: c1 parked again is a duplicate of what was sent
    park(2, "c1", b"a")
    second = run_job(config, spark)
    assert second.status == "done", second
    assert second.counts == {"duplicate": 1}
    assert len(orders.messages) == 2
    # and an empty run is recorded in the catalog ledger too
    third = run_job(config, spark)
    assert third.status == "empty"
    statuses = [r.status for r in context(config, spark).store.runs() if r.run_id == third.run_id]
    assert statuses == ["empty"]

    # real Delta tables: one commit per append in their history, each version readable
    # (what the audit said after the first run's plan), and delta-rs reads them too
    (detail,) = spark.sql(f"DESCRIBE DETAIL {database}.audit").collect()
    assert detail["format"] == "delta"
    history = spark.sql(f"DESCRIBE HISTORY {database}.audit").collect()
    # the first run's plan, replay and settle; the second's plan and settle (a duplicate)
    assert len(history) == 5
    first_plan = spark.sql(f"SELECT * FROM {database}.audit VERSION AS OF 0").collect()
    assert sorted((r["message_id"], r["stage"]) for r in first_plan) == [
        ("c1", "plan"),
        ("c2", "plan"),
    ]
    from deltalake import DeltaTable

    read = DeltaTable(detail["location"]).to_pyarrow_dataset().to_table(use_threads=False)
    assert read.num_rows == spark.table(f"{database}.audit").count() == 8


def test_a_catalog_audit_an_earlier_syphon_wrote_gains_the_new_columns(
    spark: Any, tmp_path: Path
) -> None:
    """A catalog audit without the columns added since (the source's) gains them at the
    next append; its old rows, and a read before that append, give null for them."""
    from syphon.core.render import spark_schema
    from syphon.core.schema import AUDIT, names
    from syphon.store.catalog import CatalogStore
    from syphon.store.location import as_location

    database = f"syphon_it_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {database} LOCATION '{(tmp_path / 'warehouse').as_uri()}'")
    old_columns = [c for c in names(AUDIT) if c not in ("source", "source_kind")]
    empty = spark.createDataFrame([{c: None for c in names(AUDIT)}], spark_schema(AUDIT))
    old = empty.fillna({"run_id": "r0"}).select(*old_columns)
    old.write.format("delta").saveAsTable(f"{database}.audit")
    store = CatalogStore(f"{database}.audit", "delta", as_location(tmp_path / "d"), lambda: spark)

    before = store.audit()
    assert before is not None
    assert [(r.run_id, r.source) for r in before.collect()] == [("r0", None)]

    newer = empty.fillna({"run_id": "r1", "source": "dlq", "source_kind": "dead_letter"})
    store._append(newer, "audit", "plan-r1")
    assert {"source", "source_kind"} <= set(spark.table(f"{database}.audit").columns)
    after = store.audit()
    assert after is not None
    expected = empty.fillna({"run_id": "r0"}).unionByName(newer)  # the old row: nulls
    assert_df_equality(
        after.select(*names(AUDIT)), expected, ignore_row_order=True, ignore_nullable=True
    )


def test_a_catalog_ledger_and_audit_without_the_wave_and_repair_columns_gain_them(
    spark: Any, tmp_path: Path
) -> None:
    """The columns added with waves and repairs (the ledger's ``wave``, ``watermark``,
    ``repair``; the audit's ``repaired``) are added to older catalog tables at the next
    append; the old rows read them as null (a ledger row as no wave, no repair)."""
    from datetime import datetime, timezone

    from syphon.core.ledger import RunRecord
    from syphon.core.render import arrow_schema, spark_schema
    from syphon.core.schema import AUDIT, RUNS, names
    from syphon.store.catalog import CatalogStore
    from syphon.store.location import as_location

    database = f"syphon_it_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {database} LOCATION '{(tmp_path / 'warehouse').as_uri()}'")
    started = datetime(2026, 1, 1, tzinfo=timezone.utc)
    import pyarrow as pa

    old_row = RunRecord("r0", "done", started).as_row(started)
    added = ("wave", "watermark", "repair")
    old_runs = spark.createDataFrame(pa.Table.from_pylist([old_row], arrow_schema(RUNS)))
    old_runs.drop(*added).write.format("delta").saveAsTable(f"{database}.audit_runs")
    empty = spark.createDataFrame([{c: None for c in names(AUDIT)}], spark_schema(AUDIT))
    empty.fillna({"run_id": "r0"}).drop("repaired").write.format("delta").saveAsTable(
        f"{database}.audit"
    )
    store = CatalogStore(f"{database}.audit", "delta", as_location(tmp_path / "d"), lambda: spark)

    at = datetime(2026, 2, 1, tzinfo=timezone.utc)
    newer = RunRecord("r1", "planned", at, wave=2, watermark=at, repair=("set n=1",))
    store.append_run(newer)
    store._append(empty.fillna({"run_id": "r1", "repaired": "n"}), "audit", "plan-r1")
    assert set(added) <= set(spark.table(f"{database}.audit_runs").columns)
    runs = {r.run_id: r for r in store.runs()}
    assert (runs["r0"].wave, runs["r0"].watermark, runs["r0"].repair) == (None, None, ())
    assert (runs["r1"].wave, runs["r1"].watermark, runs["r1"].repair) == (2, at, ("set n=1",))
    audit = store.audit()
    assert audit is not None
    assert sorted((r.run_id, r.repaired) for r in audit.collect()) == [("r0", None), ("r1", "n")]


@pytest.mark.parametrize("engine", ["spark", "delta-rs"])
def test_an_append_retried_under_its_commit_name_is_written_once(
    engine: str, spark: Any, tmp_path: Path
) -> None:
    """A wave's outcomes are committed under a name (its journal's): the wave, or the
    next run reading the journal after a crash, whichever comes second, finds the name
    in the table's log and writes nothing (Delta's application transactions: Spark's
    ``txnAppId``/``txnVersion``, delta-rs's ``Transaction``). Another name is another
    commit."""
    from syphon.core.render import spark_schema
    from syphon.core.schema import AUDIT, names
    from syphon.store.audit import TableStore
    from syphon.store.catalog import CatalogStore
    from syphon.store.deltars import DeltaRsStore
    from syphon.store.location import as_location

    files = as_location(tmp_path / "d")
    store: TableStore
    if engine == "spark":
        database = f"syphon_it_{uuid.uuid4().hex[:8]}"
        spark.sql(f"CREATE DATABASE {database} LOCATION '{(tmp_path / 'warehouse').as_uri()}'")
        store = CatalogStore(f"{database}.audit", "delta", files, lambda: spark)
    else:
        store = DeltaRsStore(files, lambda: spark)
    empty = spark.createDataFrame([{c: None for c in names(AUDIT)}], spark_schema(AUDIT))
    rows = empty.fillna({"run_id": "r1", "stage": "replay", "message_id": "m"})
    for _ in range(2):  # the wave's commit, then the same commit after a crash
        store._append(rows, "audit", "replay-r1", commit="syphon-replay-r1-j1")
    audit = store.audit()
    assert audit is not None
    assert [r.message_id for r in audit.collect()] == ["m"]
    store._append(rows, "audit", "replay-r1", commit="syphon-replay-r1-j2")  # another wave
    store._append(rows, "audit", "replay-r1")  # unnamed: always written
    audit = store.audit()
    assert audit is not None
    assert audit.count() == 3


def test_runs_creating_the_catalog_ledger_at_once_each_keep_their_row(
    spark: Any, tmp_path: Path
) -> None:
    """Three runs record their first ledger row at once into a ledger nobody created yet:
    all but one lose the creation to a concurrent one (Delta's ``DELTA_PROTOCOL_CHANGED``,
    or the catalog's ``TABLE_OR_VIEW_ALREADY_EXISTS``) and append again; every row is
    kept, once."""
    import threading
    from datetime import datetime, timezone

    from syphon.core.ledger import RunRecord
    from syphon.store.catalog import CatalogStore
    from syphon.store.location import as_location

    database = f"syphon_it_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {database} LOCATION '{(tmp_path / 'warehouse').as_uri()}'")
    failures: list[BaseException] = []
    start = threading.Barrier(3)

    def record(run: str) -> None:
        store = CatalogStore(f"{database}.audit", "delta", as_location(tmp_path), lambda: spark)
        start.wait()
        try:
            store.append_run(RunRecord(run, "planned", datetime.now(timezone.utc)))
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=record, args=(f"r{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    store = CatalogStore(f"{database}.audit", "delta", as_location(tmp_path), lambda: spark)
    assert sorted(r.run_id for r in store.runs()) == ["r0", "r1", "r2"]
