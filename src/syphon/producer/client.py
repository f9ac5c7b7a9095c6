"""The paired-namespace sender: the producer half of syphon.

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

import itertools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from syphon.core.naming import backlog_queue_path
from syphon.producer.options import (
    PRIMARY,
    SECONDARY,
    BacklogUnavailableError,
    PairedClientClosedError,
    PairedCounters,
    SendAvailabilityOptions,
    close_quietly,
)
from syphon.producer.sender import PairedSender
from syphon.servicebus.backlog_messages import ping_message

log = logging.getLogger(__name__)


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
        timer: starts the failover timer and the grace-period watchdog
            (``threading.Timer``'s signature; a manual one in tests).
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
        timer: Callable[..., threading.Timer] = threading.Timer,
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
        self._timer = timer
        self._lock = threading.RLock()
        self._entities: dict[str, _EntityState] = {}
        self._rotation = list(range(len(self.backlog_paths)))
        self._counters = PairedCounters()
        self._closed: dict[str, str] = {}  # side -> "closed" | "faulted: …"
        self._error: str | None = None
        self._watchdog: threading.Timer | None = None
        #: the stamp of each backlog copy: this client's id and its count of copies
        self.sender_id = uuid.uuid4().hex
        self._copies = itertools.count(1)

    # ------------------------------------------------------------ senders

    def get_queue_sender(self, queue_name: str) -> PairedSender:
        return PairedSender(self, queue_name, "queue")

    def get_topic_sender(self, topic_name: str) -> PairedSender:
        return PairedSender(self, topic_name, "topic")

    def stamp(self) -> tuple[str, int]:
        """The next backlog copy's stamp (this client's id, and the copy's number): what
        orders two copies of a key whose backlog enqueue times tie."""
        with self._lock:
            return self.sender_id, next(self._copies)

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
                log.warning(
                    "send to %s failed (%s); failover timer started", entity, type(exc).__name__
                )
                # the timer fails the entity over at expiry even if nobody sends again
                timer = self._timer(interval, self._timer_expired, (entity, state, now))
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
                    close_quietly(sender)
                    sender = None
                    continue
                with self._lock:
                    state.failed_over = False
                    state.first_failure = None
                    self._counters.recoveries += 1
                log.warning("%s is available again: sends go to the primary", entity)
                return
        finally:
            close_quietly(sender)

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
            self._watchdog = self._timer(grace, self._close_partner, (side, partner, how))
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
        close_quietly(self._clients[side])

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
