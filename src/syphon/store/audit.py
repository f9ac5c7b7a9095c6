"""The audit: append-only tables, under ``audit.path`` (engine ``delta-rs``) or in
Spark's catalog (engine ``spark``: ``audit.table`` and ``<audit.table>_runs``).

- ``audit`` — one row per message per run and stage: where the message was found, its
  keys, verdict and reason, sizes and body hash (never the body), the planned batch and
  position; later stages (replay, settle) append their outcomes as rows of their own.
- ``runs`` — the run ledger: one row per run and status change, with counts by verdict,
  operations performed, timings per stage and a fingerprint of the configuration (built
  from secret *references*, never values).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from syphon.core.config import AuditConfig
from syphon.store.delta import append_arrow, append_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from syphon.core.config import SyphonConfig

AUDIT_TABLE = "audit"
RUNS_TABLE = "runs"

#: Where the audit functions read and write: a folder of delta-rs tables, or the config's
#: ``audit`` section, whose engine says which kind of tables and where.
AuditRoot: TypeAlias = "str | os.PathLike[str] | AuditConfig"

#: Audit columns taken from a planned row under another name (the rest keep theirs).
_RENAMED = {
    "backlog_enqueued_time": "enqueued_time",
    "session_id": "original_session_id",
    "time_to_live_ticks": "original_time_to_live_ticks",
    "scheduled_enqueue_time": "original_scheduled_enqueue_time",
}

#: The audit table's columns, in order (see the README for their meaning).
AUDIT_COLUMNS = (
    "run_id", "stage", "recorded_at", "backlog_queue", "sequence_number",
    "backlog_enqueued_time", "primary", "destination", "message_id", "session_id",
    "partition_key", "partition_key_effective", "partition_key_source", "verdict", "reason",
    "body_size", "body_sha256", "message_bytes", "time_to_live_ticks",
    "scheduled_enqueue_time", "replay_order", "group_size", "group_spread",
    "group_span_seconds", "batch_id", "batch_position", "outcome", "detail",
)  # fmt: skip

#: Outcomes recorded per stage: the plan records ``planned``; the replay ``sent``,
#: ``failed``, ``skipped`` or ``in_doubt`` (a crash hid whether the send happened);
#: the settle ``completed``, ``dead_lettered`` or ``left``.
OUTCOMES = {
    "plan": ("planned",),
    "replay": ("sent", "failed", "skipped", "in_doubt"),
    "settle": ("completed", "dead_lettered", "left"),
}

#: Outcomes after which the destination holds the message. ``in_doubt`` is not one: such
#: a message is sent again by the next run (and marked so), never settled unsent.
REPLAYED_OUTCOMES = ("sent",)


def audit_path(root: AuditRoot, table: str) -> Path:
    """A delta-rs table's folder under the audit root."""
    return Path(root.path if isinstance(root, AuditConfig) else root) / table


def _catalog_name(root: AuditRoot, table: str) -> str | None:
    """The catalog table for ``table`` under engine ``spark``, else None."""
    if isinstance(root, AuditConfig) and root.engine == "spark":
        assert root.table is not None
        return root.table if table == AUDIT_TABLE else f"{root.table}_{table}"
    return None


def _append(frame: DataFrame, root: AuditRoot, table: str,
            label: str) -> int:  # fmt: skip
    """Appends ``frame`` to an audit table in one commit; returns how many rows."""
    name = _catalog_name(root, table)
    if name is None:
        return append_dataframe(frame, audit_path(root, table), label)
    assert isinstance(root, AuditConfig)
    frame = frame.persist()
    try:
        rows = frame.count()
        frame.write.format(root.format).mode("append").saveAsTable(name)
    finally:
        frame.unpersist()
    return rows


def _session() -> SparkSession:
    from pyspark.sql import SparkSession

    from syphon.core.errors import SyphonError

    spark = SparkSession.getActiveSession()
    if spark is None:
        raise SyphonError("audit.engine spark reads and writes through Spark: no session")
    return spark


def audit_frame(planned: DataFrame, run_id: str, stage: str, recorded_at: datetime) -> DataFrame:
    """The audit rows of a planned snapshot (the output of ``plan_batches``)."""
    from pyspark.sql import functions as F

    run = {
        "run_id": F.lit(run_id),
        "stage": F.lit(stage),
        "recorded_at": F.lit(recorded_at).cast("timestamp"),
        "outcome": F.lit(OUTCOMES[stage][0]),
        "detail": F.lit(None).cast("string"),
    }
    return planned.select(
        *[(run[c] if c in run else F.col(_RENAMED.get(c, c))).alias(c) for c in AUDIT_COLUMNS]
    )


def write_audit(planned: DataFrame, root: AuditRoot, run_id: str,
                stage: str, recorded_at: datetime) -> int:  # fmt: skip
    """Appends a planned snapshot's audit rows; returns how many."""
    frame = audit_frame(planned, run_id, stage, recorded_at)
    return _append(frame, root, AUDIT_TABLE, f"{stage}-{run_id}")


def replayed_frame(spark: SparkSession, root: AuditRoot) -> DataFrame | None:
    """What earlier runs' replays may have delivered: ``primary``, ``destination``,
    ``message_id``, ``body_sha256`` of the audit rows of stage ``replay`` with a
    :data:`REPLAYED_OUTCOMES` outcome and a MessageId. Read by Spark from the table's
    current files (the audit grows with every run); None before the first audit."""
    from pyspark.sql import functions as F

    rows = read_audit(spark, root)
    if rows is None:
        return None
    return rows.where(
        (F.col("stage") == "replay")
        & F.col("outcome").isin(*REPLAYED_OUTCOMES)
        & F.col("message_id").isNotNull()
    ).select("primary", "destination", "message_id", "body_sha256")


def read_audit(spark: SparkSession, root: AuditRoot) -> DataFrame | None:
    """The audit table's current rows as a Spark DataFrame (None before the first run)."""
    from deltalake import DeltaTable

    from syphon.store.delta import table_exists

    name = _catalog_name(root, AUDIT_TABLE)
    if name is not None:
        return spark.table(name) if spark.catalog.tableExists(name) else None
    path = audit_path(root, AUDIT_TABLE)
    if not table_exists(path):
        return None
    files = DeltaTable(str(path)).file_uris()
    if not files:
        return None
    return spark.read.parquet(*files)


def plan_rows(spark: SparkSession, root: AuditRoot, run_id: str) -> DataFrame:
    """A run's plan rows from the audit.

    Raises:
        SyphonError: the run has no plan rows.
    """
    from pyspark.sql import functions as F

    from syphon.core.errors import SyphonError

    audit = read_audit(spark, root)
    if audit is None:
        where = root.where if isinstance(root, AuditConfig) else root
        raise SyphonError(f"no audit table at {where}: no run was planned there")
    rows = audit.where((F.col("run_id") == run_id) & (F.col("stage") == "plan"))
    return rows


def spread_groups(plan: DataFrame) -> DataFrame:
    """The replay groups (primary, destination, partition key) of a run's plan rows whose
    messages sit in several backlog queues, the most spread first: ``messages``,
    ``backlog_queues`` and ``span_seconds``."""
    from pyspark.sql import functions as F

    return (
        plan.where((F.col("verdict") == "replay") & F.col("group_spread"))
        .groupBy("primary", "destination", "partition_key_effective")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.countDistinct("backlog_queue").alias("backlog_queues"),
            F.max("group_span_seconds").alias("span_seconds"),
        )
        .orderBy(
            F.desc("backlog_queues"),
            F.desc("messages"),
            "primary",
            "destination",
            "partition_key_effective",
        )
    )


def outcome_frame(
    results: DataFrame, planned: DataFrame, run_id: str, stage: str, recorded_at: datetime
) -> DataFrame:
    """Audit rows for a stage's results (``backlog_queue``, ``sequence_number``,
    ``outcome``, ``detail``): the message's keys come from its plan row (``planned``, the
    run's plan rows from the audit); a message the plan never saw keeps only its place."""
    from pyspark.sql import functions as F

    if stage not in OUTCOMES or stage == "plan":
        raise ValueError(f"not an outcome stage: {stage}")
    keys = planned.drop("run_id", "stage", "recorded_at", "outcome", "detail")
    joined = results.select("backlog_queue", "sequence_number", "outcome", "detail").join(
        keys, ["backlog_queue", "sequence_number"], "left"
    )
    types = dict(planned.dtypes)
    run = {
        "run_id": F.lit(run_id),
        "stage": F.lit(stage),
        "recorded_at": F.lit(recorded_at).cast("timestamp"),
    }
    return joined.select(
        *[(run[c] if c in run else F.col(c)).cast(types[c]).alias(c) for c in AUDIT_COLUMNS]
    )


def append_outcomes(
    results: DataFrame,
    planned: DataFrame,
    root: AuditRoot,
    run_id: str,
    stage: str,
    recorded_at: datetime,
) -> int:
    """Appends a stage's results to the audit in one commit; returns how many rows."""
    frame = outcome_frame(results, planned, run_id, stage, recorded_at)
    return _append(frame, root, AUDIT_TABLE, f"{stage}-{run_id}")


def read_runs(root: AuditRoot) -> list[dict[str, Any]]:
    """Every row of the run ledger (small: a few rows per run); empty before the first."""
    from syphon.store.delta import read_table, table_exists

    name = _catalog_name(root, RUNS_TABLE)
    if name is not None:
        spark = _session()
        if not spark.catalog.tableExists(name):
            return []
        return list(spark.table(name).toArrow().to_pylist())

    path = audit_path(root, RUNS_TABLE)
    return read_table(path).to_pylist() if table_exists(path) else []


def config_fingerprint(config: SyphonConfig) -> str:
    """A short hash of the configuration (references only: no secret is in it)."""
    text = json.dumps(config.as_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class RunRecord:
    """One row of the run ledger."""

    run_id: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    config_fingerprint: str
    counts: Mapping[str, int] = field(default_factory=dict)
    operations: Mapping[str, int] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)
    detail: str | None = None
    credits_per_replayed_message: float | None = None


def append_run(record: RunRecord, root: AuditRoot) -> None:
    """Appends a row to the run ledger."""
    import pyarrow as pa  # type: ignore[import-untyped]

    counts = pa.map_(pa.string(), pa.int64())
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("status", pa.string()),
            ("recorded_at", pa.timestamp("us", tz="UTC")),
            ("started_at", pa.timestamp("us", tz="UTC")),
            ("finished_at", pa.timestamp("us", tz="UTC")),
            ("config_fingerprint", pa.string()),
            ("counts", counts),
            ("operations", counts),
            ("timings", pa.map_(pa.string(), pa.float64())),
            ("detail", pa.string()),
            ("credits_per_replayed_message", pa.float64()),
        ]
    )
    row: dict[str, Any] = {
        "run_id": [record.run_id],
        "status": [record.status],
        "recorded_at": [datetime.now(timezone.utc)],
        "started_at": [record.started_at],
        "finished_at": [record.finished_at],
        "config_fingerprint": [record.config_fingerprint],
        "counts": [list(record.counts.items())],
        "operations": [list(record.operations.items())],
        "timings": [list(record.timings.items())],
        "detail": [record.detail],
        "credits_per_replayed_message": [record.credits_per_replayed_message],
    }
    table = pa.table(row, schema=schema)
    name = _catalog_name(root, RUNS_TABLE)
    if name is None:
        append_arrow(table, audit_path(root, RUNS_TABLE))
        return
    assert isinstance(root, AuditConfig)
    _session().createDataFrame(table).write.format(root.format).mode("append").saveAsTable(name)
