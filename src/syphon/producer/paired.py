"""The paired-namespace sender: the producer half of syphon (seed 004).

A :class:`PairedNamespaceClient` holds a ``ServiceBusClient`` for the primary namespace
and one for the secondary namespace, and hands out :class:`PairedSender` objects for
queues and topics on the primary:

- While the primary is healthy, a send is an ordinary send to the primary.
- A non-transient failure (anything but server-busy and message-level errors such as
  size, including timeouts and connection failures) starts a timer for the entity. The
  send that failed raises the primary's error, as does every send inside the
  ``failover_interval``. When the interval passes with no successful send in between,
  the entity *fails over* (at the timer's expiry, or at a send that fails after it),
  and its sends go to the backlog.
- Failed over, an entity's messages go to a backlog queue of the secondary namespace
  in the backlog form (``x-ms-path`` always; ``x-ms-sessionid``, ``x-ms-timetolive`` in
  .NET ticks and ``x-ms-scheduledenqueuetimeutc`` only when set; MessageId and
  PartitionKey untouched; the copy's own TTL infinite). Each sender picks its backlog
  queue at random once, so unrelated clients spread their load.
- A backlog queue that fails a send leaves the rotation of the whole client; the
  sender picks another and sends again. With no queue left, :class:`BacklogUnavailableError`.
- One ping task per failed-over entity sends a ping (empty body, content type
  ``application/vnd.ms-servicebus-ping``, TTL 1 s, never delivered to consumers) every
  ``ping_primary_interval``; the first ping that succeeds moves every sender of the
  entity back to the primary, and the pings stop.
- When one side is closed or faults and the other is not closed within
  ``partner_close_timeout`` (5 s), the other is closed too, and every later send raises
  :class:`PairedClientClosedError` saying what happened.

Senders are not thread-safe (like the SDK's); the client is: senders on different
threads share its state. Messages are ``ServiceBusMessage`` objects with data bodies.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from syphon.core.envelope import (
    PING_CONTENT_TYPE,
    PING_TIME_TO_LIVE,
    TIME_TO_LIVE,
    Envelope,
    to_backlog_properties,
)
from syphon.core.errors import SyphonError
from syphon.core.naming import backlog_queue_path

log = logging.getLogger(__name__)

PRIMARY, SECONDARY = "primary", "secondary"


class PairedNamespaceError(SyphonError):
    """A paired-namespace send cannot be done."""


class BacklogUnavailableError(PairedNamespaceError):
    """Every backlog queue has failed a send and left the rotation."""


class BacklogMessageTooLargeError(PairedNamespaceError, ValueError):
    """A message's backlog form (the original plus its aliases) exceeds the limit."""


class PairedClientClosedError(PairedNamespaceError):
    """The paired client (or one of its sides) is closed or faulted."""


@dataclass(frozen=True)
class SendAvailabilityOptions:
    """The seed's send-availability options.

    Attributes:
        backlog_queue_count: backlog queues per primary namespace (seed default 10).
        failover_interval: how long an entity may go without a successful send after a
            non-transient failure before it fails over.
        ping_primary_interval: how often a failed-over entity is pinged (seed default
            1 minute).
        partner_close_timeout: how long the other side may stay open after one side is
            closed or faults (seed: 5 seconds).
    """

    backlog_queue_count: int = 10
    failover_interval: timedelta = timedelta(minutes=1)
    ping_primary_interval: timedelta = timedelta(minutes=1)
    partner_close_timeout: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if self.backlog_queue_count < 1:
            raise ValueError("backlog_queue_count must be at least 1")
        for name in ("failover_interval", "ping_primary_interval", "partner_close_timeout"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} must not be negative")


@dataclass
class PairedCounters:
    """What a paired client did: the operations the seed's cost section counts."""

    primary_sends: int = 0
    primary_failures: int = 0
    backlog_sends: int = 0
    backlog_failures: int = 0
    pings_sent: int = 0
    pings_failed: int = 0
    failovers: int = 0
    recoveries: int = 0
    backlog_queues_removed: int = 0


@dataclass(frozen=True)
class SendRoute:
    """Where one ``send_messages`` call went: ``primary`` or ``backlog`` (and which
    queue), with the number of messages."""

    target: str
    queue: str
    count: int


def counts_as_outage(exc: BaseException) -> bool:
    """True for errors that start (or continue) the failover timer.

    Server-busy is transient and never fails over; errors about the message itself
    (size, bad values) would fail on any entity and do not count either.
    """
    from azure.servicebus.exceptions import (
        MessageSizeExceededError,
        ServiceBusError,
        ServiceBusServerBusyError,
    )

    if isinstance(exc, (ServiceBusServerBusyError, MessageSizeExceededError)):
        return False
    return isinstance(exc, (ServiceBusError, TimeoutError, ConnectionError))


def ping_message() -> Any:
    """The seed's ping: empty, its own content type, TTL 1 second."""
    from azure.servicebus import ServiceBusMessage

    return ServiceBusMessage(b"", content_type=PING_CONTENT_TYPE, time_to_live=PING_TIME_TO_LIVE)


def to_backlog_message(message: Any, destination: str) -> Any:
    """The backlog form of ``message`` (a ``ServiceBusMessage``) bound for ``destination``.

    Raises:
        EnvelopeError: the message cannot be put in the backlog form (see
            :func:`syphon.core.envelope.to_backlog_properties`).
        TypeError: not a ``ServiceBusMessage`` with a data body.
    """
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes
    from azure.servicebus.amqp import AmqpMessageBodyType

    if not isinstance(message, ServiceBusMessage):
        raise TypeError(f"expected a ServiceBusMessage, got {type(message).__name__}")
    if message.body_type != AmqpMessageBodyType.DATA:
        raise TypeError("only messages with data bodies can be sent through the backlog")
    app: dict[str, Any] = {}
    for key, value in (message.application_properties or {}).items():
        app[key.decode("utf-8") if isinstance(key, bytes) else str(key)] = value
    envelope = Envelope(
        destination=destination,
        session_id=message.session_id,
        time_to_live=message.time_to_live,
        scheduled_enqueue_time_utc=message.scheduled_enqueue_time_utc,
        application_properties=app,
    )
    props = to_backlog_properties(envelope)
    if TIME_TO_LIVE in props:  # ticks go on the wire as an AMQP long, as .NET sends them
        props[TIME_TO_LIVE] = {TYPE: AMQPTypes.long, VALUE: props[TIME_TO_LIVE]}
    return ServiceBusMessage(
        b"".join(message.body),
        application_properties=props,  # type: ignore[arg-type]  # the typed long is pyamqp's
        message_id=message.message_id,
        partition_key=message.partition_key,
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        to=message.to,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
    )


def _close_quietly(handler: Any) -> None:
    """Closes an SDK client or sender; one of a failed namespace may fail to close."""
    if handler is None:
        return
    try:
        handler.close()
    except Exception as exc:
        log.debug("closing %s failed: %s", type(handler).__name__, type(exc).__name__)


@dataclass
class _EntityState:
    kind: str
    first_failure: float | None = None
    failed_over: bool = False
    ping_thread: threading.Thread | None = None
    ping_stop: threading.Event = field(default_factory=threading.Event)


class PairedNamespaceClient:
    """Hands out paired senders for entities of one primary namespace.

    Args:
        primary: a ``ServiceBusClient`` for the primary namespace.
        secondary: a ``ServiceBusClient`` for the secondary namespace (backlog queues).
        primary_namespace: the primary's namespace name, as in backlog queue paths.
        options: the send-availability options.
        rng: the random source for backlog choices (seed it in tests).
        clock: a monotonic clock in seconds (for the failover timer).
    """

    def __init__(
        self,
        primary: Any,
        secondary: Any,
        primary_namespace: str,
        options: SendAvailabilityOptions | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options or SendAvailabilityOptions()
        self.primary_namespace = primary_namespace
        self.backlog_paths = [
            backlog_queue_path(primary_namespace, i)
            for i in range(self.options.backlog_queue_count)
        ]
        self._clients = {PRIMARY: primary, SECONDARY: secondary}
        self._rng = rng or random.Random()  # noqa: S311 (load spreading, not security)
        self._clock = clock
        self._lock = threading.RLock()
        self._entities: dict[str, _EntityState] = {}
        self._rotation = list(range(len(self.backlog_paths)))
        self._counters = PairedCounters()
        self._closed: dict[str, str] = {}  # side -> "closed" | "faulted: …"
        self._error: str | None = None
        self._watchdog: threading.Timer | None = None

    # ------------------------------------------------------------ senders

    def get_queue_sender(self, queue_name: str) -> PairedSender:
        return PairedSender(self, queue_name, "queue")

    def get_topic_sender(self, topic_name: str) -> PairedSender:
        return PairedSender(self, topic_name, "topic")

    # ------------------------------------------------------------ state

    @property
    def counters(self) -> PairedCounters:
        """A snapshot of the counters."""
        with self._lock:
            return replace(self._counters)

    @property
    def rotation(self) -> list[str]:
        """The backlog queues still in the rotation."""
        with self._lock:
            return [self.backlog_paths[i] for i in self._rotation]

    def is_failed_over(self, entity: str) -> bool:
        with self._lock:
            state = self._entities.get(entity.lower())
            return bool(state and state.failed_over)

    def _state(self, entity: str, kind: str) -> _EntityState:
        with self._lock:
            return self._entities.setdefault(entity.lower(), _EntityState(kind))

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            setattr(self._counters, name, getattr(self._counters, name) + by)

    def _record_success(self, entity: str, kind: str, count: int) -> None:
        with self._lock:
            self._state(entity, kind).first_failure = None
            self._counters.primary_sends += count

    def _record_failure(self, entity: str, kind: str, exc: BaseException) -> bool:
        """Notes a non-transient failure; True when the entity is (now) failed over."""
        with self._lock:
            self._counters.primary_failures += 1
            state = self._state(entity, kind)
            if state.failed_over:
                return True
            now = self._clock()
            interval = self.options.failover_interval.total_seconds()
            if state.first_failure is None:
                state.first_failure = now
                log.warning("send to %s failed (%s); failover timer started", entity,
                            type(exc).__name__)  # fmt: skip
                # the timer fails the entity over at expiry even if nobody sends again
                timer = threading.Timer(interval, self._timer_expired, (entity, state, now))
                timer.daemon = True
                timer.start()
            if now - state.first_failure < interval:
                return False
            self._fail_over(entity, state)
            return True

    def _timer_expired(self, entity: str, state: _EntityState, started: float) -> None:
        with self._lock:
            if state.failed_over or state.first_failure != started or self._closed:
                return  # a send succeeded meanwhile (or a new timer runs, or closed)
            self._fail_over(entity, state)

    def _fail_over(self, entity: str, state: _EntityState) -> None:
        state.failed_over = True
        self._counters.failovers += 1
        log.warning("%s failed over to the backlog of %s", entity, self.primary_namespace)
        state.ping_stop = threading.Event()
        state.ping_thread = threading.Thread(
            target=self._ping_loop,
            args=(entity, state),
            name=f"syphon-ping-{entity}",
            daemon=True,
        )
        state.ping_thread.start()

    def _ping_loop(self, entity: str, state: _EntityState) -> None:
        interval = self.options.ping_primary_interval.total_seconds()
        client = self._clients[PRIMARY]
        sender = None
        try:
            while not state.ping_stop.wait(interval):
                try:
                    if sender is None:
                        sender = (
                            client.get_queue_sender(entity)
                            if state.kind == "queue"
                            else client.get_topic_sender(entity)
                        )
                    self._count("pings_sent")
                    sender.send_messages(ping_message())
                except Exception as exc:  # the primary is still down: ping again later
                    self._count("pings_failed")
                    log.debug("ping to %s failed: %s", entity, type(exc).__name__)
                    # a handler that failed may be unusable: the next ping starts afresh
                    _close_quietly(sender)
                    sender = None
                    continue
                with self._lock:
                    state.failed_over = False
                    state.first_failure = None
                    self._counters.recoveries += 1
                log.warning("%s is available again: sends go to the primary", entity)
                return
        finally:
            _close_quietly(sender)

    def _backlog_index(self, current: int | None) -> int:
        """The sender's backlog queue: its current one while in the rotation, else a
        new random pick."""
        with self._lock:
            if current is not None and current in self._rotation:
                return current
            if not self._rotation:
                raise BacklogUnavailableError(
                    f"every backlog queue of {self.primary_namespace} failed a send and left "
                    "the rotation"
                )
            return self._rng.choice(self._rotation)

    def _remove_from_rotation(self, index: int, exc: BaseException) -> None:
        with self._lock:
            if index in self._rotation:
                self._rotation.remove(index)
                self._counters.backlog_queues_removed += 1
                log.warning(
                    "backlog queue %s failed a send (%s) and leaves the rotation",
                    self.backlog_paths[index],
                    type(exc).__name__,
                )

    # ------------------------------------------------------------ close / fault

    def check_open(self) -> None:
        """Raises :class:`PairedClientClosedError` once a side is closed or faulted."""
        with self._lock:
            if self._error is not None:
                raise PairedClientClosedError(self._error)
            if self._closed:
                side, how = next(iter(self._closed.items()))
                raise PairedClientClosedError(f"the {side} side of the paired client is {how}")

    def close_primary(self) -> None:
        self._end_side(PRIMARY, "closed")

    def close_secondary(self) -> None:
        self._end_side(SECONDARY, "closed")

    def fault(self, side: str, exc: BaseException) -> None:
        """Marks a side as faulted (the partner is closed after the grace period)."""
        self._end_side(side, f"faulted ({type(exc).__name__})")

    def _end_side(self, side: str, how: str) -> None:
        partner = SECONDARY if side == PRIMARY else PRIMARY
        with self._lock:
            if side in self._closed:
                return
            self._closed[side] = how
            if partner in self._closed:  # both ended: a clean close
                if self._watchdog is not None:
                    self._watchdog.cancel()
                return
            grace = self.options.partner_close_timeout.total_seconds()
            self._watchdog = threading.Timer(grace, self._close_partner, (side, partner, how))
            self._watchdog.daemon = True
            self._watchdog.start()
        self._close_client(side)

    def _close_partner(self, side: str, partner: str, how: str) -> None:
        with self._lock:
            if partner in self._closed:
                return
            grace = self.options.partner_close_timeout.total_seconds()
            self._closed[partner] = "faulted (partner ended)"
            self._error = (
                f"the {side} side was {how} and the {partner} side did not close within "
                f"{grace:g} s, so it was closed too"
            )
        log.error("paired client: %s", self._error)
        self._close_client(partner)

    def _close_client(self, side: str) -> None:
        _close_quietly(self._clients[side])

    def close(self) -> None:
        """Closes both sides and stops the ping tasks."""
        with self._lock:
            states = list(self._entities.values())
        for state in states:
            state.ping_stop.set()
        self._end_side(PRIMARY, "closed")
        self._end_side(SECONDARY, "closed")
        for state in states:
            if state.ping_thread is not None:
                state.ping_thread.join(5)

    def __enter__(self) -> PairedNamespaceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PairedSender:
    """Sends to one queue or topic of the primary, through the backlog when failed over."""

    def __init__(self, client: PairedNamespaceClient, entity: str, kind: str) -> None:
        client.check_open()
        self.client = client
        self.entity = entity
        self.kind = kind
        self._primary: Any = None
        self._backlog: Any = None
        self._backlog_at: int | None = None
        # one random pick per sender, so that unrelated clients spread their load
        # (with none in the rotation, sends say so; the pick happens when one is back)
        self._choice: int | None = None
        with contextlib.suppress(BacklogUnavailableError):
            self._choice = client._backlog_index(None)

    @property
    def backlog_queue(self) -> str:
        """The backlog queue this sender uses when its entity is failed over."""
        self._choice = self.client._backlog_index(self._choice)
        return self.client.backlog_paths[self._choice]

    def _primary_sender(self) -> Any:
        if self._primary is None:
            primary = self.client._clients[PRIMARY]
            self._primary = (
                primary.get_queue_sender(self.entity)
                if self.kind == "queue"
                else primary.get_topic_sender(self.entity)
            )
        return self._primary

    def _backlog_sender(self, index: int) -> Any:
        if self._backlog_at != index:
            self._close_backlog()
            path = self.client.backlog_paths[index]
            self._backlog = self.client._clients[SECONDARY].get_queue_sender(path)
            self._backlog_at = index
        return self._backlog

    def _close_backlog(self) -> None:
        _close_quietly(self._backlog)
        self._backlog = None
        self._backlog_at = None

    def send_messages(self, message: Any | Iterable[Any]) -> SendRoute:
        """Sends one message or a list (one transfer to the primary, in order).

        Returns:
            Where the messages went.

        Raises:
            PairedClientClosedError: the client is closed or faulted.
            BacklogUnavailableError: failed over, and no backlog queue accepts sends.
            BacklogMessageTooLargeError: a message's backlog form is over the limit.
            azure.servicebus.exceptions.ServiceBusError: the primary's error, while the
                entity is not (yet) failed over.
        """
        from azure.servicebus import ServiceBusMessage

        self.client.check_open()
        messages = [message] if isinstance(message, ServiceBusMessage) else list(message)
        if not messages:
            return SendRoute("primary", self.entity, 0)
        state = self.client._state(self.entity, self.kind)
        if not state.failed_over:
            try:
                self._primary_sender().send_messages(
                    messages[0] if len(messages) == 1 else messages
                )
            except Exception as exc:
                if not counts_as_outage(exc):
                    raise
                self._auth_fault(PRIMARY, exc)
                if not self.client._record_failure(self.entity, self.kind, exc):
                    raise
            else:
                self.client._record_success(self.entity, self.kind, len(messages))
                return SendRoute("primary", self.entity, len(messages))
        return self._send_to_backlog(messages)

    def _auth_fault(self, side: str, exc: BaseException) -> None:
        from azure.servicebus.exceptions import ServiceBusAuthorizationError

        if isinstance(exc, ServiceBusAuthorizationError):
            self.client.fault(side, exc)

    def _send_to_backlog(self, messages: list[Any]) -> SendRoute:
        from azure.servicebus.exceptions import MessageSizeExceededError

        pending = [to_backlog_message(m, self.entity) for m in messages]
        while True:
            self.client.check_open()
            index = self.client._backlog_index(self._choice)
            self._choice = index
            sender = self._backlog_sender(index)
            path = self.client.backlog_paths[index]
            try:
                while pending:
                    batch = sender.create_message_batch()
                    taken = 0
                    for item in pending:
                        try:
                            batch.add_message(item)
                        except MessageSizeExceededError:
                            if taken == 0:
                                raise BacklogMessageTooLargeError(
                                    f"a message for {self.entity} is too large for the backlog: "
                                    f"its backlog form (with the x-ms-* aliases) exceeds the "
                                    f"{batch.max_size_in_bytes} bytes {path} accepts"
                                ) from None
                            break
                        taken += 1
                    sender.send_messages(batch)
                    pending = pending[taken:]
                    self.client._count("backlog_sends", taken)
            except BacklogMessageTooLargeError:
                raise
            except Exception as exc:
                if not counts_as_outage(exc):
                    raise
                self.client._count("backlog_failures")
                self._auth_fault(SECONDARY, exc)
                self.client._remove_from_rotation(index, exc)
                self._close_backlog()
                continue
            return SendRoute("backlog", path, len(messages))

    def close(self) -> None:
        _close_quietly(self._primary)
        self._primary = None
        self._close_backlog()

    def __enter__(self) -> PairedSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
