"""The audit's write path: Spark's executors writing Parquet through delta-rs's object
store (syphon's ``append_dataframe``) against Spark's own Parquet writer (the path it
replaced, which needs a Hadoop connector on object storage), side by side in one run.

    .venv/bin/python tests/benchmarks/bench_audit_write.py [--rows 200000,1000000] [--azurite]

Each size: rows shaped like the audit's (24 columns: ids, names, counts, times, a hash),
generated and cached first; then ``--rounds`` times, alternating, one append with each
writer to a fresh local table (both committed by delta-rs in one transaction), and with
``--azurite`` one append of syphon's writer to a container on a local Azurite
(tests/services). Printed: each append's seconds, and the ratio of the best rounds
(syphon / Spark's writer). Local Spark, 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: azurite.py

from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
from syphon.store.delta import append_dataframe
from syphon.store.location import Location


def audit_like(spark: SparkSession, rows: int) -> DataFrame:
    n = F.col("id")
    cols = [
        F.lit("run-2026-11-24T17-00-00-abcdef").alias("run_id"),
        F.lit("plan").alias("stage"),
        F.current_timestamp().alias("recorded_at"),
        F.concat(F.lit("contoso/x-servicebus-transfer/"), (n % 10).cast("string")).alias(
            "backlog_queue"
        ),
        n.alias("sequence_number"),
        (F.current_timestamp() - F.expr("INTERVAL 1 HOUR")).alias("backlog_enqueued_time"),
        F.lit("contoso").alias("primary"),
        F.concat(F.lit("orders-"), (n % 50).cast("string")).alias("destination"),
        F.sha2(n.cast("string"), 256).substr(1, 32).alias("message_id"),
        F.when(n % 3 == 0, F.concat(F.lit("s-"), (n % 997).cast("string"))).alias("session_id"),
        F.concat(F.lit("k-"), (n % 1009).cast("string")).alias("partition_key"),
        F.concat(F.lit("k-"), (n % 1009).cast("string")).alias("partition_key_effective"),
        F.lit("partition_key").alias("partition_key_source"),
        F.lit("replay").alias("verdict"),
        F.lit(None).cast("string").alias("reason"),
        (n % 4096 + 100).alias("body_size"),
        F.sha2(F.concat(n.cast("string"), F.lit("body")), 256).alias("body_sha256"),
        (n % 4096 + 400).alias("message_bytes"),
        F.lit(None).cast("long").alias("time_to_live_ticks"),
        n.alias("replay_order"),
        (n % 50 + 1).alias("group_size"),
        F.concat(F.lit("b-"), (n / 200).cast("long").cast("string")).alias("batch_id"),
        (n % 200).alias("batch_position"),
        F.lit("planned").alias("outcome"),
    ]
    return spark.range(rows, numPartitions=4).select(*cols)


def spark_writer_append(df: DataFrame, root: Path) -> int:
    """The replaced path: Spark's Parquet writer into the table's folder, then one
    delta-rs commit of the files it wrote."""
    import uuid

    import pyarrow.parquet as pq  # type: ignore[import-untyped]
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"syphon-bench-{uuid.uuid4().hex}"
    df.write.mode("errorifexists").parquet(folder.as_uri())
    adds, rows, schema = [], 0, None
    for file in sorted(folder.glob("*.parquet")):
        meta = pq.ParquetFile(file).metadata
        rows += meta.num_rows
        schema = schema or pq.read_schema(file)
        stats = f'{{"numRecords": {meta.num_rows}}}'
        adds.append(
            AddAction(
                path=f"{folder.name}/{file.name}",
                size=file.stat().st_size,
                partition_values={},
                modification_time=int(time.time() * 1000),
                data_change=True,
                stats=stats,
            )
        )
    create_table_with_add_actions(str(root), Schema.from_arrow(schema), adds, mode="append")
    return rows


def timed(label: str, write: Callable[..., int], *args: object) -> float:
    start = time.monotonic()
    rows = write(*args)
    took = time.monotonic() - start
    print(f"  {label:<34} {took:7.2f} s  ({rows:,} rows)", flush=True)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="200000,1000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--azurite", action="store_true")
    args = parser.parse_args()
    spark = build_spark_session(SparkConfig(master="local[2]", app_name="bench-audit-write"))
    spark.sparkContext.setLogLevel("ERROR")
    azurite = None
    if args.azurite:
        from support.azurite import start_azurite

        azurite = start_azurite()
    try:
        for size in (int(s) for s in args.rows.split(",")):
            df = audit_like(spark, size).cache()
            df.count()
            print(f"{size:,} rows", flush=True)
            with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
                base = Path(tmp)
                spark_s, ours_s = [], []
                for r in range(args.rounds):
                    spark_s.append(
                        timed(
                            "Spark's Parquet writer (before)",
                            spark_writer_append,
                            df,
                            base / f"spark{r}",
                        )
                    )
                    ours_s.append(
                        timed(
                            "executors via the object store",
                            append_dataframe,
                            df,
                            base / f"ours{r}",
                            "b",
                        )
                    )
                print(
                    f"  best: {min(spark_s):.2f} s against {min(ours_s):.2f} s, ratio object "
                    f"store / Spark writer {min(ours_s) / min(spark_s):.2f}",
                    flush=True,
                )
                if azurite is not None:
                    container = azurite.new_container()
                    where = Location(
                        f"az://{container}/audit",
                        f"az://{container}/audit",
                        {
                            "azure_storage_account_name": azurite.account,
                            "azure_storage_account_key": azurite.key,
                            "azure_storage_endpoint": azurite.endpoint,
                            "allow_http": "true",
                        },
                    )
                    for _ in range(args.rounds):
                        timed(
                            "same, to Azurite (loopback)",
                            append_dataframe,
                            df,
                            where.child("audit"),
                            "b",
                        )
            df.unpersist()
    finally:
        if azurite is not None:
            azurite.stop()
        spark.stop()


if __name__ == "__main__":
    main()
