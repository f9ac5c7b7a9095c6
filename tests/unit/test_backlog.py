from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.python_rules import parse_backlog_queue_path
from syphon.core.errors import BacklogPathError
from syphon.core.naming import (
    BACKLOG_QUEUE_DESCRIPTION,
    MAX_INDEX,
    BacklogQueue,
    backlog_queue_path,
    backlog_queue_prefix,
    match_backlog_queue_path,
)
from syphon.core.timespan import TIMESPAN_MAX

namespaces = st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{4,48}[A-Za-z0-9]\Z")
indices = st.integers(min_value=0, max_value=MAX_INDEX)


def test_the_seed_example_path_is_built_and_parsed() -> None:
    assert backlog_queue_path("contoso", 0) == "contoso/x-servicebus-transfer/0"
    assert parse_backlog_queue_path("contoso/x-servicebus-transfer/7") == BacklogQueue("contoso", 7)


@given(namespaces, indices)
def test_any_backlog_path_parses_back_to_its_parts(primary: str, index: int) -> None:
    parsed = parse_backlog_queue_path(backlog_queue_path(primary, index))
    assert parsed == BacklogQueue(primary, index)
    assert parsed.path == backlog_queue_path(primary, index)


def test_the_transfer_segment_matches_without_case_like_service_bus_paths() -> None:
    assert match_backlog_queue_path("contoso/X-ServiceBus-Transfer/3") == BacklogQueue("contoso", 3)


@pytest.mark.parametrize(
    "path",
    [
        None,
        "",
        "orders",
        "contoso/x-servicebus-transfer/",
        "contoso/x-servicebus-transfer/01",
        "contoso/x-servicebus-transfer/-1",
        "contoso/x-servicebus-transfer/2147483648",
        "contoso/x-servicebus-transfer/99999999999",
        "contoso/x-servicebus-transfer/1/extra",
        "contoso/x-servicebus-transfer/1/",
        "/contoso/x-servicebus-transfer/1",
        "contoso/x-servicebus-transfers/1",
        "cont/x-servicebus-transfer/1",
        "1contoso/x-servicebus-transfer/1",
        "contoso-/x-servicebus-transfer/1",
        "con_toso/x-servicebus-transfer/1",
        "contoso/x-servicebus-transfer/1\n",
        "contoso/x-servicebus-transfer/a",
        "contoso/x-servicebus-transfer/٣",
    ],
)
def test_what_is_not_a_backlog_path_is_rejected(path: str | None) -> None:
    assert match_backlog_queue_path(path) is None
    if path is not None:
        with pytest.raises(BacklogPathError, match="not a backlog queue path"):
            parse_backlog_queue_path(path)


@pytest.mark.parametrize(
    ("primary", "index"),
    [("abc", 0), ("contoso", -1), ("contoso", MAX_INDEX + 1), ("contoso", True), ("9lives", 1)],
)
def test_a_path_is_not_built_from_bad_parts(primary: str, index: int) -> None:
    with pytest.raises(BacklogPathError):
        backlog_queue_path(primary, index)


def test_the_prefix_lists_exactly_the_backlog_queues_of_one_primary() -> None:
    prefix = backlog_queue_prefix("contoso")
    assert prefix == "contoso/x-servicebus-transfer/"
    assert backlog_queue_path("contoso", 12).startswith(prefix)
    assert not backlog_queue_path("contoso-eu", 1).startswith(prefix)


def test_the_backlog_description_is_the_seeds() -> None:
    kwargs = BACKLOG_QUEUE_DESCRIPTION.as_create_kwargs()
    assert kwargs == {
        "max_size_in_megabytes": 5120,
        "max_delivery_count": 2147483647,
        "default_message_time_to_live": TIMESPAN_MAX,
        "auto_delete_on_idle": TIMESPAN_MAX,
        "lock_duration": timedelta(minutes=1),
        "dead_lettering_on_message_expiration": True,
        "enable_batched_operations": True,
    }
    # TimeSpan.MaxValue is 10675199.02:48:05.4775807
    assert timedelta(days=10675199, hours=2, minutes=48, seconds=5) < TIMESPAN_MAX
    assert TIMESPAN_MAX - timedelta(days=10675199, hours=2, minutes=48, seconds=5) < timedelta(
        seconds=1
    )


def test_a_matching_queue_has_no_differences_and_infinities_compare_equal() -> None:
    existing = BACKLOG_QUEUE_DESCRIPTION.as_create_kwargs()
    existing["default_message_time_to_live"] = timedelta.max  # another spelling of infinite
    existing["requires_session"] = False  # properties the seed leaves at defaults are ignored
    assert BACKLOG_QUEUE_DESCRIPTION.differences(existing) == []


def test_every_differing_property_is_named() -> None:
    existing = BACKLOG_QUEUE_DESCRIPTION.as_create_kwargs()
    existing["lock_duration"] = timedelta(seconds=30)
    existing["max_delivery_count"] = 10
    del existing["enable_batched_operations"]
    diffs = BACKLOG_QUEUE_DESCRIPTION.differences(existing)
    assert [d.split(":")[0] for d in diffs] == [
        "max_delivery_count",
        "lock_duration",
        "enable_batched_operations",
    ]
