"""The batch-size bound against the SDK's own measure of the same restored messages."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any

from pyspark.sql import functions as F

from snapshot_rows import T0, row
from syphon.core.schema import SNAPSHOT, spark_schema
from syphon.core.sizing import message_bytes_bound_col
from syphon.job.reconcile import restore
from syphon.servicebus.messages import batch_cost, restored_message


def text(rng: random.Random, longest: int) -> str:
    # lengths around the 1-byte/4-byte length boundary (255) and multi-byte characters
    n = rng.choice([0, 1, rng.randrange(longest + 1), min(longest, 255), min(longest, 256)])
    alphabet = "abcXYZ09-é中😀"
    return "".join(rng.choice(alphabet) for _ in range(n))


def prop_value(rng: random.Random) -> Any:
    return rng.choice([
        None, True, -(2**31), 2**31 - 1, 7, 3.25, text(rng, 400), text(rng, 300).encode(),
        T0 + timedelta(seconds=rng.randrange(10**6)), uuid.UUID(int=rng.getrandbits(128)),
    ])  # fmt: skip


def random_row(rng: random.Random, seq: int) -> dict[str, Any]:
    session = text(rng, 128) or None if rng.random() < 0.4 else None
    key = session if session is not None and rng.random() < 0.5 else None
    if session is None and rng.random() < 0.4:
        key = text(rng, 128) or None
    extra = {f"p{i}-{text(rng, 40)}": prop_value(rng) for i in range(rng.randrange(6))}
    r = row(
        seq % 7, seq, message_id=text(rng, 128) or None, session=session,
        partition_key=key, ttl=timedelta(seconds=rng.randrange(1, 10**7))
        if rng.random() < 0.5 else None, body=bytes(rng.choice([0, 1, 200, 300, 70_000])),
        extra=extra,
    )  # fmt: skip
    for column in ("content_type", "correlation_id", "subject", "to", "reply_to",
                   "reply_to_session_id"):  # fmt: skip
        if rng.random() < 0.5:
            r[column] = text(rng, 128 if column == "reply_to_session_id" else 300) or None
    if rng.random() < 0.3:
        r["application_properties"]["x-ms-scheduledenqueuetimeutc"] = {
            **r["application_properties"]["x-ms-path"],
            "kind": "timestamp",
            "bytes": None,
            "timestamp": T0 + timedelta(days=1),
        }
    return r


def test_the_bound_is_never_below_the_sdk_measure_and_stays_close(spark: Any) -> None:
    rng = random.Random(20261123)
    rows = [random_row(rng, i) for i in range(1, 401)]
    restored = restore(spark.createDataFrame(rows, spark_schema(SNAPSHOT))).where(
        F.col("envelope_reason").isNull()
    )
    bound = message_bytes_bound_col(
        F.col("body_size"), F.col("message_id"), F.col("original_session_id"),
        F.col("partition_key"), F.col("original_scheduled_enqueue_time"),
        F.col("original_application_properties"), F.col("content_type"),
        F.col("correlation_id"), F.col("subject"), F.col("to"), F.col("reply_to"),
        F.col("reply_to_session_id"),
    )  # fmt: skip
    out = restored.withColumn("bound", bound).collect()
    assert len(out) > 300  # the generator makes valid messages
    slack = []
    for r in out:
        rec = r.asDict(recursive=True)
        exact = batch_cost(restored_message(rec))
        assert r["bound"] >= exact, rec["sequence_number"]
        slack.append(r["bound"] - exact)
    # the bound packs almost as tightly as the SDK: a few dozen bytes over per message
    assert max(slack) <= 150, max(slack)
    assert sorted(slack)[len(slack) // 2] <= 60, sorted(slack)[len(slack) // 2]
