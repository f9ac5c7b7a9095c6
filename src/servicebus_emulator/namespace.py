"""A namespace's entities and faults: declaring, updating and deleting queues, topics,
subscriptions and rules, finding the entity a path names, and the faults a test injects.
The layers above (:mod:`~servicebus_emulator.sending`,
:mod:`~servicebus_emulator.settlement`, :mod:`~servicebus_emulator.sessions`) move
messages through what this one holds; :class:`~servicebus_emulator.broker.Broker` is the
top of them. One re-entrant lock guards all state, so any thread may call in."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from servicebus_emulator.auth import DEFAULT_KEYS, AccessKey, KeyRing
from servicebus_emulator.clock import Clock, SystemClock
from servicebus_emulator.entities import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.filters import DEFAULT_RULE, RuleSpec
from servicebus_emulator.model import (
    ALREADY_EXISTS,
    ARGUMENT_ERROR,
    DLQ_SUFFIX,
    ENTITY_DISABLED,
    NOT_ALLOWED,
    NOT_FOUND,
    PARTITION_COUNT,
    SERVER_BUSY,
    SUBSCRIPTIONS,
    TRANSFER_DLQ_SUFFIX,
    BrokerError,
    Faults,
    unavailable,
)
from servicebus_emulator.store import (
    CompiledRule,
    Entity,
    Topic,
    compile_rule,
    subscription_queue_spec,
)


def _conflict(name: str) -> BrokerError:
    return BrokerError(ALREADY_EXISTS, f"The messaging entity '{name}' already exists.")


def _not_found(name: str) -> BrokerError:
    return BrokerError(NOT_FOUND, f"The messaging entity '{name}' could not be found.")


def _keep_partitioning(before: bool, after: bool) -> None:
    if before != after:
        raise BrokerError(NOT_ALLOWED, "Partitioning cannot be changed on an existing entity.")


class Namespace:
    """The entities of one namespace, their faults, and the clock the broker reads."""

    def __init__(
        self,
        queues: Iterable[QueueSpec] = (),
        auto_create: bool = False,
        topics: Iterable[TopicSpec] = (),
        keys: Iterable[AccessKey] = DEFAULT_KEYS,
        clock: Clock | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self.clock: Clock = clock or SystemClock()
        #: The namespace's shared access keys: every SAS token is checked against them.
        self.keys = KeyRing(keys)
        self.auto_create = auto_create
        self.entities: dict[str, Entity] = {}  # queues by lower-case name
        self.topics: dict[str, Topic] = {}
        self.faults: dict[str, Faults] = {}
        self.created_ms = self.clock.now_ms()
        #: Every ``update-disposition`` request, in order: (entity, disposition status,
        #: number of lock tokens), for tests of how clients settle.
        self.disposition_requests: list[tuple[str, str, int]] = []
        #: Messages handed out by peeks, by entity (lower-case path): what a client's
        #: peeks cost in credits.
        self.messages_peeked: Counter[str] = Counter()
        #: messages handed out by receives (peek-lock or receive-and-delete), per entity
        self.messages_received: Counter[str] = Counter()
        #: How clients authenticated, counted by kind: ``amqp:<token kind>`` (``jwt`` for
        #: Azure AD, ``servicebus.windows.net:sastoken`` for SAS, whatever CBS type it
        #: was put with) and ``http:<Authorization scheme>``; refused tokens count too.
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
            entity = Entity(spec, spec.name, self.clock.now_ms())
            self.entities[key] = entity
            return entity

    def declare_topic(self, spec: TopicSpec) -> Topic:
        """Adds a topic with the subscriptions its spec lists."""
        with self.lock:
            key = spec.name.lower()
            if key in self.entities or key in self.topics:
                raise _conflict(spec.name)
            topic = Topic(replace(spec, subscriptions=()), self.clock.now_ms())
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
            now = self.clock.now_ms()
            compiled = [compile_rule(r, now) for r in rules]
            stored = replace(spec, rules=())
            qspec = subscription_queue_spec(topic.spec, stored)
            entity = Entity(qspec, qspec.name, now, subscription=stored, topic=topic)
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
            entity.respec(spec)
            entity.updated_ms = self.clock.now_ms()
            return entity

    def update_topic(self, spec: TopicSpec) -> Topic:
        with self.lock:
            topic = self.topic(spec.name)
            _keep_partitioning(topic.spec.enable_partitioning, spec.enable_partitioning)
            topic.spec = replace(spec, name=topic.path, subscriptions=())
            topic.updated_ms = self.clock.now_ms()
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
            sub.updated_ms = self.clock.now_ms()
            return sub

    @staticmethod
    def _respec_subscription(topic: Topic, sub: Entity, spec: SubscriptionSpec) -> None:
        sub.subscription = replace(spec, rules=())
        sub.respec(subscription_queue_spec(topic.spec, sub.subscription))

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
            compiled = compile_rule(rule, self.clock.now_ms())
            sub.rules.append(compiled)
            return compiled

    def update_rule(self, topic_name: str, sub_name: str, rule: RuleSpec) -> CompiledRule:
        with self.lock:
            sub = self.subscription(topic_name, sub_name)
            for i, existing in enumerate(sub.rules):
                if existing.spec.name.lower() == rule.name.lower():
                    compiled = compile_rule(
                        replace(rule, name=existing.spec.name), existing.created_ms
                    )
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
        """The queue, subscription, dead-letter queue or transfer dead-letter queue at
        ``path``.

        Raises:
            BrokerError: not found (unless auto-create is on for a plain queue name).
        """
        with self.lock:
            base, dead, transfer = path, False, False
            if path.lower().endswith(TRANSFER_DLQ_SUFFIX.lower()):
                base, transfer = path[: -len(TRANSFER_DLQ_SUFFIX)], True
            elif path.lower().endswith(DLQ_SUFFIX.lower()):
                base, dead = path[: -len(DLQ_SUFFIX)], True
            entity = self._subscription_at(base) or self.entities.get(base.lower())
            if entity is None and self.auto_create and base.lower() not in self.topics:
                entity = self.declare(QueueSpec(name=base))
            if entity is None:
                raise _not_found(base)
            if transfer:
                assert entity.transfer_dlq is not None
                return entity.transfer_dlq
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
            raise unavailable(path)
        if f.busy:
            raise BrokerError(
                SERVER_BUSY, "The request was terminated because the entity is being throttled."
            )

    # ---------------------------------------------------------------- partitions
