"""An entity's store: its messages, their order, locks and sequence numbers, and the
topic and subscription rules that decide which store a message lands in. Called with
the broker's lock held; time comes in as an argument (the broker's clock)."""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass
from typing import Any

from servicebus_emulator.codec import ParsedMessage, replace_application_properties
from servicebus_emulator.entities import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.filters import (
    Action,
    FilterSyntaxError,
    Predicate,
    RuleSpec,
    compile_action,
    compile_filter,
)
from servicebus_emulator.model import (
    ACTIVE,
    ARGUMENT_ERROR,
    DLQ_SUFFIX,
    PARTITION_COUNT,
    PARTITION_SHIFT,
    SCHEDULED,
    SUBSCRIPTIONS,
    TRANSFER_DLQ_SUFFIX,
    BrokerError,
    SessionState,
    StoredMessage,
    partition_of,
)


class SequenceSource:
    """Sequence numbers of an entity: one counter per partition.

    Unpartitioned entities count 1, 2, 3…; partitioned ones put the partition id in the
    top 16 bits, as the service does, so numbers are unique across partitions and a
    peek by sequence number walks one partition after another.
    """

    def __init__(self, partitioned: bool) -> None:
        self.partitioned = partitioned
        self.counters = [1] * (PARTITION_COUNT if partitioned else 1)
        self.round_robin = 0

    def next(self, partition: int) -> int:
        local = self.counters[partition]
        self.counters[partition] += 1
        return (partition << PARTITION_SHIFT) | local if self.partitioned else local


class Entity:
    """A queue, a subscription or a dead-letter queue: its store and its rules."""

    def __init__(
        self,
        spec: QueueSpec,
        path: str,
        now: int,
        dead_letter: bool = False,
        subscription: SubscriptionSpec | None = None,
        topic: Topic | None = None,
    ) -> None:
        self.spec = spec
        self.path = path
        self.is_dead_letter = dead_letter
        self.subscription = subscription
        self.topic = topic
        self.rules: list[CompiledRule] = []
        self.messages: dict[int, StoredMessage] = {}
        self.sequence = SequenceSource(spec.enable_partitioning and not dead_letter)
        self.size_bytes = 0
        self.partition_bytes = [0] * PARTITION_COUNT
        self.created_ms = now
        self.updated_ms = now
        self.accessed_ms = now
        # available messages by session id (None for a session-less entity): seq heaps
        self.available: dict[str | None, list[int]] = {}
        self.scheduled: list[tuple[int, int]] = []  # (due ms, seq)
        self.locks: dict[uuid.UUID, int] = {}
        self.lock_expiry: list[tuple[int, uuid.UUID]] = []
        self.dedup: dict[Any, int] = {}
        self.sessions: dict[str, SessionState] = {}
        self.dlq: Entity | None = (
            None if dead_letter else Entity(spec, path + DLQ_SUFFIX, now, dead_letter=True)
        )
        #: the transfer dead-letter queue: messages a forward could not deliver
        self.transfer_dlq: Entity | None = (
            None if dead_letter else Entity(spec, path + TRANSFER_DLQ_SUFFIX, now, dead_letter=True)
        )

    @property
    def partitioned(self) -> bool:
        return self.sequence.partitioned

    def respec(self, spec: QueueSpec) -> None:
        """New settings for the entity and its dead-letter and transfer dead-letter
        queues."""
        self.spec = spec
        for sub_queue in (self.dlq, self.transfer_dlq):
            if sub_queue is not None:
                sub_queue.spec = spec

    def partition_quota_bytes(self) -> int:
        """Each partition of a partitioned entity holds up to the entity's declared size."""
        return self.spec.max_size_in_megabytes * 1024 * 1024

    @property
    def requires_session(self) -> bool:
        return self.spec.requires_session and not self.is_dead_letter

    def _key(self, msg: StoredMessage) -> str | None:
        return msg.session_id if self.requires_session else None

    def make_available(self, msg: StoredMessage) -> None:
        heapq.heappush(self.available.setdefault(self._key(msg), []), msg.seq)

    def add(
        self,
        parsed: ParsedMessage,
        size: int,
        now: int,
        *,
        scheduled_ms: int | None,
        ttl_ms: int | None,
        dead_letter_source: str | None = None,
        delivery_count: int = 0,
        seq: int | None = None,
        partition: int = 0,
    ) -> StoredMessage:
        if seq is None:
            seq = self.sequence.next(partition if self.partitioned else 0)
        visible_from = scheduled_ms if scheduled_ms and scheduled_ms > now else now
        msg = StoredMessage(
            seq=seq,
            parsed=parsed,
            enqueued_ms=now,
            expires_ms=None if ttl_ms is None or self.is_dead_letter else visible_from + ttl_ms,
            size=size,
            session_id=parsed.session_id,
            delivery_count=delivery_count,
            dead_letter_source=dead_letter_source,
        )
        self.messages[seq] = msg
        self.size_bytes += size
        self.partition_bytes[partition_of(seq) % PARTITION_COUNT] += size
        if scheduled_ms is not None and scheduled_ms > now:
            msg.state = SCHEDULED
            msg.scheduled_ms = scheduled_ms
            heapq.heappush(self.scheduled, (scheduled_ms, seq))
        else:
            self.make_available(msg)
        return msg

    def remove(self, msg: StoredMessage) -> None:
        if self.messages.pop(msg.seq, None) is not None:
            self.size_bytes -= msg.size
            self.partition_bytes[partition_of(msg.seq) % PARTITION_COUNT] -= msg.size
        if msg.lock_token is not None:
            self.locks.pop(msg.lock_token, None)
            msg.lock_token = None

    @property
    def lock_ms(self) -> int:
        return int(self.spec.lock_duration.total_seconds() * 1000)

    def take(self, msg: StoredMessage, now: int, peek_lock: bool) -> StoredMessage:
        """Hands a message to a receiver: locked (peek-lock) or removed."""
        if peek_lock:
            token = uuid.uuid4()
            msg.lock_token = token
            msg.locked_until_ms = now + self.lock_ms
            self.locks[token] = msg.seq
            heapq.heappush(self.lock_expiry, (msg.locked_until_ms, token))
        else:
            self.remove(msg)
        return msg

    def is_lockable(self, msg: StoredMessage) -> bool:
        return msg.seq in self.messages and msg.state == ACTIVE and msg.lock_token is None


@dataclass
class CompiledRule:
    """A subscription rule, ready to evaluate."""

    spec: RuleSpec
    predicate: Predicate
    action: Action | None
    created_ms: int


def compile_rule(spec: RuleSpec, now: int) -> CompiledRule:
    """Compiles a rule's filter and action.

    Raises:
        BrokerError: the SQL does not parse (the service's argument error).
    """
    try:
        action = compile_action(spec.action) if spec.action is not None else None
        return CompiledRule(spec, compile_filter(spec.filter), action, now)
    except FilterSyntaxError as exc:
        raise BrokerError(ARGUMENT_ERROR, str(exc)) from None


class Topic:
    """A topic: its subscriptions, its sequence numbers and duplicate detection."""

    def __init__(self, spec: TopicSpec, now: int) -> None:
        self.spec = spec
        self.path = spec.name
        self.subscriptions: dict[str, Entity] = {}
        self.sequence = SequenceSource(spec.enable_partitioning)
        self.dedup: dict[Any, int] = {}
        self.created_ms = now
        self.updated_ms = now
        self.accessed_ms = now

    @property
    def partitioned(self) -> bool:
        return self.sequence.partitioned

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.subscriptions.values())

    def partition_quota_bytes(self) -> int:
        return self.spec.max_size_in_megabytes * 1024 * 1024


def subscription_queue_spec(topic: TopicSpec, sub: SubscriptionSpec) -> QueueSpec:
    """How a subscription behaves as a store: its own settings within its topic's limits."""
    ttls = [
        t
        for t in (topic.default_message_time_to_live, sub.default_message_time_to_live)
        if t is not None
    ]
    return QueueSpec(
        name=f"{topic.name}{SUBSCRIPTIONS}{sub.name}",
        lock_duration=sub.lock_duration,
        max_delivery_count=sub.max_delivery_count,
        default_message_time_to_live=min(ttls) if ttls else None,
        dead_lettering_on_message_expiration=sub.dead_lettering_on_message_expiration,
        requires_session=sub.requires_session,
        max_size_in_megabytes=topic.max_size_in_megabytes,
        max_message_size_in_kilobytes=topic.max_message_size_in_kilobytes,
        enable_partitioning=topic.enable_partitioning,
        forward_to=sub.forward_to,
        forward_dead_lettered_messages_to=sub.forward_dead_lettered_messages_to,
    )


def with_properties(parsed: ParsedMessage, props: dict[Any, Any]) -> ParsedMessage:
    return ParsedMessage(
        bare=replace_application_properties(parsed.bare, props),
        header=parsed.header,
        annotations=parsed.annotations,
        properties=parsed.properties,
        application_properties=props,
        body_size=parsed.body_size,
    )


def dead_lettered(
    parsed: ParsedMessage,
    reason: str | None,
    description: str | None,
    extra: dict[Any, Any] | None = None,
) -> ParsedMessage:
    """The message as a dead-letter queue holds it: ``DeadLetterReason`` and
    ``DeadLetterErrorDescription`` (when given) and ``extra`` among its application
    properties."""
    props = dict(parsed.get_application_properties())
    if reason is not None:
        props["DeadLetterReason"] = reason
    if description is not None:
        props["DeadLetterErrorDescription"] = description
    props.update(extra or {})
    return with_properties(parsed, props)
