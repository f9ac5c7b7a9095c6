"""The report's questions get the same answers from Spark and from delta-rs's engine, on
hand-made audit rows in a real Delta table: every verdict, stage and outcome the report
tells apart, unknown places, spread groups, a slice boundary, another run's rows, a run
id with a quote, and files older than a column."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from support.figures import both_answers
from syphon.core.render import arrow_schema
from syphon.core.schema import AUDIT, names
from syphon.store.audit import AUDIT_TABLE
from syphon.store.figures import TimeSlices

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc)
Q0, Q1, Q2 = (f"contoso/x-servicebus-transfer/{n}" for n in range(3))
DLQ = "orders/$DeadLetterQueue"


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def write(audit: Path, rows: list[dict[str, Any]], leave_out: tuple[str, ...] = ()) -> None:
    """Appends ``rows`` (every other column null) to the audit table, its files without
    the columns ``leave_out`` names (as a table written before they existed)."""
    schema = arrow_schema(AUDIT)
    kept = pa.schema([f for f in schema if f.name not in leave_out])
    full = [{c: r.get(c) for c in names(AUDIT) if c not in leave_out} for r in rows]
    write_deltalake(
        str(audit / AUDIT_TABLE),
        pa.Table.from_pylist(full, schema=kept),
        mode="append",
        schema_mode="merge",
    )


def plan(run: str, seq: int, verdict: str | None, queue: str = Q0, **more: Any) -> dict[str, Any]:
    return {
        "run_id": run,
        "stage": "plan",
        "outcome": "planned",
        "backlog_queue": queue,
        "sequence_number": seq,
        "verdict": verdict,
        "primary": "p",
        "destination": "orders",
        **more,
    }


def outcome(run: str, stage: str, what: str, detail: str | None = None, **more: Any) -> Any:
    return {"run_id": run, "stage": stage, "outcome": what, "detail": detail, **more}


def a_run(run: str) -> list[dict[str, Any]]:
    """One run's rows: spread and unspread groups, waiting verdicts, an unknown place, a
    dead-letter source, outcomes sent, skipped, completed and left."""
    spread = {"group_spread": True}
    return [
        plan(run, 1, "replay", partition_key_effective="a", replay_order=1, **spread,
             group_span_seconds=3.0, backlog_enqueued_time=at(0)),
        plan(run, 2, "replay", Q1, partition_key_effective="a", replay_order=2, **spread,
             group_span_seconds=3.0, backlog_enqueued_time=at(5)),
        plan(run, 3, "replay", Q2, partition_key_effective="a", replay_order=3, **spread,
             group_span_seconds=3.0, backlog_enqueued_time=at(10)),
        # a second message of the group in a queue it already counts: 4 messages, 3 queues
        plan(run, 11, "replay", Q2, partition_key_effective="a", replay_order=4, **spread,
             group_span_seconds=3.0),
        plan(run, 4, "replay", partition_key_effective="b", replay_order=1, **spread,
             group_span_seconds=1.5, backlog_enqueued_time=at(2.5)),
        plan(run, 5, "replay", Q1, partition_key_effective="b", replay_order=2, **spread,
             group_span_seconds=1.5, backlog_enqueued_time=at(7.5)),
        plan(run, 6, "replay", partition_key_effective="c", group_spread=False, replay_order=1,
             backlog_enqueued_time=at(1)),
        plan(run, 7, "duplicate", Q1, partition_key_effective="a", backlog_enqueued_time=at(3)),
        plan(run, 8, "invalid", reason="too_large", backlog_enqueued_time=at(4),
             destination="sessions"),
        plan(run, 9, "invalid", primary=None, destination=None, reason="message_malformed"),
        plan(run, 10, "replay", DLQ, source="dlq", source_entity="orders",
             backlog_enqueued_time=at(6), destination="refunds"),
        outcome(run, "replay", "sent", backlog_queue=Q0, verdict="replay", group_spread=True,
                replay_order=1),
        outcome(run, "replay", "skipped", "destination_missing", backlog_queue=Q1),
        outcome(run, "replay", "sent", source_entity="orders", backlog_queue=DLQ),
        outcome(run, "settle", "completed", backlog_queue=Q0),
        outcome(run, "settle", "left", backlog_queue=Q1),
        outcome(run, "settle", "left", "too_large", source_entity="orders", backlog_queue=DLQ),
    ]  # fmt: skip


def test_both_engines_answer_the_reports_questions_alike(spark: Any, tmp_path: Path) -> None:
    write(tmp_path, a_run("r1") + a_run("other"))
    slices = TimeSlices.spanning(at(0), at(10), 4)  # 2.5 minutes: times on the boundaries
    got = both_answers(spark, tmp_path, "r1", slices)
    # the answers are the run's: another run's rows are not counted
    assert sum(r[1] for e in got["per_entity"] for r in e if r[0] == "count") == 17
    spread = [
        (dict(r)["partition_key_effective"], dict(r)["messages"], dict(r)["backlog_queues"])
        for r in got["spread"]
    ]
    assert spread == [("a", 4, 3), ("b", 2, 2)]
    timeline = {
        (dict(r)["destination"], dict(r)["bucket"]): dict(r)["count"] for r in got["timeline"]
    }
    assert timeline == {
        ("orders", 0): 2,  # 0 and 1 minutes: the next slice starts at 2.5
        ("orders", 1): 2,  # 2.5 and 3
        ("sessions", 1): 1,
        ("orders", 2): 1,
        ("refunds", 2): 1,
        ("orders", 3): 2,  # 7.5, and 10 counted in the last slice
    }
    # the place an unknown one gets, and why the plan kept a message back
    why = {dict(r)["why"]: dict(r)["primary"] for e in [got["per_entity"]] for r in e}
    assert why["invalid: message_malformed"] == "?"
    assert {"duplicate", "invalid: too_large", "skipped: destination_missing", "left"} <= set(why)
    assert "left: too_large" in why


def test_a_run_id_with_a_quote_is_a_value_not_sql(spark: Any, tmp_path: Path) -> None:
    write(tmp_path, a_run("it's") + a_run("' OR ''='"))
    got = both_answers(spark, tmp_path, "it's", TimeSlices.spanning(at(0), at(10), 60))
    assert sum(r[1] for e in got["per_entity"] for r in e if r[0] == "count") == 17


def test_files_older_than_a_column_read_it_as_null(spark: Any, tmp_path: Path) -> None:
    # written before a run recorded its sources: the backlog queue is the entity
    write(tmp_path, a_run("r1")[:5], leave_out=("source", "source_entity", "group_span_seconds"))
    write(tmp_path, a_run("r1")[5:])
    got = both_answers(spark, tmp_path, "r1", TimeSlices.spanning(at(0), at(10), 60))
    entities = {dict(r)["entity"] for r in got["per_entity"]}
    assert {Q0, Q1, Q2, "orders"} <= entities
