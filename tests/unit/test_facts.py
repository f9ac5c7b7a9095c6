"""What the driver makes of a wave's plan rows (syphon.job.plan.facts): the plan's summary per
destination, the audit rows of the replay's and the settle's outcomes, and what the
replay left behind for the run's later waves (syphon.job.replay.send.left_behind), and the
dead letters a wave leaves waiting for the operator. No Spark:
tests/spark/test_transforms.py checks the outcome rows against Spark's own."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest

from syphon.core.render import arrow_schema
from syphon.core.repair import Repair
from syphon.core.schema import AUDIT, names
from syphon.job.plan.facts import (
    dead_letters_waiting,
    outcome_rows,
    per_destination,
    starts_a_spread_group,
)
from syphon.job.replay.send import credit_rates, left_behind

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)
Q0, Q1 = "contoso/x-servicebus-transfer/0", "contoso/x-servicebus-transfer/1"

SUMMARY = pa.schema(
    [
        ("sequence_number", pa.int64()),
        ("primary", pa.string()),
        ("destination", pa.string()),
        ("verdict", pa.string()),
        ("reason", pa.string()),
        ("group_spread", pa.bool_()),
        ("replay_order", pa.int32()),
        ("original_enqueued_time", pa.timestamp("us", tz="UTC")),
        ("_repaired_names", pa.list_(pa.string())),
    ]
)


def summary_rows(*rows: tuple[Any, ...]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SUMMARY.names, r, strict=True)) for r in rows], SUMMARY)


def test_the_plans_summary_per_destination_from_its_rows() -> None:
    """A plan's rows in the driver give its summary: counts per verdict, spread groups (a
    spread group's first replay row), unknown destinations, the first and last enqueue
    times, and a repair's changes per destination."""
    rows = summary_rows(
        (1, "p", "orders", "replay", None, True, 1, T0, ["set Subject"]),
        (2, "p", "orders", "replay", None, True, 2, T1, ["set Subject", "unset To"]),
        (3, "p", "orders", "ping", None, None, None, T0, None),
        (4, "p", None, "invalid", "message_malformed", None, None, None, None),
        (5, "p", "gone", "invalid", "destination_unknown", None, None, T0, None),
        (6, "p", "gone", "invalid", "too_large", None, None, T0, None),
        (7, "p", "gone", "invalid", "destination_unknown", None, None, T0, None),
        (8, "p", "gone", "invalid", "repair_invalid", None, None, T0, None),
    )
    got = {
        d["destination"]: (
            d["messages"],
            d["replay"],
            d["ping"],
            d["invalid"],
            d["spread_groups"],
            d["destination_unknown"],
        )
        for d in per_destination(rows)
    }
    assert got == {
        "orders": (3, 2, 1, 0, 1, 0),
        None: (1, 0, 0, 1, 0, 0),
        "gone": (4, 0, 0, 4, 0, 2),
    }
    (orders,) = (d for d in per_destination(rows) if d["destination"] == "orders")
    assert (orders["first"], orders["last"]) == (T0, T1)
    assert "repaired" not in orders  # no repair: nothing counted
    repaired = {d["destination"]: d["repaired"] for d in per_destination(rows, Repair(()))}
    assert repaired == {
        "orders": {"set Subject": 2, "unset To": 1},
        None: {},
        "gone": {"invalid: repair_invalid": 1},
    }


def test_a_spread_group_starts_at_its_first_replay_row_and_nulls_start_none() -> None:
    rows = summary_rows(
        (1, "p", "o", "replay", None, True, 1, None, None),
        (2, "p", "o", "replay", None, True, 2, None, None),
        (3, "p", "o", "replay", None, False, 1, None, None),
        (4, "p", "o", "duplicate", None, True, 1, None, None),
        (5, "p", "o", "replay", None, None, 1, None, None),
        (6, "p", "o", "replay", None, True, None, None, None),
        (7, "p", "o", None, None, True, 1, None, None),
    )
    assert starts_a_spread_group(rows).to_pylist() == [True] + [False] * 6


def plan_audit(*rows: dict[str, Any]) -> pa.Table:
    """A plan's audit rows: every column null but those given."""
    full = [{c: r.get(c) for c in names(AUDIT)} for r in rows]
    return pa.Table.from_pylist(full, arrow_schema(AUDIT))


def results(*rows: tuple[str, int, str, str | None]) -> pa.Table:
    return pa.table(
        {
            "backlog_queue": pa.array([r[0] for r in rows], pa.string()),
            "sequence_number": pa.array([r[1] for r in rows], pa.int64()),
            "outcome": pa.array([r[2] for r in rows], pa.string()),
            "detail": pa.array([r[3] for r in rows], pa.string()),
            "transfers": pa.array([1] * len(rows), pa.int32()),
        }
    )


def test_an_outcomes_rows_take_their_keys_from_the_plan_and_their_outcome_from_the_results() -> (
    None
):
    """Each result becomes an audit row of its stage with the message's keys from its plan
    row; the plan row's own outcome, detail, stage and time are not carried; a result the
    plan does not hold keeps only its place."""
    plan = plan_audit(
        {
            "run_id": "r0",
            "stage": "plan",
            "recorded_at": T0,
            "backlog_queue": Q0,
            "sequence_number": 1,
            "message_id": "m1",
            "session_id": "s1",
            "verdict": "replay",
            "body_size": 12,
            "group_spread": True,
            "outcome": "planned",
            "detail": "the operator's reason",
            "job_run_id": "job-7",
        },
        {"backlog_queue": Q0, "sequence_number": 2, "message_id": "m2", "verdict": "invalid"},
    )
    odd, at = "it's \\ a run`", T1 + timedelta(microseconds=7)
    rows = outcome_rows(
        results((Q0, 1, "sent", None), (Q1, 5, "left", "new")), plan, odd, "replay", at
    )
    assert rows.schema == arrow_schema(AUDIT)
    got = {r["sequence_number"]: r for r in rows.to_pylist()}
    assert set(got) == {1, 5}  # one row a result, none for a plan row without one
    first = got[1]
    assert (first["run_id"], first["stage"], first["recorded_at"]) == (odd, "replay", at)
    assert (first["outcome"], first["detail"]) == ("sent", None)
    assert (first["message_id"], first["session_id"], first["body_size"]) == ("m1", "s1", 12)
    assert (first["verdict"], first["group_spread"], first["job_run_id"]) == (
        "replay",
        True,
        "job-7",
    )
    stray = got[5]
    assert (stray["backlog_queue"], stray["outcome"], stray["detail"]) == (Q1, "left", "new")
    assert (stray["run_id"], stray["stage"]) == (odd, "replay")
    assert all(stray[c] is None for c in ("message_id", "verdict", "job_run_id", "body_size"))


def test_an_outcomes_rows_from_a_plan_that_lacks_columns_have_them_null() -> None:
    """A resumed run's plan rows read back from an older table may lack columns."""
    full = plan_audit({"backlog_queue": Q0, "sequence_number": 1, "message_id": "m1"})
    older = full.drop_columns(["source", "repaired", "job_run_id"])
    (row,) = outcome_rows(
        results((Q0, 1, "completed", None)), older, "r1", "settle", T0
    ).to_pylist()
    assert (row["message_id"], row["source"], row["repaired"]) == ("m1", None, None)
    assert row["stage"] == "settle"


def test_only_the_replay_and_the_settle_have_outcome_rows() -> None:
    with pytest.raises(ValueError, match="not an outcome stage"):
        outcome_rows(results(), plan_audit(), "r1", "plan", T0)


def test_what_a_wave_left_behind_is_its_unsent_keys_and_failed_destinations() -> None:
    """What a later wave of the run must not send: the keys of messages this wave did not
    send, except a message that alone stays behind (its backlog copy changed, its TTL ran
    out); keyless messages and keys all sent break nothing; a destination found missing
    or failing is left whole, keyless messages included; a result without an outcome
    breaks nothing."""
    keys = [(1, "failed"), (2, "sent"), (3, "changed"), (4, None), (5, "doubt")]
    keys += [(6, "skipped"), (8, "expired"), (9, "unknown")]
    plan = plan_audit(
        *(
            {
                "backlog_queue": Q0,
                "sequence_number": s,
                "partition_key_effective": k,
                "primary": "p",
                "destination": "orders",
            }
            for s, k in keys
        ),
        {"backlog_queue": Q0, "sequence_number": 7, "primary": "p", "destination": "gone"},
    )
    replayed = results(
        (Q0, 1, "failed", "ServiceBusError"),
        (Q0, 2, "sent", None),
        (Q0, 3, "skipped", "backlog_changed"),
        (Q0, 4, "failed", "ServiceBusError"),
        (Q0, 5, "in_doubt", None),
        (Q0, 6, "skipped", "earlier_batch_failed"),
        (Q0, 7, "failed", "destination_missing"),
        (Q0, 8, "skipped", "expired_before_send"),
        (Q0, 9, None, "ServiceBusError"),  # type: ignore[arg-type]
    )
    left = left_behind(replayed, plan)
    assert left.lanes == {("p", "orders", k) for k in ("failed", "doubt", "skipped")}
    assert dict(left.destinations) == {("p", "gone"): "destination_missing"}


DLQ = "orders/$DeadLetterQueue"


def test_the_dead_letters_a_wave_leaves_waiting_are_those_judged_to_wait() -> None:
    """A dead letter left where it is waits for the operator when it was judged a
    duplicate, a conflict or invalid; not one that failed to send (the next run sends it),
    one the selection left, one without a verdict, nor a message outside a dead-letter
    queue."""
    verdicts = [(DLQ, 1, "duplicate"), (DLQ, 2, "invalid"), (DLQ, 3, "replay")]
    verdicts += [(DLQ, 4, "unselected"), (Q0, 5, "duplicate"), (DLQ, 6, "conflict")]
    verdicts += [(DLQ, 7, None), (DLQ, 8, "conflict")]
    plan = plan_audit(
        *({"backlog_queue": q, "sequence_number": s, "verdict": v} for q, s, v in verdicts)
    )
    settled = results(
        (DLQ, 1, "left", None),
        (DLQ, 2, "left", None),
        (DLQ, 3, "left", None),
        (DLQ, 4, "left", "not_selected"),
        (Q0, 5, "left", None),
        (DLQ, 6, "dead_lettered", None),
        (DLQ, 7, "left", None),
        (DLQ, 8, "left", None),
        (DLQ, 9, "left", None),  # no plan row
    )
    waiting = dead_letters_waiting(settled, plan)
    assert waiting.column_names == ["backlog_queue", "sequence_number", "verdict"]
    assert sorted(waiting.to_pylist(), key=lambda r: r["sequence_number"]) == [
        {"backlog_queue": DLQ, "sequence_number": 1, "verdict": "duplicate"},
        {"backlog_queue": DLQ, "sequence_number": 2, "verdict": "invalid"},
        {"backlog_queue": DLQ, "sequence_number": 8, "verdict": "conflict"},
    ]
    # a settle that left nothing, or only what waits for nobody
    assert dead_letters_waiting(results((DLQ, 1, "completed", None)), plan).num_rows == 0
    assert dead_letters_waiting(results(), plan).num_rows == 0


def test_the_credit_rates_count_what_was_sent_to_each_budgeted_primary() -> None:
    """Per primary with a budget: the budget, and the messages sent there per second of
    the replay's sends (whole credits); nothing without a budget."""
    plan = plan_audit(
        *({"backlog_queue": Q0, "sequence_number": s, "primary": "east"} for s in (1, 2, 3)),
        {"backlog_queue": Q1, "sequence_number": 1, "primary": "west"},
    )
    replayed = results(
        (Q0, 1, "sent", None),
        (Q0, 2, "sent", None),
        (Q0, 3, "failed", "ServiceBusError"),
        (Q1, 1, "sent", None),
    )
    rates = credit_rates(replayed, plan, {"east": 100.0, "north": 50.0}, 0.5)
    assert rates == {
        "replay.credit_budget.east": 100,
        "replay.credit_rate.east": 4,  # two sent in half a second
        "replay.credit_budget.north": 50,
        "replay.credit_rate.north": 0,
    }
    assert credit_rates(replayed, plan, {}, 0.5) == {}
