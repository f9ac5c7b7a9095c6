"""What the broker holds and answers with: stored messages, session state, faults, the
service's error conditions and its partitioning arithmetic. No behaviour beyond that,
so every other module of the local Service Bus can import it."""

from __future__ import annotations

import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any

from servicebus_emulator.codec import ParsedMessage

PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"
DLQ_SUFFIX = "/$DeadLetterQueue"
#: Where a message goes that the service could not forward (auto-forwarding).
TRANSFER_DLQ_SUFFIX = "/$Transfer" + DLQ_SUFFIX
SUBSCRIPTIONS = "/Subscriptions/"
PARTITION_COUNT = 16
PARTITION_SHIFT = 48  # a partitioned entity's sequence number: partition id in the top bits
MAX_FORWARD_HOPS = 4
PEEK_MAX_COUNT = 250
MAX_DATETIME_MS = 253_402_300_800_000  # DateTime.MaxValue, rounded up, in epoch ms
PEEK_MAX_BYTES = 256 * 1024

ACTIVE, DEFERRED, SCHEDULED = 0, 1, 2

# AMQP error conditions the SDK maps to its exceptions.
NOT_FOUND = "amqp:not-found"
NOT_ALLOWED = "amqp:not-allowed"
SIZE_EXCEEDED = "amqp:link:message-size-exceeded"
QUOTA_EXCEEDED = "amqp:resource-limit-exceeded"
LOCK_LOST = "com.microsoft:message-lock-lost"
SESSION_LOCK_LOST = "com.microsoft:session-lock-lost"
SESSION_CANNOT_BE_LOCKED = "com.microsoft:session-cannot-be-locked"
MESSAGE_NOT_FOUND = "com.microsoft:message-not-found"
SERVER_BUSY = "com.microsoft:server-busy"
ENTITY_DISABLED = "com.microsoft:entity-disabled"
TIMEOUT = "com.microsoft:timeout"
ARGUMENT_ERROR = "com.microsoft:argument-error"
ALREADY_EXISTS = "com.microsoft:entity-already-exists"


class BrokerError(Exception):
    """A request the service would refuse, with its AMQP error condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


@dataclass
class StoredMessage:
    """One message in an entity (or its dead-letter queue)."""

    seq: int
    parsed: ParsedMessage
    enqueued_ms: int
    expires_ms: int | None
    size: int
    session_id: str | None
    state: int = ACTIVE
    scheduled_ms: int | None = None
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until_ms: int | None = None
    dead_letter_source: str | None = None

    @property
    def message_id(self) -> Any:
        return self.parsed.message_id


@dataclass
class SessionState:
    """A session's lock and state."""

    owner: object | None = None
    locked_until_ms: int = 0
    state: bytes | None = None
    updated_ms: int = 0


@dataclass
class Faults:
    """Faults injected on an entity (or on every entity, under ``*``)."""

    unavailable: bool = False
    busy: bool = False
    delay_s: float = 0.0
    partitions_down: set[int] = field(default_factory=set)
    #: sends (transfers of real messages, not pings) still accepted before the entity
    #: starts refusing them as unavailable; None: no such limit
    sends_left: int | None = None

    def any(self) -> bool:
        return (
            self.unavailable
            or self.busy
            or self.delay_s > 0
            or bool(self.partitions_down)
            or self.sends_left is not None
        )


def unavailable(path: str) -> BrokerError:
    """What an entity under the unavailable fault answers."""
    return BrokerError(ENTITY_DISABLED, f"The messaging entity '{path}' is unavailable.")


def partition_of(seq: int) -> int:
    """The partition a sequence number belongs to (0 for unpartitioned entities)."""
    return seq >> PARTITION_SHIFT


def partition_for_key(key: str) -> int:
    """The partition a partition key maps to: stable across runs and processes."""
    return zlib.crc32(key.encode("utf-8")) % PARTITION_COUNT
