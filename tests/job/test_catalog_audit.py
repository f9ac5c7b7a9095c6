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
from syphon.job.sources import run_source
from syphon.job.status import status
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

    # the audit and the ledger are catalog tables; nothing of them under audit.path,
    # which keeps the lease and the reports
    tables = {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {database}").collect()}
    assert tables == {"audit", "audit_runs"}
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
    assert not (delta / "audit").exists()
    assert not (delta / "runs").exists()
    assert (delta / "leases").is_dir()
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
    from syphon.core.schema import AUDIT, names, spark_schema
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
