"""A run's ``--set`` expressions are judged against the restored snapshot's columns before
anything is peeked: their AMQP types, or exit 2 with Spark's own words."""

from __future__ import annotations

from typing import Any

import pytest

from syphon.core.repair import Repair, RepairError
from syphon.job.repair import check_repair


def repair(*sets: str) -> Repair:
    made = Repair.from_options(list(sets), [])
    assert made is not None
    return made


def test_each_set_gets_the_type_its_expression_gives_or_the_one_it_names(spark: Any) -> None:
    checked = check_repair(
        spark,
        repair(
            "tenant=upper(properties['tenant'])",
            "retries:long=0",
            "attempt=1",
            "subject=concat(subject, '-fixed')",
            "seen=original_enqueued_time",
            "flag=typed_properties['x'].bool",
            "time_to_live=INTERVAL 2 HOURS",
        ),
    )
    assert checked is not None
    assert {c.name: c.kind for c in checked.changes} == {
        "tenant": "string",
        "retries": "long",
        "attempt": "int",
        "subject": "string",
        "seen": "timestamp",
        "flag": "boolean",
        "time_to_live": "milliseconds",
    }
    assert check_repair(spark, None) is None
    unset_only = Repair.from_options([], ["tenant"])
    assert check_repair(spark, unset_only) == unset_only  # an unset has nothing to judge


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("n=upper(", "--set n=upper("),
        ("n=no_such_column", "no_such_column"),
        ("n=cast(1 as decimal(10,2))", "decimal(10,2)"),
        ("n=map('a', 1)", "map<string,int>"),
        ("scheduled_enqueue_time='tomorrow'", "takes a timestamp"),
        ("time_to_live='an hour'", "time_to_live takes a"),
        ("n:decimal=1", "not an AMQP type"),
    ],
)
def test_an_expression_that_cannot_be_set_exits_2_before_anything_is_read(
    spark: Any, option: str, said: str
) -> None:
    with pytest.raises(RepairError) as refused:
        check_repair(spark, repair(option))
    assert said in str(refused.value)
    assert refused.value.exit_code == 2
    assert refused.value.fix  # every refusal names the fix
