import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.python_rules import is_infinite_ticks, ticks_to_timedelta, typed_properties
from syphon.core.properties import KEY_DUPLICATE, KEY_NOT_UTF8, typed_value
from syphon.core.timespan import (
    TIMESPAN_MAX,
    TIMESPAN_MAX_TICKS,
    is_infinite,
    timedelta_to_ticks,
)


@given(st.timedeltas(min_value=timedelta(days=-(10**6)), max_value=timedelta(days=10**6)))
def test_ticks_round_trip_any_timedelta(value: timedelta) -> None:
    assert ticks_to_timedelta(timedelta_to_ticks(value)) == value


def test_a_tick_is_100_nanoseconds_and_max_is_infinite() -> None:
    assert timedelta_to_ticks(timedelta(seconds=1)) == 10_000_000
    assert timedelta_to_ticks(timedelta.max) == TIMESPAN_MAX_TICKS
    assert is_infinite(timedelta.max)
    assert is_infinite(TIMESPAN_MAX)
    assert not is_infinite(TIMESPAN_MAX - timedelta(microseconds=1))
    assert is_infinite_ticks(TIMESPAN_MAX_TICKS)


@pytest.mark.parametrize(
    ("value", "kind", "slot", "stored"),
    [
        (None, "null", None, None),
        (True, "bool", "bool", True),
        (7, "int", "int", 7),
        (2**63, "other", "text", repr(2**63)),
        (1.5, "float", "float", 1.5),
        (memoryview(b"ab"), "bytes", "bytes", b"ab"),
        ("s", "string", "string", "s"),
        (uuid.UUID(int=0), "uuid", "text", "00000000-0000-0000-0000-000000000000"),
        (Decimal("1.5"), "other", "text", "Decimal('1.5')"),
        (
            datetime(2024, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))),
            "timestamp",
            "timestamp",
            datetime(2024, 1, 1, tzinfo=timezone.utc),
        ),
        (datetime(2024, 1, 1), "timestamp", "timestamp", datetime(2024, 1, 1, tzinfo=timezone.utc)),
    ],
)
def test_every_value_gets_its_kind_and_one_slot(value, kind, slot, stored) -> None:  # type: ignore[no-untyped-def]
    typed = typed_value(value)
    assert typed["kind"] == kind
    filled = {k: v for k, v in typed.items() if k != "kind" and v is not None}
    assert filled == ({} if slot is None else {slot: stored})


def test_keys_are_decoded_and_bad_keys_reported() -> None:
    typed, problem = typed_properties({b"a": 1, "b": 2})
    assert (sorted(typed), problem) == (["a", "b"], None)
    assert typed_properties({b"\xff": 1})[1] == KEY_NOT_UTF8
    typed, problem = typed_properties({b"a": 1, "a": 2})
    assert problem == KEY_DUPLICATE
    assert typed["a"]["int"] == 1
    assert typed_properties(None) == ({}, None)
