"""The restored message: what the Python SDK can and cannot send."""

from __future__ import annotations

from datetime import timedelta

import pytest

from syphon.core.timespan import timedelta_to_ticks
from syphon.servicebus.messages import MAX_SENDABLE_TTL, batch_cost, restored_message


def row(**fields: object) -> dict[str, object]:
    return {"body": b"x", "message_id": "m", **fields}


@pytest.mark.parametrize("days", [49, 50, 365, 10_000])
def test_a_ttl_beyond_what_the_sdk_can_send_is_capped(days: int) -> None:
    original = timedelta(days=days)
    message = restored_message(row(original_time_to_live_ticks=timedelta_to_ticks(original)))
    assert message.time_to_live == min(original, timedelta(seconds=4_294_967))
    assert message.time_to_live <= MAX_SENDABLE_TTL
    assert batch_cost(message) > 0  # the SDK encodes it (a longer TTL raised ValueError)


def test_the_cap_applies_to_the_ttl_the_replay_passes_too() -> None:
    message = restored_message(row(), time_to_live=timedelta(days=400))
    assert message.time_to_live <= MAX_SENDABLE_TTL
    assert batch_cost(message) > 0


def test_the_size_bound_assumes_the_sdks_own_empty_batch_size() -> None:
    from syphon.core.sizing import EMPTY_BATCH_BYTES
    from syphon.servicebus.messages import empty_batch_bytes

    assert empty_batch_bytes() == EMPTY_BATCH_BYTES  # an SDK upgrade that changes it fails here
