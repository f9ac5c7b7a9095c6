"""Subscription rule language: SQL filters, correlation filters and actions (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from servicebus_emulator.codec import ParsedMessage
from servicebus_emulator.filters import (
    CorrelationFilter,
    FalseFilter,
    FilterSyntaxError,
    MessageView,
    SqlAction,
    SqlFilter,
    TrueFilter,
    compile_action,
    compile_filter,
)


def view(app: dict[str, Any] | None = None, **system: Any) -> MessageView:
    """A message view; system fields by AMQP properties index name."""
    index = {
        "message_id": 0,
        "to": 2,
        "subject": 3,
        "reply_to": 4,
        "correlation_id": 5,
        "content_type": 6,
        "session_id": 10,
    }
    props: list[Any] = [None] * 13
    for name, value in system.items():
        props[index[name]] = value
    return MessageView(
        ParsedMessage(bare=b"", properties=props, application_properties=dict(app or {}))
    )


def matches(expression: str, m: MessageView, **params: Any) -> bool:
    return compile_filter(SqlFilter(expression, params))(m)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("Color = 'Red'", True),
        ("Color = 'red'", False),
        ("user.Color = 'Red'", True),
        ("color = 'Red'", True),
        ("Color <> 'Red'", False),
        ("Quantity > 10", True),
        ("Quantity >= 11 AND Quantity < 12", True),
        ("Quantity * 2 = 22", True),
        ("Quantity + 0.5 > 11.4", True),
        ("Quantity % 2 = 1", True),
        ("-Quantity < 0", True),
        ("Quantity = '11'", False),
        ("Color = 'Blue' OR Quantity = 11", True),
        ("NOT (Color = 'Red')", False),
        ("Missing = 1", False),
        ("NOT (Missing = 1)", False),
        ("Missing = 1 OR Color = 'Red'", True),
        ("Missing IS NULL", True),
        ("Color IS NOT NULL", True),
        ("Color IN ('Blue', 'Red')", True),
        ("Color NOT IN ('Blue', 'Green')", True),
        ("Color LIKE 'R%'", True),
        ("Color LIKE 'R_d'", True),
        ("Color NOT LIKE '%e%'", False),
        ("Code LIKE '10!%' ESCAPE '!'", True),
        ("Code LIKE '10%'", True),
        ("EXISTS(Color)", True),
        ("EXISTS(Nope)", False),
        ("sys.Label = 'Red'", True),
        ("sys.Subject = 'Red'", True),
        ("sys.CorrelationId = 'important'", True),
        ("sys.MessageId = 'm-1'", True),
        ("sys.SessionId IS NULL", True),
        ("Flag = TRUE", True),
        ("[my prop] = 'x y'", True),
        ("Name = 'O''Brien'", True),
        ("1=1", True),
        ("1=0", False),
    ],
)
def test_sql_filter(expression: str, expected: bool) -> None:
    app = {"Color": "Red", "Quantity": 11, "Flag": True, "Code": "10%", "my prop": "x y"}
    m = view(
        {**app, "Name": "O'Brien"},
        subject="Red",
        correlation_id="important",
        message_id="m-1",
    )
    assert matches(expression, m) is expected


def test_parameters_are_substituted() -> None:
    m = view({"Quantity": 11})
    assert matches("Quantity > @min", m, min=10)
    assert not matches("Quantity > @min", m, **{"@min": 20})


@pytest.mark.parametrize("expression", ["Color = ", "Color = 'Red' AND", "(a = 1", "a ==== 1", ""])
def test_bad_sql_is_a_syntax_error(expression: str) -> None:
    with pytest.raises(FilterSyntaxError):
        compile_filter(SqlFilter(expression))


def test_missing_parameter_is_a_syntax_error() -> None:
    with pytest.raises(FilterSyntaxError, match="@x"):
        compile_filter(SqlFilter("a = @x"))


def test_true_false_filters() -> None:
    assert compile_filter(TrueFilter())(view())
    assert not compile_filter(FalseFilter())(view())


def test_correlation_filter_needs_every_given_field() -> None:
    f = compile_filter(
        CorrelationFilter(correlation_id="important", subject="Red", properties={"n": 1})
    )
    assert f(view({"n": 1}, correlation_id="important", subject="Red"))
    assert not f(view({"n": 2}, correlation_id="important", subject="Red"))
    assert not f(view({"n": 1}, correlation_id="important", subject="Blue"))
    assert not f(view({}, correlation_id="important", subject="Red"))
    assert compile_filter(CorrelationFilter())(view())


def test_action_sets_and_removes() -> None:
    act = compile_action(SqlAction("SET Color = 'BlueProcessed'; SET n = n + 1; REMOVE gone"))
    out = act(view({"Color": "Blue", "n": 1, "gone": "x", "kept": 2}))
    assert out == {"Color": "BlueProcessed", "n": 2, "kept": 2}


def test_action_must_be_set_or_remove() -> None:
    with pytest.raises(FilterSyntaxError):
        compile_action(SqlAction("DELETE x"))
