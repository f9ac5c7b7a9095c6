"""Sending: partitions, size and quota checks, duplicate detection, topic fan-out,
auto-forwarding and scheduled messages."""

from __future__ import annotations

import uuid
from typing import Any

from servicebus_emulator.codec import ParsedMessage, with_message_id
from servicebus_emulator.entities import QueueSpec
from servicebus_emulator.filters import MessageView
from servicebus_emulator.model import (
    MAX_FORWARD_HOPS,
    NOT_ALLOWED,
    PARTITION_COUNT,
    PING_CONTENT_TYPE,
    QUOTA_EXCEEDED,
    SCHEDULED,
    SIZE_EXCEEDED,
    TIMEOUT,
    BrokerError,
    Faults,
    partition_for_key,
    unavailable,
)
from servicebus_emulator.namespace import Namespace
from servicebus_emulator.store import Entity, Topic, dead_lettered, with_properties


class Sending(Namespace):
    """How messages arrive in a namespace's entities."""

    @staticmethod
    def partition_key(target: Entity | Topic, parsed: ParsedMessage) -> str | None:
        """The key that pins a message to a partition: SessionId, else
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
            now = self.clock.now_ms()
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
            raise unavailable(path)
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
            copies.append(with_properties(parsed, props))
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
        """Stores a message in a queue or subscription, or forwards it; a message the
        forward cannot deliver goes to the entity's transfer dead-letter queue."""
        forward = entity.spec.forward_to
        if forward:
            target = self._resolve_forward(forward)
            refused = self._forward_refused(forward, target, hops)
            if refused is not None:
                return self._transfer_dead_letter(entity, parsed, now, refused, touched)
            assert target is not None
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

    def _forward_refused(
        self, name: str, target: Entity | Topic | None, hops: int
    ) -> tuple[str, str] | None:
        """Why a forward to ``target`` (named ``name``) cannot deliver: (DeadLetterReason,
        DeadLetterErrorDescription), or None. The hop limit's reason is the service's
        documented one; a missing or disabled destination is named by the service's
        error for it."""
        if hops >= MAX_FORWARD_HOPS:
            return (
                "MaxTransferHopCountExceeded",
                f"The message was forwarded more than {MAX_FORWARD_HOPS} times.",
            )
        if target is None:
            return (
                "MessagingEntityNotFound",
                f"The auto-forwarding destination '{name}' could not be found.",
            )
        try:
            self.check_status(target, sending=True)
        except BrokerError as exc:
            return "MessagingEntityDisabled", exc.description
        return None

    def _transfer_dead_letter(
        self,
        entity: Entity,
        parsed: ParsedMessage,
        now: int,
        why: tuple[str, str],
        touched: set[str],
    ) -> int:
        assert entity.transfer_dlq is not None
        moved = dead_lettered(parsed, *why)
        msg = entity.transfer_dlq.add(moved, len(moved.bare), now, scheduled_ms=None, ttl_ms=None)
        touched.add(entity.transfer_dlq.path)
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
            now = self.clock.now_ms()
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
