import pytest
from hypothesis import given
from hypothesis import strategies as st

from support.python_rules import PartitionKey, effective_partition_key

# Seed 001, "Uso de claves de partición", one row per rule it states:
# (SessionId, PartitionKey, MessageId, RequiresDuplicateDetection) -> key, source, reason
SEED_001 = [
    # SessionId set: it is the key ("Service Bus usa SessionID como clave de partición").
    ("s1", None, "m1", False, "s1", "session_id", None),
    ("s1", None, "m1", True, "s1", "session_id", None),
    # Both set: they must be identical...
    ("s1", "s1", "m1", True, "s1", "session_id", None),
    # ...else the service answers with an invalid-operation exception.
    ("s1", "p1", "m1", False, None, None, "partition_key_differs_from_session_id"),
    ("s1", "S1", None, False, None, None, "partition_key_differs_from_session_id"),
    # PartitionKey without SessionId: PartitionKey is the key.
    (None, "p1", "m1", False, "p1", "partition_key", None),
    (None, "p1", "m1", True, "p1", "partition_key", None),
    # Neither, duplicate detection on: MessageId is the key.
    (None, None, "m1", True, "m1", "message_id", None),
    # Neither, duplicate detection off: MessageId is not a key; round robin.
    (None, None, "m1", False, None, None, None),
    (None, None, None, True, None, None, None),
    (None, None, None, False, None, None, None),
]


@pytest.mark.parametrize(
    ("session_id", "partition_key", "message_id", "dedup", "key", "source", "reason"), SEED_001
)
def test_the_partition_key_follows_seed_001(
    session_id: str | None,
    partition_key: str | None,
    message_id: str | None,
    dedup: bool,
    key: str | None,
    source: str | None,
    reason: str | None,
) -> None:
    result = effective_partition_key(session_id, partition_key, message_id, dedup)
    assert result == PartitionKey(key, source, reason)


def test_unknown_duplicate_detection_is_taken_as_on() -> None:
    assert effective_partition_key(None, None, "m1", None) == PartitionKey("m1", "message_id")


def test_a_session_entity_needs_a_session_id() -> None:
    result = effective_partition_key(None, "p1", "m1", False, requires_session=True)
    assert result.reason == "session_id_required"
    assert effective_partition_key("s", None, None, False, requires_session=True).key == "s"


def test_a_partition_key_longer_than_128_is_invalid() -> None:
    assert effective_partition_key(None, "p" * 129, None, False).reason == "partition_key_too_long"
    assert effective_partition_key(None, "p" * 128, None, False).key == "p" * 128


optional_text = st.none() | st.text(max_size=5)


@given(optional_text, optional_text, optional_text, st.none() | st.booleans())
def test_a_key_is_given_exactly_when_no_reason_is(
    session_id: str | None, partition_key: str | None, message_id: str | None, dedup: bool | None
) -> None:
    result = effective_partition_key(session_id, partition_key, message_id, dedup)
    if result.reason is not None:
        assert (result.key, result.source) == (None, None)
    assert (result.key is None) == (result.source is None)
    if result.key is not None:
        assert result.key in (session_id, partition_key, message_id)
