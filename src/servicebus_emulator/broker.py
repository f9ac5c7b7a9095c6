"""The broker: queues, their messages and every rule Service Bus applies to them.

Pure Python and protocol-free: the AMQP layer (``amqp.py``) turns frames into calls on
:class:`Broker` and :class:`BrokerError` into AMQP error conditions. One lock guards all
state, so any thread may call in (the fault API does).
"""

from __future__ import annotations

import heapq
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from servicebus_emulator.auth import DEFAULT_KEYS, AccessKey, KeyRing
from servicebus_emulator.codec import (
    ParsedMessage,
    replace_application_properties,
    with_message_id,
)
from servicebus_emulator.entities import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.filters import (
    DEFAULT_RULE,
    Action,
    FilterSyntaxError,
    MessageView,
    Predicate,
    RuleSpec,
    compile_action,
    compile_filter,
)

PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"
DLQ_SUFFIX = "/$DeadLetterQueue"
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


def now_ms() -> int:
    return int(time.time() * 1000)


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
        return (self.unavailable or self.busy or self.delay_s > 0 or bool(self.partitions_down)
                or self.sends_left is not None)  # fmt: skip


def _unavailable(path: str) -> BrokerError:
    """What an entity under the unavailable fault answers."""
    return BrokerError(ENTITY_DISABLED, f"The messaging entity '{path}' is unavailable.")


def partition_of(seq: int) -> int:
    """The partition a sequence number belongs to (0 for unpartitioned entities)."""
    return seq >> PARTITION_SHIFT


def partition_for_key(key: str) -> int:
    """The partition a partition key maps to: stable across runs and processes."""
    return zlib.crc32(key.encode("utf-8")) % PARTITION_COUNT


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
        self.created_ms = now_ms()
        self.updated_ms = self.created_ms
        self.accessed_ms = self.created_ms
        # available messages by session id (None for a session-less entity): seq heaps
        self.available: dict[str | None, list[int]] = {}
        self.scheduled: list[tuple[int, int]] = []  # (due ms, seq)
        self.locks: dict[uuid.UUID, int] = {}
        self.lock_expiry: list[tuple[int, uuid.UUID]] = []
        self.dedup: dict[Any, int] = {}
        self.sessions: dict[str, SessionState] = {}
        self.dlq: Entity | None = (
            None if dead_letter else Entity(spec, path + DLQ_SUFFIX, dead_letter=True)
        )

    @property
    def partitioned(self) -> bool:
        return self.sequence.partitioned

    def partition_quota_bytes(self) -> int:
        """Each partition holds up to the entity's declared size (seed 001)."""
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
    created_ms: int = field(default_factory=lambda: now_ms())


def compile_rule(spec: RuleSpec) -> CompiledRule:
    """Compiles a rule's filter and action.

    Raises:
        BrokerError: the SQL does not parse (the service's argument error).
    """
    try:
        action = compile_action(spec.action) if spec.action is not None else None
        return CompiledRule(spec, compile_filter(spec.filter), action)
    except FilterSyntaxError as exc:
        raise BrokerError(ARGUMENT_ERROR, str(exc)) from None


class Topic:
    """A topic: its subscriptions, its sequence numbers and duplicate detection."""

    def __init__(self, spec: TopicSpec) -> None:
        self.spec = spec
        self.path = spec.name
        self.subscriptions: dict[str, Entity] = {}
        self.sequence = SequenceSource(spec.enable_partitioning)
        self.dedup: dict[Any, int] = {}
        self.created_ms = now_ms()
        self.updated_ms = self.created_ms
        self.accessed_ms = self.created_ms

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


def _conflict(name: str) -> BrokerError:
    return BrokerError(ALREADY_EXISTS, f"The messaging entity '{name}' already exists.")


def _not_found(name: str) -> BrokerError:
    return BrokerError(NOT_FOUND, f"The messaging entity '{name}' could not be found.")


def _keep_partitioning(before: bool, after: bool) -> None:
    if before != after:
        raise BrokerError(NOT_ALLOWED, "Partitioning cannot be changed on an existing entity.")


def _with_properties(parsed: ParsedMessage, props: dict[Any, Any]) -> ParsedMessage:
    return ParsedMessage(
        bare=replace_application_properties(parsed.bare, props),
        header=parsed.header,
        annotations=parsed.annotations,
        properties=parsed.properties,
        application_properties=props,
        body_size=parsed.body_size,
    )


class Broker:
    """All entities of one namespace and the operations on them."""

    def __init__(
        self,
        queues: Iterable[QueueSpec] = (),
        auto_create: bool = False,
        topics: Iterable[TopicSpec] = (),
        keys: Iterable[AccessKey] = DEFAULT_KEYS,
    ) -> None:
        self.lock = threading.RLock()
        #: The namespace's shared access keys: every SAS token is checked against them.
        self.keys = KeyRing(keys)
        self.auto_create = auto_create
        self.entities: dict[str, Entity] = {}  # queues by lower-case name
        self.topics: dict[str, Topic] = {}
        self.faults: dict[str, Faults] = {}
        self.created_ms = now_ms()
        #: Every ``update-disposition`` request, in order: (entity, disposition status,
        #: number of lock tokens), for tests of how clients settle.
        self.disposition_requests: list[tuple[str, str, int]] = []
        #: How clients authenticated, counted by kind: ``amqp:<token kind>`` (``jwt`` for
        #: Azure AD, ``servicebus.windows.net:sastoken`` for SAS, whatever CBS type it
        #: was put with) and
        #: ``http:<Authorization scheme>``; refused tokens count too.
        self.auth_seen: Counter[str] = Counter()
        for spec in queues:
            self.declare(spec)
        for topic in topics:
            self.declare_topic(topic)

    # ---------------------------------------------------------------- entities

    def declare(self, spec: QueueSpec) -> Entity:
        """Adds a queue (replacing nothing: declaring twice is an error)."""
        with self.lock:
            key = spec.name.lower()
            if key in self.entities or key in self.topics:
                raise _conflict(spec.name)
            entity = Entity(spec, spec.name)
            self.entities[key] = entity
            return entity

    def declare_topic(self, spec: TopicSpec) -> Topic:
        """Adds a topic with the subscriptions its spec lists."""
        with self.lock:
            key = spec.name.lower()
            if key in self.entities or key in self.topics:
                raise _conflict(spec.name)
            topic = Topic(replace(spec, subscriptions=()))
            self.topics[key] = topic
            for sub in spec.subscriptions:
                self.declare_subscription(spec.name, sub)
            return topic

    def declare_subscription(self, topic_name: str, spec: SubscriptionSpec) -> Entity:
        """Adds a subscription; without rules it gets the default true-filter rule."""
        with self.lock:
            topic = self.topic(topic_name)
            key = spec.name.lower()
            if key in topic.subscriptions:
                raise _conflict(f"{topic.path}{SUBSCRIPTIONS}{spec.name}")
            rules = spec.rules or (RuleSpec(DEFAULT_RULE),)
            compiled = [compile_rule(r) for r in rules]
            stored = replace(spec, rules=())
            qspec = subscription_queue_spec(topic.spec, stored)
            entity = Entity(qspec, qspec.name, subscription=stored, topic=topic)
            entity.rules = compiled
            topic.subscriptions[key] = entity
            return entity

    def topic(self, name: str) -> Topic:
        with self.lock:
            topic = self.topics.get(name.lower())
            if topic is None:
                raise _not_found(name)
            return topic

    def subscription(self, topic_name: str, name: str) -> Entity:
        with self.lock:
            topic = self.topic(topic_name)
            entity = topic.subscriptions.get(name.lower())
            if entity is None:
                raise _not_found(f"{topic.path}{SUBSCRIPTIONS}{name}")
            return entity

    def update_queue(self, spec: QueueSpec) -> Entity:
        """Replaces a queue's settings (partitioning cannot change, as in the service)."""
        with self.lock:
            entity = self.entity(spec.name)
            _keep_partitioning(entity.spec.enable_partitioning, spec.enable_partitioning)
            spec = replace(spec, name=entity.path)
            entity.spec = spec
            if entity.dlq is not None:
                entity.dlq.spec = spec
            entity.updated_ms = now_ms()
            return entity

    def update_topic(self, spec: TopicSpec) -> Topic:
        with self.lock:
            topic = self.topic(spec.name)
            _keep_partitioning(topic.spec.enable_partitioning, spec.enable_partitioning)
            topic.spec = replace(spec, name=topic.path, subscriptions=())
            topic.updated_ms = now_ms()
            for sub in topic.subscriptions.values():
                assert sub.subscription is not None
                self._respec_subscription(topic, sub, sub.subscription)
            return topic

    def update_subscription(self, topic_name: str, spec: SubscriptionSpec) -> Entity:
        with self.lock:
            topic = self.topic(topic_name)
            sub = self.subscription(topic_name, spec.name)
            assert sub.subscription is not None
            self._respec_subscription(topic, sub, replace(spec, name=sub.subscription.name))
            sub.updated_ms = now_ms()
            return sub

    @staticmethod
    def _respec_subscription(topic: Topic, sub: Entity, spec: SubscriptionSpec) -> None:
        sub.subscription = replace(spec, rules=())
        sub.spec = subscription_queue_spec(topic.spec, sub.subscription)
        if sub.dlq is not None:
            sub.dlq.spec = sub.spec

    def delete_queue(self, name: str) -> None:
        with self.lock:
            if self.entities.pop(name.lower(), None) is None:
                raise _not_found(name)

    def delete_topic(self, name: str) -> None:
        with self.lock:
            if self.topics.pop(name.lower(), None) is None:
                raise _not_found(name)

    def delete_subscription(self, topic_name: str, name: str) -> None:
        with self.lock:
            topic = self.topic(topic_name)
            if topic.subscriptions.pop(name.lower(), None) is None:
                raise _not_found(f"{topic.path}{SUBSCRIPTIONS}{name}")

    def rules(self, topic_name: str, sub_name: str) -> list[CompiledRule]:
        with self.lock:
            return list(self.subscription(topic_name, sub_name).rules)

    def add_rule(self, topic_name: str, sub_name: str, rule: RuleSpec) -> CompiledRule:
        with self.lock:
            sub = self.subscription(topic_name, sub_name)
            if any(r.spec.name.lower() == rule.name.lower() for r in sub.rules):
                raise _conflict(rule.name)
            compiled = compile_rule(rule)
            sub.rules.append(compiled)
            return compiled

    def update_rule(self, topic_name: str, sub_name: str, rule: RuleSpec) -> CompiledRule:
        with self.lock:
            sub = self.subscription(topic_name, sub_name)
            for i, existing in enumerate(sub.rules):
                if existing.spec.name.lower() == rule.name.lower():
                    compiled = compile_rule(replace(rule, name=existing.spec.name))
                    compiled.created_ms = existing.created_ms
                    sub.rules[i] = compiled
                    return compiled
            raise _not_found(rule.name)

    def remove_rule(self, topic_name: str, sub_name: str, rule_name: str) -> None:
        with self.lock:
            sub = self.subscription(topic_name, sub_name)
            kept = [r for r in sub.rules if r.spec.name.lower() != rule_name.lower()]
            if len(kept) == len(sub.rules):
                raise _not_found(rule_name)
            sub.rules = kept

    def entity(self, path: str) -> Entity:
        """The queue, subscription or dead-letter queue at ``path``.

        Raises:
            BrokerError: not found (unless auto-create is on for a plain queue name).
        """
        with self.lock:
            base, dead = path, False
            if path.lower().endswith(DLQ_SUFFIX.lower()):
                base, dead = path[: -len(DLQ_SUFFIX)], True
            entity = self._subscription_at(base) or self.entities.get(base.lower())
            if entity is None and self.auto_create and base.lower() not in self.topics:
                entity = self.declare(QueueSpec(name=base))
            if entity is None:
                raise _not_found(base)
            if dead:
                assert entity.dlq is not None
                return entity.dlq
            return entity

    def _subscription_at(self, base: str) -> Entity | None:
        lowered = base.lower()
        cut = lowered.find(SUBSCRIPTIONS.lower())
        if cut < 0:
            return None
        topic = self.topics.get(lowered[:cut])
        if topic is None:
            return None
        return topic.subscriptions.get(lowered[cut + len(SUBSCRIPTIONS) :])

    def send_target(self, path: str) -> Entity | Topic:
        """Where a sender's messages go: a queue or a topic.

        Raises:
            BrokerError: not found, or not something one sends to.
        """
        with self.lock:
            topic = self.topics.get(path.lower())
            if topic is not None:
                return topic
            entity = self.entity(path)
            if entity.topic is not None or entity.is_dead_letter:
                raise BrokerError(
                    NOT_ALLOWED, f"Cannot send to '{path}': it is not a queue or a topic."
                )
            return entity

    def set_fault(
        self,
        path: str,
        *,
        unavailable: bool | None = None,
        busy: bool | None = None,
        delay_s: float | None = None,
        partition: int | None = None,
        sends_left: int | None = None,
    ) -> None:
        """Injects faults on ``path`` (an entity name, or ``*`` for all).

        With ``partition``, ``unavailable`` applies to that partition of a partitioned
        entity only: keyed sends to it fail, keyless sends go to another partition.
        With ``sends_left``, the entity accepts that many more sends (pings aside), then
        refuses every send as unavailable.
        """
        with self.lock:
            f = self.faults.setdefault(path.lower(), Faults())
            if sends_left is not None:
                f.sends_left = sends_left
            if partition is not None:
                if not 0 <= partition < PARTITION_COUNT:
                    raise BrokerError(ARGUMENT_ERROR, f"no partition {partition}")
                if unavailable:
                    f.partitions_down.add(partition)
                else:
                    f.partitions_down.discard(partition)
                return
            if unavailable is not None:
                f.unavailable = unavailable
            if busy is not None:
                f.busy = busy
            if delay_s is not None:
                f.delay_s = delay_s

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def fault_for(self, path: str) -> Faults:
        with self.lock:
            base = path.lower().removesuffix(DLQ_SUFFIX.lower())
            out = Faults()
            for key in ("*", base):
                f = self.faults.get(key)
                if f:
                    out.unavailable |= f.unavailable
                    out.busy |= f.busy
                    out.delay_s = max(out.delay_s, f.delay_s)
                    out.partitions_down |= f.partitions_down
            return out

    @staticmethod
    def check_status(target: Entity | Topic, sending: bool) -> None:
        """Raises entity-disabled when the entity's status refuses the operation."""
        status = target.spec.status.lower()
        topic = getattr(target, "topic", None)
        if topic is not None and topic.spec.status.lower() == "disabled":
            status = "disabled"
        refused = ("disabled", "senddisabled") if sending else ("disabled", "receivedisabled")
        if status in refused:
            raise BrokerError(
                ENTITY_DISABLED,
                f"Messaging entity '{target.path}' is currently disabled "
                f"(status {target.spec.status}).",
            )

    def check_faults(self, path: str) -> None:
        """Raises the error an entity under fault answers with."""
        f = self.fault_for(path)
        if f.unavailable:
            raise _unavailable(path)
        if f.busy:
            raise BrokerError(
                SERVER_BUSY, "The request was terminated because the entity is being throttled."
            )

    # ---------------------------------------------------------------- partitions

    @staticmethod
    def partition_key(target: Entity | Topic, parsed: ParsedMessage) -> str | None:
        """The key that pins a message to a partition (seed 001): SessionId, else
        PartitionKey, else MessageId when the entity detects duplicates, else none.

        Raises:
            BrokerError: PartitionKey and SessionId both set and different.
        """
        session = parsed.session_id
        key = parsed.annotation("x-opt-partition-key")
        key = None if key is None else str(key)
        if session is not None and key is not None and key != session:
            raise BrokerError(
                NOT_ALLOWED,
                f"The PartitionKey '{key}' of the message differs from its SessionId "
                f"'{session}'. PartitionKey must be the same as SessionId when both are set.",
            )
        if session is not None:
            return session
        if key is not None:
            return key
        if target.spec.requires_duplicate_detection and parsed.message_id is not None:
            return str(parsed.message_id)
        return None

    def _choose_partition(
        self, target: Entity | Topic, keys: set[str | None], faults: Faults
    ) -> int:
        """The partition one transfer goes to.

        Raises:
            BrokerError: messages with different keys in one batch, or the key's
                partition is unavailable.
        """
        if not target.partitioned:
            return 0
        if len(keys) > 1:
            detail = (
                "SessionId, PartitionKey, or MessageId"
                if target.spec.requires_duplicate_detection
                else "SessionId or PartitionKey"
            )
            raise BrokerError(
                NOT_ALLOWED,
                f"Batching brokered messages with distinct {detail} is not supported for an "
                "entity with partitioning enabled.",
            )
        key = next(iter(keys), None)
        if key is not None:
            partition = partition_for_key(key)
            if partition in faults.partitions_down:
                raise BrokerError(
                    TIMEOUT,
                    f"Partition {partition} of '{target.path}' is unavailable; the operation "
                    "did not complete within the allotted time.",
                )
            return partition
        source = target.sequence
        for _ in range(PARTITION_COUNT):
            partition = source.round_robin % PARTITION_COUNT
            source.round_robin += 1
            if partition not in faults.partitions_down:
                return partition
        raise BrokerError(TIMEOUT, f"No partition of '{target.path}' is available.")

    # ---------------------------------------------------------------- send

    def send(
        self,
        path: str,
        messages: list[tuple[ParsedMessage, int]],
        touched: set[str] | None = None,
    ) -> list[int]:
        """Enqueues messages (one transfer: all or nothing). Returns sequence numbers
        (0 for pings and detected duplicates, which are accepted but not stored).

        ``touched`` collects the paths of the queues and subscriptions that received
        a message, so the caller can wake their receivers.
        """
        with self.lock:
            target = self.send_target(path)
            self.check_faults(path)
            self.check_status(target, sending=True)
            budget = self._send_budget(path, messages)
            now = now_ms()
            spec = target.spec
            for parsed, size in messages:
                if size > spec.max_message_bytes:
                    raise BrokerError(
                        SIZE_EXCEEDED,
                        f"The received message (size {size} bytes) exceeds the limit "
                        f"({spec.max_message_bytes} bytes) of '{target.path}'.",
                    )
                if (
                    isinstance(target, Entity)
                    and target.requires_session
                    and parsed.session_id is None
                    and parsed.content_type != PING_CONTENT_TYPE
                ):
                    raise BrokerError(
                        NOT_ALLOWED,
                        f"The SessionId was not set on a message, and it cannot be sent to the "
                        f"entity '{target.path}'. Entities that have session support enabled can "
                        "only receive messages that have the SessionId set to a valid value.",
                    )
            keys = {
                self.partition_key(target, parsed)
                for parsed, _ in messages
                if parsed.content_type != PING_CONTENT_TYPE
            }
            partition = self._choose_partition(target, keys, self.fault_for(path))
            self._check_quota(target, partition, sum(size for _, size in messages))
            sink = touched if touched is not None else set()
            if budget is not None:
                budget.sends_left = (budget.sends_left or 0) - 1
            return [
                self._accept(target, parsed, size, now, partition, None, sink)
                for parsed, size in messages
            ]

    def _send_budget(self, path: str, messages: list[tuple[ParsedMessage, int]]) -> Faults | None:
        """The faults whose ``sends_left`` this send spends (None: no limit, or only
        pings); raises unavailable when none is left."""
        budget = self.faults.get(path.lower())
        if budget is None or budget.sends_left is None:
            return None
        if all(parsed.content_type == PING_CONTENT_TYPE for parsed, _ in messages):
            return None
        if budget.sends_left <= 0:
            raise _unavailable(path)
        return budget

    @staticmethod
    def _check_quota(target: Entity | Topic, partition: int, incoming: int) -> None:
        if isinstance(target, Entity) and target.partitioned:
            used = target.partition_bytes[partition]
        else:
            used = target.size_bytes
        if used + incoming > target.partition_quota_bytes():
            raise BrokerError(QUOTA_EXCEEDED, f"The entity '{target.path}' is full.")

    def _duplicate(self, target: Entity | Topic, parsed: ParsedMessage, now: int) -> bool:
        spec = target.spec
        if not spec.requires_duplicate_detection or parsed.message_id is None:
            return False
        window = int(spec.duplicate_detection_history_window.total_seconds() * 1000)
        seen = target.dedup.get(parsed.message_id)
        if seen is not None and now - seen < window:
            return True
        target.dedup[parsed.message_id] = now
        if len(target.dedup) > 10_000:
            target.dedup = {k: v for k, v in target.dedup.items() if now - v < window}
        return False

    def _accept(
        self,
        target: Entity | Topic,
        parsed: ParsedMessage,
        size: int,
        now: int,
        partition: int,
        scheduled: int | None,
        touched: set[str],
        hops: int = 0,
    ) -> int:
        """One message arriving at a queue or topic: pings, duplicates, fan-out."""
        if parsed.content_type == PING_CONTENT_TYPE:
            return 0  # accepted, never delivered
        if parsed.message_id is None:  # the service gives every message a MessageId
            parsed = with_message_id(parsed, uuid.uuid4().hex)
        if self._duplicate(target, parsed, now):
            return 0
        target.accessed_ms = now
        if isinstance(target, Entity):
            return self._arrive(target, parsed, size, now, partition, scheduled, touched, hops)
        seq = target.sequence.next(partition if target.partitioned else 0)
        view = MessageView(parsed)
        for sub in target.subscriptions.values():
            for copy in self._route(sub, parsed, view):
                copy_size = size + len(copy.bare) - len(parsed.bare)
                self._arrive(sub, copy, copy_size, now, partition, scheduled, touched, hops, seq)
        return seq

    @staticmethod
    def _route(sub: Entity, parsed: ParsedMessage, view: MessageView) -> list[ParsedMessage]:
        """The copies a subscription gets: one if any rule without an action matches,
        plus one per matching rule with an action (with ``RuleName`` set)."""
        plain = False
        copies: list[ParsedMessage] = []
        for rule in sub.rules:
            try:
                matched = rule.predicate(view)
            except Exception:  # a filter that fails on this message does not select it
                matched = False
            if not matched:
                continue
            if rule.action is None:
                plain = True
                continue
            props = rule.action(view)
            props["RuleName"] = rule.spec.name
            copies.append(_with_properties(parsed, props))
        return ([parsed] if plain else []) + copies

    def _arrive(
        self,
        entity: Entity,
        parsed: ParsedMessage,
        size: int,
        now: int,
        partition: int,
        scheduled: int | None,
        touched: set[str],
        hops: int,
        seq: int | None = None,
    ) -> int:
        """Stores a message in a queue or subscription, or forwards it."""
        forward = entity.spec.forward_to
        if forward and hops < MAX_FORWARD_HOPS:
            target = self._resolve_forward(forward)
            if target is not None:
                pid = self._choose_partition(
                    target, {self.partition_key(target, parsed)}, self.fault_for(target.path)
                )
                return self._accept(target, parsed, size, now, pid, scheduled, touched, hops + 1)
        if entity.requires_session and parsed.session_id is None:
            return 0  # a subscription that requires sessions cannot hold it
        if scheduled is None:
            scheduled = _as_ms(parsed.annotation("x-opt-scheduled-enqueue-time"))
        ttl = _effective_ttl(parsed.ttl_ms, entity.spec)
        msg = entity.add(
            parsed, size, now, scheduled_ms=scheduled, ttl_ms=ttl, seq=seq, partition=partition
        )
        touched.add(entity.path)
        return msg.seq

    def _resolve_forward(self, name: str) -> Entity | Topic | None:
        """The entity a forward-to setting names (a name or the service's full URL)."""
        if "://" in name:
            name = name.split("://", 1)[1].split("/", 1)[-1]
        try:
            return self.send_target(name)
        except BrokerError:
            return None

    def schedule(self, path: str, messages: list[tuple[ParsedMessage, int, int]]) -> list[int]:
        """Schedules messages (parsed, size, due ms); returns their sequence numbers."""
        with self.lock:
            target = self.send_target(path)
            self.check_faults(path)
            self.check_status(target, sending=True)
            now = now_ms()
            faults = self.fault_for(path)
            out = []
            for parsed, size, due in messages:
                pid = self._choose_partition(target, {self.partition_key(target, parsed)}, faults)
                out.append(self._accept(target, parsed, size, now, pid, due, set()))
            return out

    def cancel_scheduled(self, path: str, seqs: list[int]) -> None:
        with self.lock:
            target = self.send_target(path)
            stores = list(target.subscriptions.values()) if isinstance(target, Topic) else [target]
            for entity in stores:
                for seq in seqs:
                    msg = entity.messages.get(seq)
                    if msg is not None and msg.state == SCHEDULED:
                        entity.remove(msg)

    # ---------------------------------------------------------------- housekeeping

    def housekeep(self, entity: Entity, now: int) -> None:
        """Releases due scheduled messages and expired locks."""
        while entity.scheduled and entity.scheduled[0][0] <= now:
            _, seq = heapq.heappop(entity.scheduled)
            msg = entity.messages.get(seq)
            if msg is not None and msg.state == SCHEDULED:
                msg.state = ACTIVE
                msg.enqueued_ms = msg.scheduled_ms or now
                entity.make_available(msg)
        while entity.lock_expiry and entity.lock_expiry[0][0] <= now:
            _, token = heapq.heappop(entity.lock_expiry)
            locked_seq = entity.locks.get(token)
            msg = entity.messages.get(locked_seq) if locked_seq is not None else None
            if msg is None or msg.lock_token != token or (msg.locked_until_ms or 0) > now:
                continue
            self._unlock(entity, msg, now, raise_count=True)

    def _unlock(self, entity: Entity, msg: StoredMessage, now: int, raise_count: bool) -> None:
        if msg.lock_token is not None:
            entity.locks.pop(msg.lock_token, None)
        msg.lock_token = None
        msg.locked_until_ms = None
        if raise_count:
            msg.delivery_count += 1
            if msg.delivery_count >= entity.spec.max_delivery_count and not entity.is_dead_letter:
                self._dead_letter(
                    entity,
                    msg,
                    now,
                    "MaxDeliveryCountExceeded",
                    f"Message could not be consumed after {entity.spec.max_delivery_count} "
                    "delivery attempts.",
                )
                return
        if msg.state == ACTIVE:
            entity.make_available(msg)

    def _dead_letter(
        self,
        entity: Entity,
        msg: StoredMessage,
        now: int,
        reason: str | None,
        description: str | None,
        extra: dict[Any, Any] | None = None,
    ) -> None:
        entity.remove(msg)
        if entity.dlq is None:  # already a dead-letter queue: a completed move
            return
        props = dict(msg.parsed.get_application_properties())
        if reason is not None:
            props["DeadLetterReason"] = reason
        if description is not None:
            props["DeadLetterErrorDescription"] = description
        props.update(extra or {})
        parsed = _with_properties(msg.parsed, props)
        forward = entity.spec.forward_dead_lettered_messages_to
        target = self._resolve_forward(forward) if forward else None
        if target is not None:
            pid = self._choose_partition(
                target, {self.partition_key(target, parsed)}, self.fault_for(target.path)
            )
            self._accept(target, parsed, len(parsed.bare), now, pid, None, set(), 1)
            return
        entity.dlq.add(
            parsed,
            len(parsed.bare),
            now,
            scheduled_ms=None,
            ttl_ms=None,
            delivery_count=msg.delivery_count,
        )

    def _expire_if_due(self, entity: Entity, msg: StoredMessage, now: int) -> bool:
        if msg.expires_ms is None or msg.expires_ms > now:
            return False
        if entity.spec.dead_lettering_on_message_expiration and not entity.is_dead_letter:
            self._dead_letter(
                entity,
                msg,
                now,
                "TTLExpiredException",
                "The message expired and was dead lettered.",
            )
        else:
            entity.remove(msg)
        return True

    # ---------------------------------------------------------------- receive

    def receive(
        self, path: str, count: int, *, peek_lock: bool, session_id: str | None = None
    ) -> list[StoredMessage]:
        """Takes up to ``count`` available messages, locked (peek-lock) or removed."""
        with self.lock:
            entity = self.entity(path)
            self.check_faults(path)
            self.check_status(entity, sending=False)
            now = now_ms()
            entity.accessed_ms = now
            self.housekeep(entity, now)
            key = session_id if entity.requires_session else None
            heap = entity.available.get(key)
            out: list[StoredMessage] = []
            while heap and len(out) < count:
                seq = heapq.heappop(heap)
                msg = entity.messages.get(seq)
                if msg is None or not entity.is_lockable(msg):
                    continue
                if self._expire_if_due(entity, msg, now):
                    continue
                out.append(entity.take(msg, now, peek_lock))
            return out

    def release_unsent(self, path: str, msg: StoredMessage, token: uuid.UUID) -> None:
        """Puts back a message whose delivery (locked with ``token``) was left unsettled
        when its link closed; one locked again since, by another delivery, stays so."""
        with self.lock:
            entity = self.entity(path)
            if msg.seq in entity.messages and msg.lock_token == token:
                self._unlock(entity, msg, now_ms(), raise_count=False)

    # ---------------------------------------------------------------- settle

    def _locked(self, entity: Entity, token: uuid.UUID, now: int) -> StoredMessage:
        seq = entity.locks.get(token)
        msg = entity.messages.get(seq) if seq is not None else None
        if msg is None or msg.lock_token != token or (msg.locked_until_ms or 0) <= now:
            raise BrokerError(
                LOCK_LOST,
                "The lock supplied is invalid. Either the lock expired, or the message has "
                "already been removed from the queue.",
            )
        return msg

    def settle(
        self,
        path: str,
        token: uuid.UUID,
        outcome: str,
        *,
        reason: str | None = None,
        description: str | None = None,
        properties: dict[Any, Any] | None = None,
    ) -> None:
        """complete | abandon | defer | dead-letter a locked message. ``properties``
        (the client's propertiesToModify, keys as sent: symbols or strings) are set on
        the message's application properties when it is abandoned, deferred or
        dead-lettered.

        Raises:
            BrokerError: lock lost.
        """
        with self.lock:
            entity = self.entity(path)
            now = now_ms()
            msg = self._locked(entity, token, now)
            properties = {str(k): v for k, v in (properties or {}).items()}
            if properties and outcome in ("abandon", "defer"):
                props = {**msg.parsed.get_application_properties(), **properties}
                msg.parsed = _with_properties(msg.parsed, props)
            if outcome == "complete":
                entity.remove(msg)
            elif outcome == "abandon":
                self._unlock(entity, msg, now, raise_count=True)
            elif outcome == "defer":
                msg.state = DEFERRED
                self._unlock(entity, msg, now, raise_count=False)
            elif outcome == "dead-letter":
                self._dead_letter(entity, msg, now, reason, description, properties)
            else:
                raise BrokerError(ARGUMENT_ERROR, f"unknown disposition {outcome}")

    def renew_locks(self, path: str, tokens: list[uuid.UUID]) -> list[int]:
        with self.lock:
            entity = self.entity(path)
            now = now_ms()
            out = []
            for token in tokens:
                msg = self._locked(entity, token, now)
                msg.locked_until_ms = now + entity.lock_ms
                heapq.heappush(entity.lock_expiry, (msg.locked_until_ms, token))
                out.append(msg.locked_until_ms)
            return out

    # ---------------------------------------------------------------- peek, deferred

    def peek(
        self, path: str, from_seq: int, count: int, session_id: str | None = None
    ) -> list[StoredMessage]:
        """Messages from ``from_seq`` on, locked and scheduled ones included, capped like
        the service (250 messages or 256 KB a call, at least one message)."""
        with self.lock:
            entity = self.entity(path)
            self.check_faults(path)
            now = now_ms()
            self.housekeep(entity, now)
            out: list[StoredMessage] = []
            size = 0
            limit = min(count, PEEK_MAX_COUNT)
            partition: int | None = None
            for seq in sorted(s for s in entity.messages if s >= from_seq):
                msg = entity.messages[seq]
                if entity.partitioned:
                    # the service answers a peek from one partition at a time (seed 001)
                    if partition is None:
                        partition = partition_of(seq)
                    elif partition_of(seq) != partition:
                        break
                if session_id is not None and msg.session_id != session_id:
                    continue
                if (
                    msg.state == ACTIVE
                    and msg.lock_token is None
                    and self._expire_if_due(entity, msg, now)
                ):
                    continue
                if out and size + msg.size > PEEK_MAX_BYTES:
                    break
                out.append(msg)
                size += msg.size
                if len(out) >= limit:
                    break
            return out

    def receive_deferred(
        self, path: str, seqs: list[int], *, peek_lock: bool, session_id: str | None = None
    ) -> list[StoredMessage]:
        with self.lock:
            entity = self.entity(path)
            now = now_ms()
            out = []
            for seq in seqs:
                msg = entity.messages.get(seq)
                if msg is None or msg.state != DEFERRED:
                    raise BrokerError(
                        MESSAGE_NOT_FOUND,
                        f"Failed to retrieve the deferred message with sequence number {seq}.",
                    )
                out.append(entity.take(msg, now, peek_lock))
            return out

    # ---------------------------------------------------------------- sessions

    def lock_session(self, path: str, session_id: str | None, owner: object) -> tuple[str, int]:
        """Locks a session (a given id, or the next one with available messages).

        Returns:
            (session id, locked-until ms).
        """
        with self.lock:
            entity = self.entity(path)
            self.check_faults(path)
            if not entity.requires_session:
                raise BrokerError(NOT_ALLOWED, f"'{entity.path}' does not require sessions.")
            now = now_ms()
            self.housekeep(entity, now)
            lock_ms = entity.lock_ms
            if session_id is None:
                for sid, heap in sorted(entity.available.items(), key=lambda kv: min(kv[1] or [0])):
                    if not heap or sid is None:
                        continue
                    state = entity.sessions.setdefault(sid, SessionState())
                    if state.owner is None or state.locked_until_ms <= now:
                        session_id = sid
                        break
                if session_id is None:
                    raise BrokerError(TIMEOUT, "No session is available to accept.")
            state = entity.sessions.setdefault(session_id, SessionState())
            if state.owner is not None and state.owner is not owner and state.locked_until_ms > now:
                raise BrokerError(
                    SESSION_CANNOT_BE_LOCKED,
                    f"The requested session '{session_id}' cannot be accepted. It may be "
                    "locked by another receiver.",
                )
            state.owner = owner
            state.locked_until_ms = now + lock_ms
            return session_id, state.locked_until_ms

    def _session(self, entity: Entity, session_id: str, owner: object | None) -> SessionState:
        state = entity.sessions.get(session_id)
        if (
            state is None
            or (owner is not None and state.owner is not owner)
            or state.locked_until_ms <= now_ms()
        ):
            raise BrokerError(
                SESSION_LOCK_LOST,
                f"The session lock has expired on the MessageSession '{session_id}'.",
            )
        return state

    def release_session(self, path: str, session_id: str, owner: object) -> None:
        with self.lock:
            entity = self.entity(path)
            state = entity.sessions.get(session_id)
            if state is not None and state.owner is owner:
                state.owner = None
                state.locked_until_ms = 0

    def renew_session(self, path: str, session_id: str, owner: object | None) -> int:
        with self.lock:
            entity = self.entity(path)
            state = self._session(entity, session_id, owner)
            state.locked_until_ms = now_ms() + entity.lock_ms
            return state.locked_until_ms

    def get_session_state(self, path: str, session_id: str, owner: object | None) -> bytes | None:
        with self.lock:
            return self._session(self.entity(path), session_id, owner).state

    def set_session_state(
        self, path: str, session_id: str, state: bytes | None, owner: object | None
    ) -> None:
        with self.lock:
            s = self._session(self.entity(path), session_id, owner)
            s.state = state
            s.updated_ms = now_ms()

    def list_sessions(self, path: str, last_updated_ms: int) -> list[str]:
        """Session ids, as ``get-message-sessions`` lists them.

        With the DateTime.MaxValue sentinel (the SDK's default) the sessions that hold
        messages; with a time, the sessions whose state was set at or after it.
        """
        with self.lock:
            entity = self.entity(path)
            if last_updated_ms >= MAX_DATETIME_MS:
                return sorted({m.session_id for m in entity.messages.values() if m.session_id})
            return sorted(
                sid for sid, s in entity.sessions.items() if s.updated_ms >= last_updated_ms
            )


def _effective_ttl(message_ttl_ms: int | None, spec: QueueSpec) -> int | None:
    default = spec.default_message_time_to_live
    default_ms = None if default is None else int(default.total_seconds() * 1000)
    candidates = [t for t in (message_ttl_ms, default_ms) if t is not None and t > 0]
    return min(candidates) if candidates else None


def _as_ms(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
