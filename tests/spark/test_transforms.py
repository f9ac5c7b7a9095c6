"""The transforms the run, the store and the report are built of, on hand-made rows:
what to settle, what to send, what is in doubt, the audit's shape, the report's figures."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from syphon.core import schema
from syphon.core.ledger import RunRecord
from syphon.core.render import cast_type, spark_schema, spark_type
from syphon.core.schema import AUDIT, names
from syphon.job.plan.facts import SUMMARY_ONLY, audit_only, outcome_rows, plan_rows
from syphon.job.replay.send import replay_input, still_to_send
from syphon.job.rows import utc
from syphon.job.run.report import left_for_next_run
from syphon.job.settle.passes import settle_queues
from syphon.servicebus.access import Access
from syphon.store import queries

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)
Q0, Q1 = "contoso/x-servicebus-transfer/0", "contoso/x-servicebus-transfer/1"


def audit_rows(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """Audit rows: every column null but those given."""
    full = [{c: r.get(c) for c in names(AUDIT)} for r in rows]
    return spark.createDataFrame(full, spark_schema(AUDIT))


def plan_row(seq: int, verdict: str | None, queue: str = Q0, **more: Any) -> dict[str, Any]:
    return {
        "run_id": "r1",
        "stage": "plan",
        "backlog_queue": queue,
        "sequence_number": seq,
        "verdict": verdict,
        "outcome": "planned",
        **more,
    }


def places(df: DataFrame, *extra: str) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(r[c] for c in ("backlog_queue", "sequence_number", *extra)) for r in df.collect()
    )


def test_nothing_to_settle_is_no_task(spark: SparkSession) -> None:
    """No action, no queue: no task runs (none could reach this namespace)."""
    nowhere = Access(
        "absent",
        "secondary",
        "localhost",
        connection_string="Endpoint=sb://127.0.0.1:9/;SharedAccessKeyName=k;SharedAccessKey=k",
    )
    none = spark.createDataFrame([], spark_schema(schema.SETTLE_ACTION))
    assert settle_queues(none, nowhere, "r").collect() == []


def test_a_resumed_run_sends_only_what_no_earlier_attempt_sent(spark: SparkSession) -> None:
    plan = audit_rows(
        spark,
        [
            plan_row(1, "replay"),
            plan_row(2, "replay"),
            plan_row(3, "duplicate"),
            plan_row(4, "replay"),
            plan_row(5, "replay"),
        ],
    )
    # only "sent" is done: an outcome in doubt, none, or one that sorts after "sent"
    # (skipped) is sent again
    earlier = audit_rows(
        spark,
        [
            {"backlog_queue": Q0, "sequence_number": 1, "stage": "replay", "outcome": "sent"},
            {"backlog_queue": Q0, "sequence_number": 2, "stage": "replay", "outcome": "in_doubt"},
            {"backlog_queue": Q0, "sequence_number": 4, "stage": "replay", "outcome": None},
            {"backlog_queue": Q0, "sequence_number": 5, "stage": "replay", "outcome": "skipped"},
        ],
    )
    assert places(still_to_send(plan, None)) == [(Q0, 1), (Q0, 2), (Q0, 4), (Q0, 5)]
    assert places(still_to_send(plan, earlier)) == [(Q0, 2), (Q0, 4), (Q0, 5)]


def test_the_replay_input_flags_changed_bodies_and_messages_in_doubt(spark: SparkSession) -> None:
    todo = audit_rows(
        spark,
        [
            plan_row(1, "replay", body_sha256="a", primary="contoso", destination="orders"),
            plan_row(2, "replay", body_sha256="b", primary="contoso", destination="orders"),
            plan_row(3, "replay", body_sha256="c", primary="contoso", destination="orders"),
            plan_row(4, "duplicate", body_sha256="d"),
            plan_row(5, "replay", body_sha256="e", primary="contoso", destination="orders"),
        ],
    )
    # 2's and 5's bodies changed, to digests that sort before and after the planned ones
    restored = spark.createDataFrame(
        [(Q0, 1, b"x", "a"), (Q0, 2, b"y", "a"), (Q0, 4, b"z", "d"), (Q0, 5, b"w", "f")],
        "backlog_queue string, sequence_number long, encoded binary, body_sha256 string",
    )
    for name in (
        "message_id",
        "partition_key",
        "original_session_id",
        "content_type",
        "correlation_id",
        "subject",
        "to",
        "reply_to",
        "reply_to_session_id",
    ):
        restored = restored.withColumn(name, restored["body_sha256"].substr(0, 0))
    restored = (
        restored.withColumn("original_time_to_live_ticks", restored["sequence_number"])
        .withColumn(
            "original_scheduled_enqueue_time", restored["sequence_number"].cast("timestamp")
        )
        .withColumn("original_enqueued_time", restored["sequence_number"].cast("timestamp"))
    )
    doubt = spark.createDataFrame(
        [(Q0, 3), (Q0, 3), (Q1, 9)], "backlog_queue string, sequence_number long"
    )
    rows = replay_input(restored, todo, doubt)
    got = places(rows, "snapshot_matches", "in_doubt")
    # 2's and 5's bodies changed, 3 is gone from the snapshot; 3 was left in doubt; 4 is
    # no replay
    assert got == [
        (Q0, 1, True, False),
        (Q0, 2, False, False),
        (Q0, 3, False, True),
        (Q0, 5, False, False),
    ]
    assert places(replay_input(restored, todo, None), "in_doubt") == [
        (Q0, 1, False),
        (Q0, 2, False),
        (Q0, 3, False),
        (Q0, 5, False),
    ]


def test_in_doubt_are_in_doubt_sends_and_the_unrecorded_sends_of_interrupted_runs(
    spark: SparkSession,
) -> None:
    def run(run_id: str, *statuses: str) -> list[RunRecord]:
        return [RunRecord(run_id, s, T0) for s in statuses]

    records = [
        *run("done", "planned", "replaying", "replayed", "done"),
        *run("crashed", "planned", "replaying"),
        *run("planned-only", "planned"),
        # resumed after a crash: its resumed attempt committed its sends
        *run("resumed", "planned", "replaying", "failed", "replaying", "replayed", "done"),
        # of several waves, the second cut off: the first's commit does not cover it
        *run("waves", "planned", "replaying", "replayed", "planned", "replaying"),
    ]
    assert queries.interrupted_runs(records) == ["crashed", "waves"]
    records = records[:-5]
    audit = audit_rows(
        spark,
        [
            {**plan_row(1, "replay"), "run_id": "done"},
            {
                "run_id": "done",
                "stage": "replay",
                "backlog_queue": Q0,
                "sequence_number": 1,
                "outcome": "in_doubt",
            },
            {**plan_row(2, "replay"), "run_id": "crashed"},
            {**plan_row(3, "replay"), "run_id": "crashed"},
            {**plan_row(4, "duplicate"), "run_id": "crashed"},
            {
                "run_id": "crashed",
                "stage": "replay",
                "backlog_queue": Q0,
                "sequence_number": 3,
                "outcome": "sent",
            },
            {**plan_row(5, "replay"), "run_id": "planned-only"},
            {**plan_row(6, None), "run_id": "crashed"},
        ],
    )
    doubt = queries.in_doubt_messages(audit, queries.interrupted_runs(records))
    # 1 was recorded in doubt; 2 was planned by a run that crashed before recording it;
    # 3 that run recorded; 4 was no replay; 5's run never reached its replay
    assert places(doubt) == [(Q0, 1), (Q0, 2)]
    assert places(queries.in_doubt_messages(audit, [])) == [(Q0, 1)]


def with_the_rest_null(planned: DataFrame) -> DataFrame:
    """``planned`` with every column the plan's audit rows read that it lacks, null."""
    for f in AUDIT:
        if f.name not in planned.columns and f.name not in ("backlog_enqueued_time", "session_id"):
            planned = planned.selectExpr("*", f"null as `{f.name}`")
    for col in ("original_time_to_live_ticks", "original_scheduled_enqueue_time"):
        planned = planned.selectExpr("*", f"null as `{col}`")
    return planned


def test_the_audit_rows_of_a_plan_have_exactly_the_audit_schema(spark: SparkSession) -> None:
    planned = spark.createDataFrame(
        [(Q0, 1, T0, "s1", 7, "replay", 2, None)],
        "backlog_queue string, sequence_number long, enqueued_time timestamp, "
        "original_session_id string, replay_order int, verdict string, group_size long, "
        "body_size long",
    )
    planned = with_the_rest_null(planned)
    rows = queries.plan_audit_rows(planned, "r1", T0)
    assert [(f.name, f.dataType) for f in rows.schema] == [
        (f.name, f.dataType) for f in spark_schema(AUDIT)
    ]
    (row,) = rows.collect()
    assert (row["run_id"], row["stage"], row["outcome"], row["session_id"]) == (
        "r1",
        "plan",
        "planned",
        "s1",
    )
    # the run's values are values, whatever their characters; its time to the microsecond
    odd, at = "it's \\ a run`", T0 + timedelta(microseconds=7)
    (ours,) = queries.plan_audit_rows(planned, odd, at, "j'1").collect()
    assert (ours["run_id"], ours["job_run_id"], utc(ours["recorded_at"])) == (odd, "j'1", at)
    (late,) = queries.outcome_audit_rows(
        planned.selectExpr(
            "backlog_queue", "sequence_number", "'sent' AS outcome", "NULL AS detail"
        ),
        rows,
        odd,
        "replay",
        at,
    ).collect()
    assert (late["run_id"], utc(late["recorded_at"]), late["session_id"]) == (odd, at, "s1")
    results = spark.createDataFrame(
        [(Q0, 1, "sent", None), (Q1, 5, "left", "new")],
        "backlog_queue string, sequence_number long, outcome string, detail string",
    )
    outcomes = queries.outcome_audit_rows(results, rows, "r1", "settle", T0)
    assert [(f.name, f.dataType) for f in outcomes.schema] == [
        (f.name, f.dataType) for f in spark_schema(AUDIT)
    ]
    got = {
        (r["sequence_number"], r["verdict"], r["stage"], r["outcome"]) for r in outcomes.collect()
    }
    assert got == {(1, "replay", "settle", "sent"), (5, None, "settle", "left")}
    with pytest.raises(ValueError, match="not an outcome stage"):
        queries.outcome_audit_rows(results, rows, "r1", "plan", T0)


def test_a_cast_to_any_schema_types_name_gives_that_type(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    kinds = {
        f.type
        for table in vars(schema).values()
        if isinstance(table, tuple) and table and all(isinstance(f, schema.Field) for f in table)
        for f in table
    }
    assert {"string", "timestamp", "properties"} <= kinds
    frame = spark.range(1).select(
        *[F.lit(None).cast(cast_type(k)).alias(f"c{i}") for i, k in enumerate(sorted(kinds))]
    )
    assert [f.dataType for f in frame.schema] == [spark_type(k) for k in sorted(kinds)]


def test_what_earlier_runs_replayed_is_what_they_sent_with_a_message_id(
    spark: SparkSession,
) -> None:
    audit = audit_rows(
        spark,
        [
            {
                "stage": "replay",
                "outcome": "sent",
                "primary": "p",
                "destination": "d",
                "message_id": "m1",
                "body_sha256": "h",
            },
            {"stage": "replay", "outcome": "in_doubt", "message_id": "m2"},
            {"stage": "replay", "outcome": "sent", "message_id": None},
            {"stage": "plan", "outcome": "planned", "message_id": "m3"},
        ],
    )
    got = [tuple(r) for r in queries.replayed_messages(audit).collect()]
    assert got == [("p", "d", "m1", "h")]


def test_spread_groups_are_replay_groups_over_several_queues_most_spread_first(
    spark: SparkSession,
) -> None:
    def g(
        seq: int, queue: str, key: str | None, spread: bool | None, verdict: str = "replay"
    ) -> dict[str, Any]:
        return plan_row(
            seq,
            verdict,
            queue,
            primary="p",
            destination="d",
            partition_key_effective=key,
            group_spread=spread,
            group_span_seconds=float(seq),
        )

    plan = audit_rows(
        spark,
        [
            g(1, Q0, "a", True),
            g(2, Q1, "a", True),
            g(3, "c/x-servicebus-transfer/2", "a", True),
            g(4, Q0, "b", True),
            g(5, Q1, "b", True),
            g(6, Q0, "c", False),
            g(7, Q0, None, None),
            g(8, Q1, "d", True, verdict="duplicate"),
        ],
    )
    got = [
        (r["partition_key_effective"], r["messages"], r["backlog_queues"], r["span_seconds"])
        for r in queries.spread_groups(plan).collect()
    ]
    assert got == [("a", 3, 3, 3.0), ("b", 2, 2, 5.0)]


def test_the_reports_figures(spark: SparkSession) -> None:
    def at(minutes: float) -> datetime:
        return T0 + timedelta(minutes=minutes)

    rows = audit_rows(
        spark,
        [
            plan_row(1, "replay", primary="p", destination="orders", backlog_enqueued_time=at(0)),
            plan_row(2, "replay", primary="p", destination="orders", backlog_enqueued_time=at(10)),
            plan_row(3, "invalid", primary="p", destination="orders", backlog_enqueued_time=at(5)),
            plan_row(4, "invalid", primary=None, destination=None, backlog_enqueued_time=None),
            {"stage": "replay", "outcome": "sent", "backlog_queue": Q0, "sequence_number": 1},
            {
                "stage": "replay",
                "outcome": "skipped",
                "detail": "destination_missing",
                "backlog_queue": Q0,
                "sequence_number": 2,
            },
            {
                "stage": "settle",
                "outcome": "left",
                "detail": None,
                "backlog_queue": Q0,
                "sequence_number": 2,
            },
            {"stage": "settle", "outcome": "completed", "backlog_queue": Q0, "sequence_number": 1},
        ],
    )
    plan = rows.where("stage = 'plan'")
    by_place = {
        (r["primary"], r["destination"], r["verdict"]): (r["messages"], r["first"], r["last"])
        for r in queries.verdicts_per_destination(plan).collect()
    }
    naive = {m: at(m).replace(tzinfo=None) for m in (0, 5, 10)}
    assert by_place == {
        ("p", "orders", "replay"): (2, naive[0], naive[10]),
        ("p", "orders", "invalid"): (1, naive[5], naive[5]),
        (None, None, "invalid"): (1, None, None),
    }
    # the report reads the same figures from its one aggregate of the run's rows (an
    # unknown place named ``?``): entity by entity, summed
    from_figures: dict[tuple[str, str, str], list[Any]] = {}
    for r in queries.by_source_entity(rows).collect():
        if r["stage"] == "plan":
            got = from_figures.setdefault((r["primary"], r["destination"], r["verdict"]), [0])
            got[0] += r["count"]
            got[1:] = [r["first"], r["last"]]
    assert {k: tuple(v) for k, v in from_figures.items()} == {
        ("p", "orders", "replay"): (2, naive[0], naive[10]),
        ("p", "orders", "invalid"): (1, naive[5], naive[5]),
        ("?", "", "invalid"): (1, None, None),
    }
    start = at(0).timestamp()
    timeline = queries.outage_timeline(plan, start, 300.0, 2).collect()
    assert {r["bucket"]: r["count"] for r in timeline} == {0: 1, 1: 2}  # 10 is in the last
    left = left_for_next_run(queries.by_source_entity(rows).collect())
    assert [tuple(r.values()) for r in left] == [
        ("replay", "skipped", "destination_missing", 1),
        ("settle", "left", None, 1),
    ]


def test_the_reports_figures_per_source_entity(spark: SparkSession) -> None:
    dlq = "orders/$DeadLetterQueue"
    rows = audit_rows(
        spark,
        [
            plan_row(1, "replay", backlog_queue=dlq, source_entity="orders", source="dlq"),
            plan_row(
                2,
                "invalid",
                reason="too_large",
                backlog_queue=dlq,
                source_entity="orders",
                source="dlq",
            ),
            plan_row(3, "replay"),  # recorded before sources: its backlog queue is its entity
            {"stage": "replay", "outcome": "sent", "source_entity": "orders", "backlog_queue": dlq},
            {
                "stage": "settle",
                "outcome": "completed",
                "source_entity": "orders",
                "backlog_queue": dlq,
            },
            {
                "stage": "settle",
                "outcome": "left",
                "detail": "too_large",
                "source_entity": "orders",
                "backlog_queue": dlq,
            },
            {
                "stage": "replay",
                "outcome": "skipped",
                "detail": "destination_missing",
                "backlog_queue": Q0,
            },
        ],
    )
    figures = queries.by_source_entity(rows).collect()
    got = sorted(
        (r["entity"], r["stage"], r["outcome"], r["why"] or "-", r["count"]) for r in figures
    )
    assert got == [
        (Q0, "plan", "planned", "-", 1),
        (Q0, "replay", "skipped", "skipped: destination_missing", 1),
        ("orders", "plan", "planned", "-", 1),
        ("orders", "plan", "planned", "invalid: too_large", 1),
        ("orders", "replay", "sent", "-", 1),
        ("orders", "settle", "completed", "-", 1),
        ("orders", "settle", "left", "left: too_large", 1),
    ]
    # the same rows name the run's sources and what it left
    assert {r["source"] for r in figures if r["stage"] == "plan"} == {"dlq", None}
    assert [tuple(r.values()) for r in left_for_next_run(figures)] == [
        ("replay", "skipped", "destination_missing", 1),
        ("settle", "left", "too_large", 1),
    ]


def test_the_reports_count_of_spread_groups_counts_each_group_once(spark: SparkSession) -> None:
    plan = audit_rows(
        spark,
        [
            plan_row(
                i,
                "replay",
                primary="p",
                destination="orders",
                partition_key_effective=k,
                group_spread=spread,
                replay_order=order,
            )
            for i, (k, spread, order) in enumerate(
                [("a", True, 1), ("a", True, 2), ("b", False, 1), ("c", True, 1)]
            )
        ],
    )
    (row,) = queries.verdicts_per_destination(plan).collect()
    assert (row["messages"], row["spread_groups"]) == (4, 2)
    (figures,) = queries.by_source_entity(plan).collect()  # the report's aggregate counts the same
    assert (figures["count"], figures["spread_groups"]) == (4, 2)


def test_a_plans_rows_in_the_driver_are_its_audit_rows_and_the_outcomes_sparks(
    spark: SparkSession,
) -> None:
    """``plan_rows`` collects the plan's audit rows with the summary's own columns, and
    the outcome rows the driver makes of them (syphon.job.plan.facts.outcome_rows) are the
    rows Spark's join makes (queries.outcome_audit_rows), column for column."""
    planned = spark.createDataFrame(
        [(Q0, 1, T0, "s1", 7, "replay", 2, ["set Subject"]), (Q0, 2, T1, None, 1, "ping", 1, None)],
        "backlog_queue string, sequence_number long, enqueued_time timestamp, "
        "original_session_id string, replay_order int, verdict string, group_size long, "
        "_repaired_names array<string>",
    )
    planned = with_the_rest_null(planned)
    planned = planned.selectExpr("*", "enqueued_time AS original_enqueued_time")
    collected = plan_rows(planned, "r1", T0, "job-1")
    assert collected.column_names == [*names(AUDIT), *SUMMARY_ONLY]
    assert collected.column("_repaired_names").to_pylist() == [["set Subject"], None]
    audit = audit_only(collected)
    assert audit.column_names == list(names(AUDIT))
    assert audit.column("job_run_id").to_pylist() == ["job-1", "job-1"]

    results = spark.createDataFrame(
        [(Q0, 1, "sent", None), (Q1, 5, "skipped", "destination_missing")],
        "backlog_queue string, sequence_number long, outcome string, detail string",
    )
    at = T1 + timedelta(microseconds=3)
    ours = outcome_rows(results.toArrow(), audit, "r2", "replay", at)
    rows = queries.plan_audit_rows(planned, "r1", T0, "job-1")
    theirs = queries.outcome_audit_rows(results, rows, "r2", "replay", at).collect()
    key = lambda r: r["sequence_number"]  # noqa: E731
    assert sorted(ours.to_pylist(), key=key) == sorted(
        ({c: cell(v) for c, v in r.asDict().items()} for r in theirs), key=key
    )


def cell(value: Any) -> Any:
    """A value Spark collected, as Arrow hands it over (timestamps in UTC)."""
    return utc(value) if isinstance(value, datetime) else value


DLQ = "orders/$DeadLetterQueue"


def test_a_discard_turns_what_it_takes_into_discarded_with_the_operators_reason(
    spark: SparkSession,
) -> None:
    from syphon.core.discard import DUPLICATES, SELECTED, Discard
    from syphon.job.plan.reconcile import with_discards

    classified = spark.createDataFrame(
        [
            (1, "replay", None),
            (2, "duplicate", "already_replayed"),
            (3, "duplicate", "duplicate_in_snapshot"),
            (4, "invalid", "path_missing"),
            (5, "unselected", "not_selected"),
            (6, "conflict", "message_id_reused_after_replay"),
        ],
        "sequence_number long, verdict string, reason string",
    )

    def judged(discard: Discard | None) -> dict[int, tuple[str, str | None, str | None]]:
        out = with_discards(classified, discard).collect()
        return {r["sequence_number"]: (r["verdict"], r["reason"], r["detail"]) for r in out}

    untouched = {
        r["sequence_number"]: (r["verdict"], r["reason"], None) for r in classified.collect()
    }
    assert judged(None) == untouched
    assert judged(Discard(DUPLICATES, "copies")) == {
        **untouched,
        2: ("discarded", "already_replayed", "copies"),
        3: ("discarded", "duplicate_in_snapshot", "copies"),
    }
    assert judged(Discard(SELECTED, "poison")) == {
        **{seq: ("discarded", "operator_selected", "poison") for seq in (1, 2, 3, 4, 6)},
        5: ("unselected", "not_selected", None),  # what the selection leaves stays
    }


def test_dead_letters_an_earlier_run_left_waiting_as_they_wait_now_are_found(
    spark: SparkSession,
) -> None:
    """Of the dead letters a wave leaves waiting (tests/unit/test_facts.py), those an
    earlier run's settle left where they are with the same waiting verdict."""
    held = spark.createDataFrame(
        [(DLQ, 1, "duplicate"), (DLQ, 2, "invalid")],
        "backlog_queue string, sequence_number long, verdict string",
    )
    audit = audit_rows(
        spark,
        [
            {
                "run_id": "earlier",
                "stage": "settle",
                "backlog_queue": DLQ,
                "sequence_number": 1,
                "verdict": "duplicate",
                "outcome": "left",
            },
            {
                "run_id": "earlier",
                "stage": "settle",
                "backlog_queue": DLQ,
                "sequence_number": 2,
                "verdict": "invalid",
                "outcome": "completed",
            },
            {
                "run_id": "selective",  # left only because its selection left it out
                "stage": "settle",
                "backlog_queue": DLQ,
                "sequence_number": 2,
                "verdict": "unselected",
                "outcome": "left",
            },
            {
                "run_id": "other",  # left waiting, but as something else then
                "stage": "settle",
                "backlog_queue": DLQ,
                "sequence_number": 2,
                "verdict": "duplicate",
                "outcome": "left",
            },
            {
                "run_id": "r1",
                "stage": "settle",
                "backlog_queue": DLQ,
                "sequence_number": 2,
                "outcome": "left",
            },  # this run's own row is no earlier run's
        ],
    )
    assert places(queries.waiting_before(audit, held, "r1")) == [(DLQ, 1)]
