"""The local Service Bus as a context manager running in a background thread."""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Iterable
from types import TracebackType

from proton.reactor import ApplicationEvent, Container, EventInjector

from servicebus_emulator.admin import AdminServer
from servicebus_emulator.amqp import AmqpHandler
from servicebus_emulator.auth import DEFAULT_KEYS, ROOT_KEY, AccessKey
from servicebus_emulator.broker import Broker
from servicebus_emulator.clock import Clock, ManualClock, SystemClock
from servicebus_emulator.entities import QueueSpec, TopicSpec
from servicebus_emulator.tls import TlsMaterial, generate

log = logging.getLogger(__name__)

#: Connections the AMQP and management listeners queue before accepting them.
LISTEN_BACKLOG = 1024

#: The key in emulator connection strings (the namespace's root key, all rights).
EMULATOR_KEY_NAME = ROOT_KEY.name
EMULATOR_KEY = ROOT_KEY.key


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Emulator:
    """A local Service Bus on loopback.

    Example::

        with Emulator(queues=[QueueSpec("orders")]) as sb:
            client = ServiceBusClient.from_connection_string(sb.connection_string)

    Args:
        queues: the queues that exist from the start.
        topics: the topics (with their subscriptions and rules) that exist from the start.
        port: the AMQP port; 0 picks a free one.
        host: the address to listen on (loopback by default).
        auto_create: create unknown queues on first use instead of failing like the
            service does.
        admin_port: the HTTPS management API's port; 0 picks a free one. Its
            certificate is generated at start; trust :attr:`ca_bundle` to reach it.
        keys: the namespace's shared access keys; every SAS token a client presents is
            checked against them. By default the root key of :attr:`connection_string`
            (all rights), ``listen-only`` and ``send-only`` (see
            :meth:`connection_string_for`).
        clock: the time the namespace keeps (lock expiry, time to live, scheduled
            messages, duplicate windows): the wall clock by default, or a
            :class:`~servicebus_emulator.clock.ManualClock` that a test moves with
            :meth:`advance`.
    """

    def __init__(
        self,
        queues: Iterable[QueueSpec] = (),
        port: int = 0,
        host: str = "127.0.0.1",
        auto_create: bool = False,
        topics: Iterable[TopicSpec] = (),
        admin_port: int = 0,
        keys: Iterable[AccessKey] = DEFAULT_KEYS,
        clock: Clock | None = None,
    ) -> None:
        self.host = host
        self._auto_port = port == 0
        self.port = port or free_port(host)
        self._admin_port_wanted = admin_port
        self._tls: TlsMaterial | None = None
        self._admin: AdminServer | None = None
        self.clock: Clock = clock or SystemClock()
        self.broker = Broker(
            queues, auto_create=auto_create, topics=topics, keys=keys, clock=self.clock
        )
        self.handler = AmqpHandler(self.broker, host)
        self._injector = EventInjector()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def connection_string(self) -> str:
        """An emulator connection string the SDK accepts (plain TCP, the root key)."""
        return self.connection_string_for(EMULATOR_KEY_NAME)

    def connection_string_for(self, key_name: str, key: str | None = None) -> str:
        """The connection string with the namespace's key ``key_name`` (or, to test a
        refusal, any other ``key``)."""
        key = self._key(key_name, key)
        return (
            f"Endpoint=sb://{self.host}:{self.port};SharedAccessKeyName={key_name};"
            f"SharedAccessKey={key};UseDevelopmentEmulator=true;"
        )

    @property
    def admin_port(self) -> int:
        """The HTTPS management API's port (after start)."""
        if self._admin is None:
            raise RuntimeError("the emulator is not started")
        return self._admin.port

    @property
    def admin_endpoint(self) -> str:
        """``host:port`` of the management API, the "namespace" an admin client takes."""
        return f"{self.host}:{self.admin_port}"

    @property
    def admin_connection_string(self) -> str:
        """A connection string for ``ServiceBusAdministrationClient.from_connection_string``
        (pass ``connection_verify=emulator.ca_bundle`` with it)."""
        return self.admin_connection_string_for(EMULATOR_KEY_NAME)

    def _key(self, key_name: str, key: str | None) -> str:
        return self.broker.keys.keys[key_name].key if key is None else key

    def admin_connection_string_for(self, key_name: str, key: str | None = None) -> str:
        """:attr:`admin_connection_string` with another key, as
        :meth:`connection_string_for`."""
        key = self._key(key_name, key)
        return (
            f"Endpoint=sb://{self.admin_endpoint};SharedAccessKeyName={key_name};"
            f"SharedAccessKey={key};"
        )

    @property
    def ca_bundle(self) -> str:
        """Path of the PEM file with the CA that signed the management API's certificate."""
        if self._tls is None:
            raise RuntimeError("the emulator is not started")
        return str(self._tls.ca_bundle)

    def start(self) -> Emulator:
        """Starts serving; returns once the port accepts connections."""
        self._tls = generate([self.host])
        self._admin = AdminServer(self.broker, self.host, self._admin_port_wanted, self._tls)
        self._admin.start()
        for _ in range(5):
            self._ready.clear()
            self._error = None
            self._injector = EventInjector()
            self._thread = threading.Thread(
                target=self._run, name="servicebus-emulator", daemon=True
            )
            self._thread.start()
            if not self._ready.wait(10):
                self.stop()
                raise RuntimeError("the local Service Bus did not start within 10 s")
            in_use = isinstance(self._error, OSError) and self._error.errno == errno.EADDRINUSE
            if not (in_use and self._auto_port):
                break
            # another process took the free port between the pick and the bind: pick again
            self._thread.join(5)
            self.port = free_port(self.host)
        if self._error is not None:
            error = self._error
            self.stop()
            raise RuntimeError(f"the local Service Bus failed to start: {error}")
        return self

    def _run(self) -> None:
        try:
            container = Container(self.handler)
            container.selectable(self._injector)
            acceptor = container.listen(f"{self.host}:{self.port}")
            # proton listens with a backlog of 10: more clients connecting at once (a job
            # opening its links side by side) would wait for SYN retransmissions, 1 s and
            # more, which the service never makes them do (no public way either)
            listening = acceptor._selectable._delegate
            if isinstance(listening, socket.socket):
                listening.listen(LISTEN_BACKLOG)
            self._container = container
            self._ready.set()
            try:
                container.run()
            finally:
                # a stopped reactor leaves its listening socket open, and a client that
                # connects then waits forever for an answer instead of being refused:
                # an outage must look like one (proton's Acceptor has no public way)
                acceptor._selectable.close()
        except BaseException as exc:  # reported to start() or logged
            if self._ready.is_set():
                log.exception("the local Service Bus stopped with an error")
            self._error = exc
            self._ready.set()

    def stop(self) -> None:
        """Closes every connection and stops the server thread."""
        if self._admin is not None:
            self._admin.stop()
            self._admin = None
        if self._tls is not None:
            self._tls.cleanup()
            self._tls = None
        if self._thread is None:
            return
        self._injector.trigger(ApplicationEvent("emulator_stop", subject=None))
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------ fault API

    def make_unavailable(self, entity: str = "*", unavailable: bool = True) -> None:
        """Sends and receives on ``entity`` fail with a non-transient error."""
        self.broker.set_fault(entity, unavailable=unavailable)
        self._wake()

    def throttle(self, entity: str = "*", busy: bool = True) -> None:
        """Requests on ``entity`` fail with server busy (transient)."""
        self.broker.set_fault(entity, busy=busy)
        self._wake()

    def fail_sends_after(self, entity: str, sends: int) -> None:
        """``entity`` accepts ``sends`` more sends (transfers; pings aside), then refuses
        every send as unavailable (a destination that starts failing partway through)."""
        self.broker.set_fault(entity, sends_left=sends)

    def slow_down(self, seconds: float, entity: str = "*") -> None:
        """Delays replies by ``seconds``."""
        self.broker.set_fault(entity, delay_s=seconds)

    def make_partition_unavailable(
        self, entity: str, partition: int, unavailable: bool = True
    ) -> None:
        """One partition of a partitioned entity fails: keyed sends to it fail (the
        service's timeout), keyless sends go to another partition."""
        self.broker.set_fault(entity, unavailable=unavailable, partition=partition)
        self._wake()

    def make_namespace_unavailable(self, unavailable: bool = True) -> None:
        """The whole namespace goes down (or comes back): open connections are dropped
        and new ones are closed as soon as they arrive, so clients fail with connection
        errors rather than entity errors. The management API keeps answering."""
        self.handler.namespace_down = unavailable
        if unavailable:
            self.drop_connections()

    def advance(self, seconds: float) -> None:
        """Moves the namespace's :class:`~servicebus_emulator.clock.ManualClock` forward
        and has its receivers served at once: locks that expired, messages whose time
        to live ran out or whose scheduled time came are dealt with as the service
        would.

        Raises:
            TypeError: the emulator keeps the wall clock (no ``clock=ManualClock()``).
        """
        if not isinstance(self.clock, ManualClock):
            raise TypeError("only an emulator started with clock=ManualClock() can be moved")
        self.clock.advance(seconds)
        self._wake()

    def drop_connections(self) -> None:
        """Drops every open connection now (at the reactor's next tick)."""
        self.handler.drop_requested = True
        self._wake()

    def clear_faults(self) -> None:
        """Restores normal service (the namespace included)."""
        self.handler.namespace_down = False
        self.broker.clear_faults()
        self._wake()

    def _wake(self) -> None:
        """Has the reactor's thread serve every receiver in
        :data:`~servicebus_emulator.ticks.TICK_SECONDS`: what a fault, a moved clock or a
        drop changes reaches them then, not at an idle receiver's next tick."""
        if self._thread is not None:
            self._injector.trigger(ApplicationEvent("emulator_wake", subject=None))
