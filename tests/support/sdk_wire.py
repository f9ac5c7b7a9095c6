"""Round-trips application properties through the real azure-servicebus AMQP codec.

No server is involved: the SDK's own encoder writes the message and its own decoder
reads it back, so a test sees exactly what a receiver built on the SDK would see
(bytes keys, bytes strings, timestamps as integer milliseconds).
"""

from __future__ import annotations

from typing import Any

from azure.servicebus._pyamqp._decode import decode_payload
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.message import Message
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes

from syphon.core.envelope import TIME_TO_LIVE


def as_received(properties: dict[str, Any]) -> dict[Any, Any]:
    """What the SDK hands a receiver for these application properties."""
    wire = dict(properties)
    if isinstance(wire.get(TIME_TO_LIVE), int):
        wire[TIME_TO_LIVE] = {TYPE: AMQPTypes.long, VALUE: wire[TIME_TO_LIVE]}
    payload = encode_payload(bytearray(), Message(data=[b""], application_properties=wire))
    received = decode_payload(memoryview(bytes(payload))).application_properties
    return dict(received or {})
