"""The audit as catalog tables written through Spark's own table format (Delta on
Databricks): ``audit.table`` and ``<audit.table>_runs``. Every read and write goes
through Spark, so with this engine even an empty run starts a session (free on a
cluster). The lease and the reports stay at ``audit.path``."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from syphon.core.ledger import RunRecord
from syphon.core.schema import AUDIT, RUNS, arrow_schema, with_columns_of
from syphon.store.audit import AUDIT_TABLE, SparkProvider, TableStore
from syphon.store.location import Location

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class CatalogStore(TableStore):
    """Catalog tables ``table`` (the audit) and ``table_runs`` (the ledger)."""

    def __init__(
        self, table: str, table_format: str, location: Location, spark: SparkProvider
    ) -> None:
        super().__init__(location, spark)
        self.table = table
        self.format = table_format

    @property
    def where(self) -> str:
        return f"table {self.table}"

    def _name(self, table: str) -> str:
        return self.table if table == AUDIT_TABLE else f"{self.table}_{table}"

    def _append(self, frame: DataFrame, table: str, label: str) -> int:
        name = self._name(table)
        self._add_missing_columns(name, frame)
        frame = frame.persist()
        try:
            rows = frame.count()
            frame.write.format(self.format).mode("append").saveAsTable(name)
        finally:
            frame.unpersist()
        return rows

    def _add_missing_columns(self, name: str, frame: DataFrame) -> None:
        """Adds to an existing table the columns of ``frame`` it lacks (a table whose
        schema has fewer columns than syphon's): its other rows read them as null."""
        spark = self._spark()
        if not spark.catalog.tableExists(name):
            return
        have = {c.lower() for c in spark.table(name).columns}
        missing = [f for f in frame.schema.fields if f.name.lower() not in have]
        if missing:
            columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in missing)
            log.info("the table %s gains the columns %s", name, ", ".join(f.name for f in missing))
            spark.sql(f"ALTER TABLE {name} ADD COLUMNS ({columns})")

    def append_run(self, record: RunRecord) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]

        row = record.as_row(datetime.now(timezone.utc))
        frame = self._spark().createDataFrame(pa.Table.from_pylist([row], arrow_schema(RUNS)))
        self._add_missing_columns(self._name("runs"), frame)
        frame.write.format(self.format).mode("append").saveAsTable(self._name("runs"))

    def runs(self) -> list[RunRecord]:
        spark = self._spark()
        name = self._name("runs")
        if not spark.catalog.tableExists(name):
            return []
        rows = spark.table(name).toArrow().to_pylist()
        records = [RunRecord.from_row(r) for r in rows]
        return sorted(records, key=lambda r: r.recorded_at or r.started_at)

    def audit(self) -> DataFrame | None:
        spark = self._spark()
        name = self._name(AUDIT_TABLE)
        if not spark.catalog.tableExists(name):
            return None
        return with_columns_of(spark.table(name), AUDIT)
