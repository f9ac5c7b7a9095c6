"""The audit as delta-rs tables at ``audit.path``: ``audit`` written as Parquet (by
Spark's executors, or from the driver for the rows it holds) and committed by delta-rs in
one transaction, ``runs`` written from Arrow."""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from syphon.core.ledger import RunRecord
from syphon.core.render import arrow_schema, spark_schema
from syphon.core.schema import AUDIT, RUNS
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE, SparkProvider, TableStore
from syphon.store.delta import (
    append_arrow,
    append_dataframe,
    append_rows,
    guarded,
    read_dataframe,
    read_table,
    table_exists,
)
from syphon.store.figures import DeltaRsFigures, RunFigures
from syphon.store.location import Location, as_location

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


class DeltaRsStore(TableStore):
    """Delta tables under ``location`` (a local folder or object storage; a path given as
    text has no storage options)."""

    def __init__(self, location: Location | str | os.PathLike[str], spark: SparkProvider) -> None:
        super().__init__(as_location(location), spark)

    @property
    def where(self) -> str:
        return self.location.shown

    def _table(self, table: str) -> Location:
        return self.location.child(table)

    def _append(self, frame: DataFrame, table: str, label: str, commit: str | None = None) -> int:
        with guarded(self.where, f"append to its {table} table"):
            return append_dataframe(frame, self._table(table), label, commit)

    def _append_rows(
        self, rows: pa.Table, table: str, label: str, commit: str | None = None
    ) -> int:
        with guarded(self.where, f"append to its {table} table"):
            return append_rows(rows, self._table(table), label, commit)

    def append_run(self, record: RunRecord) -> None:
        import pyarrow as pa

        row = record.as_row(datetime.now(timezone.utc))
        arrow = pa.Table.from_pylist([row], schema=arrow_schema(RUNS))
        with guarded(self.where, "record the run in its ledger"):
            append_arrow(arrow, self._table(RUNS_TABLE), merge_schema=True)

    def runs(self) -> list[RunRecord]:
        path = self._table(RUNS_TABLE)
        with guarded(self.where, "read its ledger"):
            rows = read_table(path).to_pylist() if table_exists(path) else []
        records = [RunRecord.from_row(r) for r in rows]
        return sorted(records, key=lambda r: r.recorded_at or r.started_at)

    def audit(self) -> DataFrame | None:
        # the schema is known: no Spark job to read every file's footer on each read
        with guarded(self.where, "read its audit table"):  # None before the first plan
            return read_dataframe(self._spark(), self._table(AUDIT_TABLE), spark_schema(AUDIT))

    def run_figures(self, run_id: str) -> RunFigures | None:
        table = self._table(AUDIT_TABLE)
        with guarded(self.where, "read its audit table"):
            if not table.is_table():
                return None
        try:  # on delta-rs's engine: no Spark job
            return DeltaRsFigures.answered(table, run_id)
        except Exception as exc:  # the engine's refusal (see read_table): Spark reads it
            log.debug("delta-rs's engine refused the audit (%s): its figures by Spark", exc)
            return super().run_figures(run_id)
