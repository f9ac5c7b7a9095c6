"""The batch accounting of encoded messages against the SDK's own."""

from __future__ import annotations

import pytest


def test_the_size_bound_assumes_the_sdks_own_empty_batch_size() -> None:
    from support.python_rules import empty_batch_bytes
    from syphon.core.sizing import EMPTY_BATCH_BYTES

    assert empty_batch_bytes() == EMPTY_BATCH_BYTES  # an SDK upgrade that changes it fails here


@pytest.mark.parametrize("body", [b"", b"x" * 200, b"x" * 300, b"x" * 70_000])
def test_an_encoded_message_costs_what_the_sdk_counts_for_the_same_message(body: bytes) -> None:
    from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch

    from syphon.servicebus.raw_batch import encoded_batch_cost

    message = ServiceBusMessage(body, message_id="m")
    batch = ServiceBusMessageBatch(max_size_in_bytes=2**62)
    batch.add_message(message)
    encoded = batch._amqp_transport.encode_message(message)  # what the SDK counts
    assert encoded_batch_cost(len(encoded)) == batch.size_in_bytes
