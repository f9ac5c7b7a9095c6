"""The notebook's parameters: widgets on Databricks, plain values elsewhere.

``dbutils.widgets`` exists only on a Databricks cluster: here a small stand-in records the
widgets made and answers ``get`` with what a user typed (the only fake in these tests)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from syphon.app.notebook import WIDGETS, Parameters, parameters
from syphon.core.repair import Repair, RepairError
from syphon.core.selection import Selection, SelectionError


class Widgets:
    def __init__(self, typed: dict[str, str]) -> None:
        self.typed = typed
        self.made: dict[str, tuple[str, str]] = {}

    def text(self, name: str, default: str, label: str) -> None:
        self.made[name] = (default, label)

    def get(self, name: str) -> str:
        return self.typed.get(name, self.made[name][0])


class DbUtils:
    def __init__(self, typed: dict[str, str]) -> None:
        self.widgets = Widgets(typed)


def test_values_are_taken_as_they_are_off_databricks() -> None:
    got = parameters(
        config="c.yaml", run_id=" r1 ", destinations="p/orders, p/events", replay="YES"
    )
    assert got == Parameters("c.yaml", "r1", (("p", "orders"), ("p", "events")), "", True)


def test_on_databricks_widgets_are_made_with_the_values_as_defaults_and_read_back() -> None:
    dbutils = DbUtils({"run_id": "typed-run", "replay": "no"})
    got = parameters(dbutils, config="/Volumes/c.yaml", replay="yes")
    assert set(dbutils.widgets.made) == set(WIDGETS)
    assert dbutils.widgets.made["config"][0] == "/Volumes/c.yaml"
    assert dbutils.widgets.made["replay"][0] == "yes"
    assert got.run_id == "typed-run"
    assert got.config == "/Volumes/c.yaml"
    assert got.replay is False
    assert got.destinations == ()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"destinations": "orders"}, "'orders' is not primary/destination"),
        ({"destinations": "p/"}, "'p/' is not primary/destination"),
        ({"replay": "maybe"}, "'maybe' is not yes or no"),
    ],
)
def test_bad_parameters_are_refused_with_the_reason(changes: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parameters(**changes)


def test_the_selection_widgets_make_the_plans_selection() -> None:
    got = parameters(
        select_destinations="orders, billing",
        select_message_ids="a,b",
        select_enqueued_from="2026-11-01T08:00:00Z",
        select_dead_letter_reasons="TTLExpiredException, poison",
        select_where=" true ",
    )
    assert got.selection == Selection(
        destinations=("orders", "billing"),
        message_ids=("a", "b"),
        enqueued_from=datetime(2026, 11, 1, 8, tzinfo=timezone.utc),
        dead_letter_reasons=("TTLExpiredException", "poison"),
        where="true",
    )
    assert parameters().selection is None  # empty widgets: every message
    with pytest.raises(SelectionError, match="select_enqueued_until"):
        parameters(select_enqueued_until="soon")


def test_the_source_widget_names_the_source_to_drain() -> None:
    assert parameters(source=" orders-dlq ").source == "orders-dlq"
    assert parameters().source is None  # empty: the config's default source
    dbutils = DbUtils({"source": "orders-dlq"})
    assert parameters(dbutils).source == "orders-dlq"


def test_a_blank_where_is_refused_under_the_name_the_operator_typed() -> None:
    with pytest.raises(SelectionError, match="select_where is empty"):
        parameters(select_where="   ")
    assert parameters(select_where="").selection is None  # an empty widget: no condition


def test_the_repair_widgets_make_the_plans_repair() -> None:
    got = parameters(
        repair_set_1="retries:long=0", repair_set_3="subject=upper(subject)", repair_unset="a, b"
    )
    assert got.repair is not None
    assert got.repair.describe() == [
        "set retries:long=0",
        "set subject=upper(subject)",
        "unset a",
        "unset b",
    ]
    assert parameters().repair is None  # empty widgets: nothing changed
    with pytest.raises(RepairError, match="not changeable"):
        parameters(repair_unset="MessageId")
    dbutils = DbUtils({"repair_set_2": "n=1"})
    assert parameters(dbutils).repair == Repair.from_options(["n=1"], [])
