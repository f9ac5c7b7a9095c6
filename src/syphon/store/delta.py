"""Append-only Delta tables, written by Spark's executors and committed by delta-rs.

Spark cannot write Delta here (its jars are not reachable), and collecting a large
DataFrame on the driver to write it with delta-rs would not scale. So Spark writes
Parquet files into a folder inside the table, and delta-rs commits exactly those files
in one transaction: readers see all of them or none. Files of a failed attempt stay
unreferenced (invisible) until a vacuum.

Small tables (the run ledger) are written from Arrow directly with
:func:`append_arrow`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syphon.core.errors import AuditStoreError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

STAGING_PREFIX = "syphon-"


@contextlib.contextmanager
def guarded(root: str, doing: str) -> Iterator[None]:
    """Turns a storage failure at ``root`` into an :class:`AuditStoreError` naming
    ``audit.path`` (exit code 9), with the error's class, never a raw traceback."""
    try:
        yield
    except AuditStoreError:
        raise
    except Exception as exc:
        if not _is_storage_error(exc):
            raise
        name = type(exc).__name__
        log.debug("the audit at %s failed to %s", root, doing, exc_info=exc)
        raise AuditStoreError(
            f"the audit at {root} cannot {doing} ({name}: {_short(exc)})",
            fix=f"audit.path ({root}) cannot be written: point it at a folder or URI this "
            "machine and every executor can write, or fix its permissions",
        ) from None


def _is_storage_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return True
    module = type(exc).__module__ or ""
    return module.startswith(("deltalake", "_internal")) or type(exc).__name__ in (
        "DeltaError", "DeltaProtocolError", "TableNotFoundError", "CommitFailedError",
    )  # fmt: skip


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:200]


def table_exists(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / "_delta_log").is_dir()


def append_dataframe(df: DataFrame, path: str | os.PathLike[str], label: str = "") -> int:
    """Appends ``df`` to the Delta table at ``path`` (created when missing).

    Spark writes the Parquet files into ``<path>/syphon-<label>-<uuid>/``; one delta-rs
    commit adds them all. Returns the number of rows committed.
    """
    import pyarrow.parquet as pq  # type: ignore[import-untyped]
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions
    from pyspark.sql.pandas.types import to_arrow_schema

    root = Path(path).absolute()  # Spark writes to a file URI: relative paths have none
    root.mkdir(parents=True, exist_ok=True)
    folder = f"{STAGING_PREFIX}{label + '-' if label else ''}{uuid.uuid4().hex}"
    target = root / folder
    df.write.mode("errorifexists").parquet(target.as_uri())

    actions: list[AddAction | RemoveAction] = []
    rows = 0
    arrow_schema = None
    now_ms = int(time.time() * 1000)
    for file in sorted(target.glob("*.parquet")):
        count = pq.ParquetFile(file).metadata.num_rows
        if count == 0:
            continue
        rows += count
        if arrow_schema is None:  # the files' own schema, exactly as Spark wrote it
            arrow_schema = pq.read_schema(file)
        actions.append(
            AddAction(
                path=f"{folder}/{file.name}",
                size=file.stat().st_size,
                partition_values={},
                modification_time=now_ms,
                data_change=True,
                stats=f'{{"numRecords": {count}}}',
            )
        )
    if arrow_schema is None:
        arrow_schema = to_arrow_schema(df.schema, timezone="UTC")
    if not table_exists(root):
        adds = [a for a in actions if isinstance(a, AddAction)]
        create_table_with_add_actions(
            str(root), Schema.from_arrow(arrow_schema), adds, mode="append"
        )
    elif actions:
        DeltaTable(str(root)).create_write_transaction(actions, "append", arrow_schema)
    return rows


def append_arrow(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """Appends a small Arrow table (written from the driver)."""
    from deltalake import write_deltalake

    Path(path).mkdir(parents=True, exist_ok=True)
    write_deltalake(str(path), table, mode="append")


def read_table(path: str | os.PathLike[str]) -> Any:
    """The table's current rows as Arrow (for small tables and tests)."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()
