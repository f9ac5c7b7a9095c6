"""Selections on hand-made snapshots (no Service Bus): what each condition takes, that
what it leaves out is ``unselected`` with its reason, never a duplicate's original, and
that a predicate which cannot apply is refused before any snapshot is read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pyspark.sql import functions as F

from support.snapshot_rows import T0, row
from syphon.core.render import spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.core.selection import Selection, SelectionError
from syphon.job.plan.classify import Against
from syphon.job.plan.planning import check_selection
from syphon.job.plan.reconcile import reconcile_snapshot, wave_messages

NOW = T0 + timedelta(hours=2)


def rows() -> list[dict[str, Any]]:
    return [
        row(0, 1, message_id="a", minutes=1, extra={"tenant": "contoso", "attempt": 3}),
        row(0, 2, message_id="b", minutes=10, extra={"tenant": "fabrikam", "attempt": 1}),
        row(0, 3, path="billing", message_id="c", minutes=20, extra={"tenant": "contoso"}),
        row(1, 4, path="Billing", message_id="d", minutes=30, extra={"when": T0}),
        # the same message twice: the later copy is a duplicate only if the earlier is taken
        row(1, 5, message_id="twin", minutes=40),
        row(1, 6, message_id="twin", minutes=50),
    ]


def verdicts(spark: Any, selection: Selection | None) -> dict[str, tuple[str, str | None]]:
    snapshot = spark.createDataFrame(rows(), spark_schema(SNAPSHOT))
    planned = reconcile_snapshot(
        wave_messages(snapshot, None, None), Against(F.lit(NOW)), selection
    )
    return {
        (r["message_id"] + (f"@{r['sequence_number']}" if r["message_id"] == "twin" else "")): (
            r["verdict"],
            r["reason"],
        )
        for r in planned.collect()
    }


def taken(spark: Any, selection: Selection) -> set[str]:
    out = verdicts(spark, selection)
    for name, (verdict, reason) in out.items():
        if verdict == "unselected":
            assert reason == "not_selected", name
    return {name for name, (verdict, _) in out.items() if verdict != "unselected"}


def test_without_a_selection_nothing_is_unselected(spark: Any) -> None:
    out = verdicts(spark, None)
    assert {v for v, _ in out.values()} == {"replay", "duplicate"}
    assert verdicts(spark, Selection()) == out


def test_each_condition_takes_what_it_names(spark: Any) -> None:
    every = {"a", "b", "c", "d", "twin@5", "twin@6"}
    assert taken(spark, Selection(destinations=("billing",))) == {"c", "d"}  # any case
    assert taken(spark, Selection(message_ids=("a", "d", "nope"))) == {"a", "d"}
    assert taken(
        spark,
        Selection(
            enqueued_from=T0 + timedelta(minutes=10), enqueued_until=T0 + timedelta(minutes=30)
        ),
    ) == {"b", "c"}
    assert taken(spark, Selection(where="properties['tenant'] = 'contoso'")) == {"a", "c"}
    assert taken(spark, Selection(where="typed_properties['attempt'].int > 2")) == {"a"}
    assert taken(spark, Selection(where="properties['when'] like '2026-11-01T12:00%'")) == {"d"}
    assert taken(spark, Selection(where="destination = 'orders' and sequence_number < 3")) == {
        "a",
        "b",
    }
    # every condition given must hold
    assert taken(
        spark, Selection(destinations=("orders",), where="properties['tenant'] = 'contoso'")
    ) == {"a"}
    assert taken(spark, Selection(where="true")) == every


def test_a_copy_left_out_does_not_make_the_one_taken_a_duplicate(spark: Any) -> None:
    out = verdicts(spark, Selection(enqueued_from=T0 + timedelta(minutes=45)))
    assert out["twin@5"] == ("unselected", "not_selected")
    assert out["twin@6"] == ("replay", None)
    both = verdicts(spark, Selection(message_ids=("twin",)))
    assert (both["twin@5"], both["twin@6"]) == (
        ("replay", None),
        ("duplicate", "duplicate_in_snapshot"),
    )


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("no_such_column = 1", "no_such_column"),
        ("destination = ", "--where"),
        ("destination", "string, not true or false"),
    ],
)
def test_a_predicate_that_cannot_apply_is_refused(spark: Any, where: str, said: str) -> None:
    with pytest.raises(SelectionError) as raised:
        check_selection(spark, Selection(where=where))
    assert said in str(raised.value)
    assert raised.value.exit_code == 2
    check_selection(spark, Selection(where="properties['tenant'] is not null"))  # applies
