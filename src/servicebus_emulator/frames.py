"""What the AMQP layer reads from and writes into frames: addresses, the session filter,
a transfer's messages (one, or a batch), management request bodies, rejections with
the service's tracking information, and .NET ticks."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlparse

from proton import Condition, Data, Delivery, Described, symbol

from servicebus_emulator.codec import (
    AMQP_VALUE,
    ParsedMessage,
    parse_sections,
    read_value,
    split_batch,
    split_sections,
)

SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL_UTC = symbol("com.microsoft:locked-until-utc")
DOTNET_EPOCH_TICKS = 621_355_968_000_000_000


def dotnet_ticks(epoch_ms: int) -> int:
    return DOTNET_EPOCH_TICKS + epoch_ms * 10_000


def entity_from_address(address: str | None) -> str:
    """``amqps://host:port/queue`` -> ``queue``; a bare path is kept."""
    if not address:
        return ""
    if "://" in address:
        return urlparse(address).path.lstrip("/")
    return address.lstrip("/")


def request_body(payload: bytes) -> Any:
    for section in split_sections(payload):
        if section.code == AMQP_VALUE:
            return section.value
    return None


def session_filter(source: Any) -> tuple[bool, str | None]:
    data: Data = source.filter
    data.rewind()
    if data.next() is None:
        return False, None
    try:
        filters = read_value(data)
    except Exception:
        return False, None
    if not isinstance(filters, dict):
        return False, None
    for key, value in filters.items():
        if str(key) == str(SESSION_FILTER):
            if isinstance(value, Described):
                value = value.value
            if isinstance(value, memoryview):
                value = bytes(value)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            return True, None if value is None else str(value)
    return False, None


def parse_transfer(payload: bytes) -> list[tuple[ParsedMessage, int]]:
    sections = split_sections(payload)
    inner = split_batch(sections)
    if inner is None:
        return [(parse_sections(sections), len(payload))]
    return [(parse_sections(parts), len(raw)) for raw, parts in inner]


def tracking_info() -> dict[Any, Any]:
    # The SDK indexes a rejection's info unconditionally, and Proton leaves an empty
    # map off the wire: always send one entry, as the service does.
    return {symbol("com.microsoft:tracking-id"): str(uuid.uuid4())}


def reject(delivery: Any, condition: str, description: str) -> None:
    delivery.local.condition = Condition(condition, description, tracking_info())
    delivery.update(Delivery.REJECTED)


def lock_lost(delivery: Any) -> None:
    reject(
        delivery,
        "com.microsoft:message-lock-lost",
        "The lock supplied is invalid. Either the lock expired, or the message has already "
        "been removed from the queue.",
    )
    delivery.settle()


def text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)
