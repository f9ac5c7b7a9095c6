"""Append-only Delta tables, written by Spark's executors and committed by delta-rs.

Spark cannot write Delta here (its jars are not reachable, nor, on object storage, its
Hadoop connectors), and collecting a large DataFrame on the driver to write it would not
scale. So each of Spark's tasks writes its rows as one Parquet file into a folder inside
the table, through the location's object store (:mod:`syphon.store.location`), and
returns the file's name, size and row count; the driver commits exactly those files in
one delta-rs transaction: readers see all of them or none. Files of a failed attempt or
commit are in no commit, so no reader sees them, until a vacuum removes them.

Rows the driver holds already (a wave's plan and outcomes, bounded by the wave) are
written the same way from the driver, as one file (:func:`append_rows`). Small tables
(the run ledger) are written from Arrow directly with :func:`append_arrow`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from syphon.core.errors import AuditStoreError
from syphon.core.render import arrow_schema_of
from syphon.store.location import Location, as_location

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

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
        if "://" in root and not root.startswith("file://"):
            fix = (
                f"audit.path ({root}) cannot be reached: check that its container or bucket "
                "exists and that audit.storage's account key, SAS or Azure AD identity may "
                "read, write and list it (and audit.storage.endpoint, if set)"
            )
        elif isinstance(exc, OSError):
            fix = (
                f"audit.path ({root}) cannot be written: point it at a folder or URI this "
                "machine and every executor can write, or fix its permissions"
            )
        else:  # the folder is there, its Delta table is not what syphon can read
            fix = (
                f"audit.path ({root}) holds a Delta table delta-rs cannot read: check that "
                "only syphon writes there and that its _delta_log is whole, or point "
                "audit.path at a new folder"
            )
        raise AuditStoreError(
            f"the audit at {root} cannot {doing} ({name}: {_short(exc)})", fix=fix
        ) from None


def _is_storage_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return True
    module = type(exc).__module__ or ""
    return module.startswith(("deltalake", "_internal")) or type(exc).__name__ in (
        "DeltaError",
        "DeltaProtocolError",
        "TableNotFoundError",
        "CommitFailedError",
    )


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return text[:200]


Where = Location | str | os.PathLike[str]

#: At most this many tasks read a table on object storage.
READ_TASKS = 64

#: What a writing task returns for the file it wrote (the driver's only collect).
WRITTEN_FILES = "name string, size long, rows long"


def table_exists(where: Where) -> bool:
    return as_location(where).is_table()


def append_dataframe(
    df: DataFrame, where: Where, label: str = "", commit: str | None = None
) -> int:
    """Appends ``df`` to the Delta table at ``where`` (created when missing).

    Each task writes its rows to ``<table>/syphon-<label>-<uuid>/part-<n>-<uuid>.parquet``
    through the table's object store; one delta-rs commit adds them all. Returns the
    number of rows committed. With ``commit`` (a name a retry of this append repeats),
    the commit records it as a Delta application transaction (``txn``: app id
    ``commit``, version 1), and a table that already has it is left as it is (0 rows):
    Delta's idempotent writes, the way Spark's Delta does them with ``txnAppId``.
    """
    schema = arrow_schema_of(df.schema)
    return _append_files(
        where, schema, label, commit, lambda write: df.mapInArrow(write, WRITTEN_FILES).collect()
    )


def append_rows(rows: pa.Table, where: Where, label: str = "", commit: str | None = None) -> int:
    """Appends ``rows``, already in the driver's memory, as :func:`append_dataframe` does
    (the same folder, commit and idempotent name), written from the driver as one
    Parquet file: no Spark job for rows the driver holds (a wave's plan and outcomes)."""

    def write(files: _WriteFiles) -> list[Any]:
        return [r for batch in files(iter(rows.to_batches())) for r in batch.to_pylist()]

    return _append_files(where, rows.schema, label, commit, write)


def _append_files(
    where: Where,
    schema: pa.Schema,
    label: str,
    commit: str | None,
    write: Callable[[_WriteFiles], list[Any]],
) -> int:
    """Writes the Parquet files of an append with ``write`` (which runs a
    :class:`_WriteFiles` and returns a row per file: name, size, rows), then commits
    them in one delta-rs transaction (see :func:`append_dataframe`)."""
    from deltalake import CommitProperties, DeltaTable, Schema, Transaction
    from deltalake.transaction import AddAction, create_table_with_add_actions

    table = as_location(where)
    properties = None
    if commit is not None:
        if table.is_table() and _committed(table, commit):
            log.info("the table at %s has commit %s: not written again", table.shown, commit)
            return 0
        properties = CommitProperties(app_transactions=[Transaction(commit, 1)])
    folder = f"{STAGING_PREFIX}{label + '-' if label else ''}{uuid.uuid4().hex}"
    written = write(_WriteFiles(table.child(folder).for_tasks(), schema))

    now_ms = int(time.time() * 1000)
    actions = [
        AddAction(
            path=f"{folder}/{f['name']}",
            size=f["size"],
            partition_values={},
            modification_time=now_ms,
            data_change=True,
            stats=f'{{"numRecords": {f["rows"]}}}',
        )
        for f in sorted(written, key=lambda f: f["name"])
    ]
    options = table.storage_options()
    if not table.is_table():
        create_table_with_add_actions(
            table.uri,
            Schema.from_arrow(schema),
            actions,
            mode="append",
            storage_options=options,
            commit_properties=properties,
        )
    elif actions:  # an empty append commits nothing (nothing for a retry to repeat)
        delta = DeltaTable(table.uri, storage_options=options)
        if add_missing_columns(delta, schema):
            delta = DeltaTable(table.uri, storage_options=options)
        delta.create_write_transaction(
            list(actions), "append", schema, commit_properties=properties
        )
    return sum(f["rows"] for f in written)


def _committed(table: Location, commit: str) -> bool:
    """Whether the table's log has the application transaction ``commit``."""
    from deltalake import DeltaTable

    delta = DeltaTable(table.uri, storage_options=table.storage_options())
    return delta.transaction_version(commit) is not None


def add_missing_columns(delta: Any, schema: pa.Schema) -> list[str]:
    """Adds to the table the columns of ``schema`` it lacks (a table whose schema has
    fewer columns than syphon's), in one commit; their rows read as null. Returns
    the names added."""
    from deltalake import Schema

    have = {f.name for f in delta.schema().fields}
    missing = [f for f in Schema.from_arrow(schema).fields if f.name not in have]
    if missing:
        log.info(
            "the table at %s gains the columns %s",
            delta.table_uri,
            ", ".join(f.name for f in missing),
        )
        delta.alter.add_columns(missing)
    return [f.name for f in missing]


class _WriteFiles:
    """A task's part of :func:`append_dataframe`: its rows as one Parquet file in
    ``folder`` (none for a task without rows), then one row naming the file."""

    def __init__(self, folder: Location, schema: pa.Schema) -> None:
        self.folder = folder
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
        from pyspark import TaskContext

        context = TaskContext.get()
        part = context.partitionId() if context is not None else 0
        name = f"part-{part:05d}-{uuid.uuid4().hex}.parquet"
        rows = 0
        out = writer = None
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if writer is None:
                    out = self.folder.filesystem().open_output_stream(name)
                    writer = pq.ParquetWriter(out, self.schema, compression="snappy")
                writer.write_batch(batch.cast(self.schema))
                rows += batch.num_rows
            if writer is None:
                return
            writer.close()
            assert out is not None
            size = out.tell()
            out.close()
        finally:
            if out is not None and not out.closed:
                out.close()  # a failed task's file is in no commit: nobody reads it
        yield pa.RecordBatch.from_pylist(
            [{"name": name, "size": size, "rows": rows}],
            schema=pa.schema([("name", pa.string()), ("size", pa.int64()), ("rows", pa.int64())]),
        )


def read_dataframe(spark: SparkSession, where: Where, schema: StructType) -> DataFrame | None:
    """The table's current rows as a DataFrame with ``schema``; None when it has no
    files. Spark reads a local table's files itself; on object storage, its tasks read
    them through the object store (no Hadoop connector needed)."""
    from deltalake import DeltaTable

    table = as_location(where)
    if not table.is_table():
        return None
    delta = DeltaTable(table.uri, storage_options=table.storage_options())
    if table.local:
        files = delta.file_uris()
        return spark.read.schema(schema).parquet(*files) if files else None
    import pyarrow as pa

    names = sorted(pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist())
    if not names:
        return None
    reader = _ReadFiles(table.for_tasks(), names, arrow_schema_of(schema))
    # a task per file, up to READ_TASKS (each reads its files one after another)
    tasks = min(len(names), READ_TASKS)
    return spark.range(len(names), numPartitions=tasks).mapInArrow(reader, schema)


class _ReadFiles:
    """A task's part of :func:`read_dataframe`: the files its ids point to."""

    def __init__(self, table: Location, names: list[str], schema: pa.Schema) -> None:
        self.table = table
        self.names = names
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        filesystem = self.table.filesystem()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                parquet = pq.ParquetFile(filesystem.open_input_file(self.names[index]))
                # a file without one of the table's columns: its rows read it as null
                present = set(parquet.schema_arrow.names)
                columns = [n for n in self.schema.names if n in present]
                for part in parquet.iter_batches(columns=columns):
                    yield self._conform(part)

    def _conform(self, part: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa

        arrays = [
            part.column(f.name) if f.name in part.schema.names else pa.nulls(part.num_rows, f.type)
            for f in self.schema
        ]
        return pa.RecordBatch.from_arrays(arrays, names=self.schema.names).cast(self.schema)


def append_arrow(
    table: pa.Table, where: Where, properties: Any = None, merge_schema: bool = False
) -> None:
    """Appends a small Arrow table (written from the driver), with ``properties`` (delta-rs
    CommitProperties) on its commit; with ``merge_schema``, a table with fewer columns
    gains the ones it lacks (its other rows read them as null)."""
    from deltalake import write_deltalake

    location = as_location(where)
    if location.local:
        os.makedirs(location.uri, exist_ok=True)
    write_deltalake(
        location.uri,
        table,
        mode="append",
        commit_properties=properties,
        schema_mode="merge" if merge_schema else None,
        storage_options=location.storage_options(),
    )


def read_table(where: Where) -> Any:
    """The table's current rows as Arrow (for small tables and tests), with the table's
    own column types.

    Read by delta-rs's own query engine (in Rust, with one partition), not through an
    Arrow dataset over delta-rs's file system: that hands Python callbacks to Arrow's
    I/O threads, which the interpreter's exit does not join, and a process that read a
    table that way aborted at its exit now and then (``terminate called without an
    active exception``, exit -6: 3 of 60 processes here, even scanned in the calling
    thread), its work done. Read this way, none of 100 did. The engine refuses a table
    whose schema says a column is never null while older files lack it (Spark writes a
    literal column so, syphon's own tables do not): such a table is read as a dataset."""
    import pyarrow as pa
    from deltalake import DeltaTable

    location = as_location(where)
    table = DeltaTable(location.uri, storage_options=location.storage_options())
    try:
        rows = pa.table(_engine_over(table, "t").execute("SELECT * FROM t").read_all())
    except Exception as exc:  # the engine's refusal: delta-rs's own error types vary
        log.debug("delta-rs's engine refused %s (%s): read as a dataset", location.uri, exc)
        return table.to_pyarrow_dataset().to_table(use_threads=False)
    # the engine answers strings as views: the table's own types, as every reader sees
    return rows.cast(pa.schema(table.schema().to_arrow()))


def sql_engine(where: Where, name: str) -> Any:
    """delta-rs's own query engine (a ``QueryBuilder``) with the table's current version
    registered as ``name``; its ``execute`` answers SQL as Arrow batches, in Rust, on the
    calling thread's process (one partition, like :func:`read_table`'s)."""
    from deltalake import DeltaTable

    location = as_location(where)
    table = DeltaTable(location.uri, storage_options=location.storage_options())
    return _engine_over(table, name)


def _engine_over(table: Any, name: str) -> Any:
    from deltalake import QueryBuilder

    return QueryBuilder({"datafusion.execution.target_partitions": "1"}).register(name, table)
