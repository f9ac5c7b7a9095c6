"""The audit as catalog tables written through Spark's own table format (Delta on
Databricks): ``audit.table``, ``<audit.table>_runs`` and the lease's
``<audit.table>_leases``. Every read and write goes through Spark, so with this engine
even an empty run starts a session (free on a cluster), and nothing but the run
reports and the replay's journal (files, at ``audit.path``: a volume on Databricks) is
outside the catalog."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.ledger import RunRecord
from syphon.core.render import arrow_schema, spark_schema, with_columns_of
from syphon.core.schema import AUDIT, LEASE, RUNS
from syphon.store.audit import AUDIT_TABLE, SparkProvider, TableStore
from syphon.store.lease import Lease
from syphon.store.location import Location

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
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

    def _append(self, frame: DataFrame, table: str, label: str, commit: str | None = None) -> int:
        frame = frame.persist()
        try:
            rows = frame.count()
            self._write(frame, table, commit, rows)
        finally:
            frame.unpersist()
        return rows

    def _append_rows(
        self, rows: pa.Table, table: str, label: str, commit: str | None = None
    ) -> int:
        # the driver's rows: their count is known, no job counts them
        frame = self._spark().createDataFrame(rows, schema=spark_schema(AUDIT))
        self._write(frame, table, commit, rows.num_rows)
        return int(rows.num_rows)

    def _write(self, frame: DataFrame, table: str, commit: str | None, rows: int) -> None:
        """Appends ``frame`` (``rows`` rows) to ``table`` in one commit, named ``commit``
        when given and the frame has rows."""
        name = self._name(table)
        again_if_raced(lambda: self._add_missing_columns(name, frame))
        writer = frame.write.format(self.format).mode("append")
        if commit is not None and rows:  # Delta's idempotent writes: a table that has
            # it skips it (an empty append commits nothing for a retry to repeat)
            writer = writer.option("txnAppId", commit).option("txnVersion", 1)
        again_if_raced(lambda: writer.saveAsTable(name))

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
        import pyarrow as pa

        row = record.as_row(datetime.now(timezone.utc))
        frame = self._spark().createDataFrame(pa.Table.from_pylist([row], arrow_schema(RUNS)))
        again_if_raced(lambda: self._add_missing_columns(self._name("runs"), frame))
        writer = frame.write.format(self.format).mode("append")
        again_if_raced(lambda: writer.saveAsTable(self._name("runs")))

    def lease(self, run_id: str, ttl: timedelta) -> Lease:
        return Lease(SparkLeaseLog(self._name("leases"), self._spark), run_id, ttl)

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


class SparkLeaseLog:
    """The lease's commits (:mod:`syphon.store.lease`) in a Delta table through Spark:
    each action one ``ALTER TABLE ... SET TBLPROPERTIES`` of the action's metadata, read
    back with ``DESCRIBE HISTORY`` (each commit's ``operationParameters``).

    A change of table properties is a commit of metadata alone: Spark runs no job for
    it, so a renewal never waits for a task slot while the run's own tasks hold them all
    (an append would: measured, a renewal then waited for the replay's tasks to end).
    Two such commits conflict (Delta's ``MetadataChangedException``): the one that loses
    is not written and is made again at a later version, so each action lands at a
    version of its own and every reader replays the same history. Reading the history
    does run a Spark job (:attr:`history_needs_tasks`).

    Args:
        table: a catalog table name, or a Delta path (``delta.`<path>```).
        spark: starts the session when first needed.
    """

    #: Reading the history runs a Spark job: the heartbeat only commits.
    history_needs_tasks = True

    def __init__(self, table: str, spark: SparkProvider) -> None:
        self.table = table
        self._spark = spark
        self._created = False

    @property
    def where(self) -> str:
        return f"table {self.table}"

    def _sql(self, statement: str) -> None:
        again_if_raced(lambda: self._spark().sql(statement))

    def commit(self, row: dict[str, Any], metadata: dict[str, str]) -> None:
        # the properties are the record: ``row`` is not written (an append is a job)
        if not self._created:
            columns = ", ".join(f"`{f.name}` {f.type}" for f in LEASE)
            self._sql(f"CREATE TABLE IF NOT EXISTS {self.table} ({columns}) USING delta")
            self._created = True
        properties = ", ".join(f"'{k}' = '{_quoted(v)}'" for k, v in sorted(metadata.items()))
        self._sql(f"ALTER TABLE {self.table} SET TBLPROPERTIES ({properties})")

    def history(self) -> list[dict[str, Any]]:
        spark = self._spark()
        if not self._created and not _exists(spark, self.table):
            return []
        history = spark.sql(f"DESCRIBE HISTORY {self.table}").selectExpr(
            "version", "unix_millis(timestamp) AS timestamp", "operationParameters"
        )
        commits = []
        for r in history.collect():
            properties = json.loads((r["operationParameters"] or {}).get("properties") or "{}")
            meta = {k: v for k, v in properties.items() if k.startswith("syphon.lease.")}
            commits.append({**meta, "version": r["version"], "timestamp": r["timestamp"]})
        return commits


#: How many times a commit is made while it loses to concurrent ones.
COMMIT_ATTEMPTS = 50


def again_if_raced(commit: Callable[[], object]) -> None:
    """Makes ``commit``, again while it loses to a concurrent commit of another run or
    driver (at most :data:`COMMIT_ATTEMPTS` times, a few tens of ms apart): a table
    another run created first (its creation is then an append), a change of the table's
    properties or columns made since this one read it. Nothing of a lost commit is
    written, so making it again writes it once."""
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            commit()
            return
        except Exception as exc:
            if attempt == COMMIT_ATTEMPTS or not _concurrent(exc):
                raise
            log.debug("a commit lost to a concurrent one (%s): made again", type(exc).__name__)
            time.sleep(random.uniform(0.01, 0.05) * min(attempt, 10))  # noqa: S311 (jitter)


def _concurrent(exc: Exception) -> bool:
    """Whether a failed commit lost to a concurrent one (Delta's concurrent-modification
    errors, or a creation another driver made first)."""
    text = f"{type(exc).__name__} {exc}"
    return any(
        word in text
        for word in (
            "ALREADY_EXISTS",  # a table, or a column, another run added first
            "AlreadyExists",
            "DELTA_METADATA_CHANGED",
            "DELTA_PROTOCOL_CHANGED",
            "Concurrent",
            # a table another run is creating: its folder is there, its log not yet
            "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION",
            "DELTA_MISSING_DELTA_TABLE",
        )
    )


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _exists(spark: Any, table: str) -> bool:
    if table.lower().startswith("delta.`"):  # a path: a table when it has a log
        from pyspark.errors import AnalysisException

        try:
            spark.sql(f"DESCRIBE DETAIL {table}").collect()
        except AnalysisException:
            return False
        return True
    return bool(spark.catalog.tableExists(table))
