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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from servicebus_emulator.codec import ParsedMessage, replace_application_properties
from servicebus_emulator.entities import QueueSpec

PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"
DLQ_SUFFIX = "/$DeadLetterQueue"
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

    def any(self) -> bool:
        return self.unavailable or self.busy or self.delay_s > 0


class Entity:
    """A queue or a dead-letter queue: its store and its rules."""

    def __init__(self, spec: QueueSpec, path: str, dead_letter: bool = False) -> None:
        self.spec = spec
        self.path = path
        self.is_dead_letter = dead_letter
        self.messages: dict[int, StoredMessage] = {}
        self.next_seq = 1
        self.size_bytes = 0
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
    ) -> StoredMessage:
        seq = self.next_seq
        self.next_seq += 1
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


class Broker:
    """All entities of one namespace and the operations on them."""

    def __init__(self, queues: Iterable[QueueSpec] = (), auto_create: bool = False) -> None:
        self.lock = threading.RLock()
        self.auto_create = auto_create
        self.entities: dict[str, Entity] = {}
        self.faults: dict[str, Faults] = {}
        for spec in queues:
            self.declare(spec)

    # ---------------------------------------------------------------- entities

    def declare(self, spec: QueueSpec) -> Entity:
        """Adds a queue (replacing nothing: declaring twice is an error)."""
        with self.lock:
            key = spec.name.lower()
            if key in self.entities:
                raise BrokerError("com.microsoft:entity-already-exists", f"{spec.name} exists")
            entity = Entity(spec, spec.name)
            self.entities[key] = entity
            return entity

    def entity(self, path: str) -> Entity:
        """The entity (or dead-letter queue) at ``path``.

        Raises:
            BrokerError: not found (unless auto-create is on for a plain name).
        """
        with self.lock:
            base, dead = path, False
            if path.lower().endswith(DLQ_SUFFIX.lower()):
                base, dead = path[: -len(DLQ_SUFFIX)], True
            entity = self.entities.get(base.lower())
            if entity is None and self.auto_create:
                entity = self.declare(QueueSpec(name=base))
            if entity is None:
                raise BrokerError(NOT_FOUND, f"The messaging entity '{base}' could not be found.")
            if dead:
                assert entity.dlq is not None
                return entity.dlq
            return entity

    # ---------------------------------------------------------------- faults

    def set_fault(
        self,
        path: str,
        *,
        unavailable: bool | None = None,
        busy: bool | None = None,
        delay_s: float | None = None,
    ) -> None:
        """Injects faults on ``path`` (an entity name, or ``*`` for all)."""
        with self.lock:
            f = self.faults.setdefault(path.lower(), Faults())
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
            return out

    def check_faults(self, path: str) -> None:
        """Raises the error an entity under fault answers with."""
        f = self.fault_for(path)
        if f.unavailable:
            raise BrokerError(ENTITY_DISABLED, f"The messaging entity '{path}' is unavailable.")
        if f.busy:
            raise BrokerError(
                SERVER_BUSY, "The request was terminated because the entity is being throttled."
            )

    # ---------------------------------------------------------------- send

    def send(self, path: str, messages: list[tuple[ParsedMessage, int]]) -> list[int]:
        """Enqueues messages (one transfer: all or nothing). Returns sequence numbers
        (0 for pings and detected duplicates, which are accepted but not stored)."""
        with self.lock:
            entity = self.entity(path)
            self.check_faults(path)
            now = now_ms()
            spec = entity.spec
            for parsed, size in messages:
                if size > spec.max_message_bytes:
                    raise BrokerError(
                        SIZE_EXCEEDED,
                        f"The received message (size {size} bytes) exceeds the limit "
                        f"({spec.max_message_bytes} bytes) of '{entity.path}'.",
                    )
                if (
                    entity.requires_session
                    and parsed.session_id is None
                    and parsed.content_type != PING_CONTENT_TYPE
                ):
                    raise BrokerError(
                        NOT_ALLOWED,
                        f"The SessionId was not set on a message, and it cannot be sent to the "
                        f"entity '{entity.path}'. Entities that have session support enabled can "
                        "only receive messages that have the SessionId set to a valid value.",
                    )
            incoming = sum(size for _, size in messages)
            if entity.size_bytes + incoming > spec.max_size_in_megabytes * 1024 * 1024:
                raise BrokerError(QUOTA_EXCEEDED, f"The entity '{entity.path}' is full.")
            seqs = []
            for parsed, size in messages:
                seqs.append(self._enqueue(entity, parsed, size, now))
            return seqs

    def _enqueue(
        self,
        entity: Entity,
        parsed: ParsedMessage,
        size: int,
        now: int,
        scheduled_override: int | None = None,
    ) -> int:
        spec = entity.spec
        if parsed.content_type == PING_CONTENT_TYPE:
            return 0  # accepted, never delivered
        if spec.requires_duplicate_detection and parsed.message_id is not None:
            window = int(spec.duplicate_detection_history_window.total_seconds() * 1000)
            seen = entity.dedup.get(parsed.message_id)
            if seen is not None and now - seen < window:
                return 0
            entity.dedup[parsed.message_id] = now
            if len(entity.dedup) > 10_000:
                entity.dedup = {k: v for k, v in entity.dedup.items() if now - v < window}
        ttl = _effective_ttl(parsed.ttl_ms, spec)
        scheduled = scheduled_override
        if scheduled is None:
            scheduled = _as_ms(parsed.annotation("x-opt-scheduled-enqueue-time"))
        return entity.add(parsed, size, now, scheduled_ms=scheduled, ttl_ms=ttl).seq

    def schedule(self, path: str, messages: list[tuple[ParsedMessage, int, int]]) -> list[int]:
        """Schedules messages (parsed, size, due ms); returns their sequence numbers."""
        with self.lock:
            entity = self.entity(path)
            self.check_faults(path)
            now = now_ms()
            return [self._enqueue(entity, p, size, now, due) for p, size, due in messages]

    def cancel_scheduled(self, path: str, seqs: list[int]) -> None:
        with self.lock:
            entity = self.entity(path)
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
        parsed = ParsedMessage(
            bare=replace_application_properties(msg.parsed.bare, props),
            header=msg.parsed.header,
            annotations=msg.parsed.annotations,
            properties=msg.parsed.properties,
            application_properties=props,
            body_size=msg.parsed.body_size,
        )
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
            now = now_ms()
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

    def release_unsent(self, path: str, msg: StoredMessage) -> None:
        """Puts back a message whose delivery never reached the client (link closed)."""
        with self.lock:
            entity = self.entity(path)
            if msg.seq in entity.messages and msg.lock_token is not None:
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
        """complete | abandon | defer | dead-letter a locked message.

        Raises:
            BrokerError: lock lost.
        """
        with self.lock:
            entity = self.entity(path)
            now = now_ms()
            msg = self._locked(entity, token, now)
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
            for seq in sorted(s for s in entity.messages if s >= from_seq):
                msg = entity.messages[seq]
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
