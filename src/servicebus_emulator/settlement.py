"""Receiving and settling: locks and their expiry, time to live, dead-lettering,
peeking, deferral and the due scheduled messages."""

from __future__ import annotations

import heapq
import uuid
from typing import Any

from servicebus_emulator.model import (
    ACTIVE,
    ARGUMENT_ERROR,
    DEFERRED,
    LOCK_LOST,
    MESSAGE_NOT_FOUND,
    PEEK_MAX_BYTES,
    PEEK_MAX_COUNT,
    SCHEDULED,
    BrokerError,
    StoredMessage,
    partition_of,
)
from servicebus_emulator.sending import Sending
from servicebus_emulator.store import Entity, dead_lettered, with_properties


class Settlement(Sending):
    """How messages leave an entity: received, locked, settled, expired or peeked."""

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

    def next_due_ms(self, path: str) -> int | None:
        """When time next makes a message of ``path`` available to its receivers (the
        clock's milliseconds): its earliest scheduled message or lock to expire; None when
        nothing there waits on time (or the entity is gone)."""
        with self.lock:
            try:
                entity = self.entity(path)
            except BrokerError:
                return None
            dues = [heap[0][0] for heap in (entity.scheduled, entity.lock_expiry) if heap]
            return min(dues) if dues else None

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
        parsed = dead_lettered(msg.parsed, reason, description, extra)
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
            now = self.clock.now_ms()
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
            self.messages_received[path.lower()] += len(out)
            return out

    def release_unsent(self, path: str, msg: StoredMessage, token: uuid.UUID) -> None:
        """Puts back a message whose delivery (locked with ``token``) was left unsettled
        when its link closed; one locked again since, by another delivery, stays so."""
        with self.lock:
            entity = self.entity(path)
            if msg.seq in entity.messages and msg.lock_token == token:
                self._unlock(entity, msg, self.clock.now_ms(), raise_count=False)

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
        """complete | abandon | release | defer | dead-letter a locked message. A release
        (AMQP's released outcome: the client never handed the message to its application)
        makes it available again without counting a delivery, as the service does; an
        abandon counts one. ``properties``
        (the client's propertiesToModify, keys as sent: symbols or strings) are set on
        the message's application properties when it is abandoned, deferred or
        dead-lettered.

        Raises:
            BrokerError: lock lost.
        """
        with self.lock:
            entity = self.entity(path)
            now = self.clock.now_ms()
            msg = self._locked(entity, token, now)
            properties = {str(k): v for k, v in (properties or {}).items()}
            if properties and outcome in ("abandon", "defer"):
                props = {**msg.parsed.get_application_properties(), **properties}
                msg.parsed = with_properties(msg.parsed, props)
            if outcome == "complete":
                entity.remove(msg)
            elif outcome == "abandon":
                self._unlock(entity, msg, now, raise_count=True)
            elif outcome == "release":
                self._unlock(entity, msg, now, raise_count=False)
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
            now = self.clock.now_ms()
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
            now = self.clock.now_ms()
            self.housekeep(entity, now)
            out: list[StoredMessage] = []
            size = 0
            limit = min(count, PEEK_MAX_COUNT)
            partition: int | None = None
            for seq in sorted(s for s in entity.messages if s >= from_seq):
                msg = entity.messages[seq]
                if entity.partitioned:
                    # the service answers a peek from one partition at a time
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
            self.messages_peeked[path.lower()] += len(out)
            return out

    def receive_deferred(
        self, path: str, seqs: list[int], *, peek_lock: bool, session_id: str | None = None
    ) -> list[StoredMessage]:
        with self.lock:
            entity = self.entity(path)
            now = self.clock.now_ms()
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
