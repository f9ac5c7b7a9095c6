from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.envelope_cases import REASON_CASES
from support.python_rules import ENVELOPE_REASONS as REASONS
from support.python_rules import restore_from_backlog
from support.sdk_wire import as_received
from syphon.core.envelope import (
    PATH,
    SCHEDULED_ENQUEUE_TIME,
    SESSION_ID,
    TIME_TO_LIVE,
    Envelope,
    EnvelopeError,
    to_backlog_properties,
)
from syphon.core.properties import typed_value
from syphon.core.timespan import TIMESPAN_MAX, TIMESPAN_MAX_TICKS

texts = st.text(min_size=1, max_size=40)
destinations = st.text(min_size=1, max_size=60).filter(lambda s: "x-servicebus-transfer" not in s)
property_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
own_properties = st.dictionaries(
    st.text(min_size=1, max_size=15).filter(lambda k: not k.startswith("x-ms-")),
    property_values,
    max_size=5,
)
# What a timestamp survives on the wire: whole milliseconds.
scheduled_times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(9000, 1, 1), timezones=st.just(timezone.utc)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
ttls = st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=3650))
envelopes = st.builds(
    Envelope,
    destination=destinations,
    session_id=st.none() | st.text(min_size=1, max_size=128),
    time_to_live=st.none() | ttls | st.just(TIMESPAN_MAX) | st.just(timedelta.max),
    scheduled_enqueue_time_utc=st.none() | scheduled_times,
    application_properties=own_properties,
)


@given(envelopes)
def test_any_original_comes_back_from_its_backlog_form_through_the_sdk(original: Envelope) -> None:
    received = as_received(to_backlog_properties(original))
    restored = restore_from_backlog(received)

    assert restored.reason is None
    assert restored.destination == original.destination
    assert restored.session_id == original.session_id
    infinite = original.time_to_live is None or original.time_to_live >= TIMESPAN_MAX
    assert restored.time_to_live == (None if infinite else original.time_to_live)
    assert restored.scheduled_enqueue_time_utc == original.scheduled_enqueue_time_utc
    assert set(restored.application_properties) == set(original.application_properties)
    for key, value in original.application_properties.items():
        sent = typed_value(value.encode() if isinstance(value, str) else value)
        assert restored.application_properties[key] == sent


def test_only_the_aliases_that_are_set_are_written() -> None:
    props = to_backlog_properties(Envelope(destination="orders"))
    assert props == {PATH: "orders"}


def test_ttl_travels_as_dotnet_ticks_and_the_scheduled_time_as_utc() -> None:
    when = datetime(2030, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    props = to_backlog_properties(
        Envelope(
            destination="orders",
            session_id="s-1",
            time_to_live=timedelta(minutes=1),
            scheduled_enqueue_time_utc=when,
        )
    )
    assert props[TIME_TO_LIVE] == 600_000_000
    assert props[SCHEDULED_ENQUEUE_TIME] == datetime(2030, 5, 1, 10, 0, tzinfo=timezone.utc)
    assert props[SCHEDULED_ENQUEUE_TIME].tzinfo == timezone.utc
    assert props[SESSION_ID] == "s-1"


@pytest.mark.parametrize(
    ("envelope", "message"),
    [
        (Envelope(destination=""), "non-empty"),
        (Envelope(destination="a" * 261), "longer than 260"),
        (Envelope(destination="contoso/x-servicebus-transfer/1"), "itself a backlog queue"),
        (Envelope(destination="q", application_properties={PATH: "other"}), "reserved alias"),
        (Envelope(destination="q", session_id=""), "session id"),
        (Envelope(destination="q", session_id="s" * 129), "longer than 128"),
        (Envelope(destination="q", time_to_live=timedelta(0)), "positive"),
    ],
)
def test_an_original_that_cannot_be_enveloped_is_refused(envelope: Envelope, message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        to_backlog_properties(envelope)


def test_every_reason_has_a_case() -> None:
    assert set(REASON_CASES) == set(REASONS)


@pytest.mark.parametrize(("reason", "properties"), REASON_CASES.items())
def test_bad_backlog_input_is_a_reason_not_an_exception(
    reason: str, properties: dict[Any, Any]
) -> None:
    assert restore_from_backlog(properties).reason == reason


def test_the_first_problem_wins_and_what_could_be_read_is_kept() -> None:
    restored = restore_from_backlog(
        {b"x-ms-path": b"orders", b"x-ms-sessionid": 5, b"x-ms-timetolive": -1}
    )
    assert restored.reason == "session_id_wrong_type"
    assert restored.destination == "orders"


def test_the_seed_tables_reading_gives_the_scheduled_time_but_no_destination() -> None:
    restored = restore_from_backlog({b"x-ms-path": 1_700_000_000_000})
    assert restored.destination is None
    assert restored.scheduled_enqueue_time_utc == datetime(
        2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc
    )
    assert restored.reason == "path_holds_timestamp"


def test_an_infinite_ttl_in_ticks_means_no_ttl() -> None:
    restored = restore_from_backlog({b"x-ms-path": b"q", b"x-ms-timetolive": TIMESPAN_MAX_TICKS})
    assert restored.reason is None
    assert restored.time_to_live is None


def test_str_keys_and_values_are_read_like_bytes() -> None:
    restored = restore_from_backlog({"x-ms-path": "orders", "x-ms-sessionid": "s", "k": "v"})
    assert (restored.destination, restored.session_id, restored.reason) == ("orders", "s", None)
    assert restored.application_properties["k"]["string"] == "v"


def test_no_properties_at_all_is_a_missing_path() -> None:
    assert restore_from_backlog(None).reason == "path_missing"
