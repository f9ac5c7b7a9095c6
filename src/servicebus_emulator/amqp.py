"""The AMQP 1.0 side of the local Service Bus, on Apache Qpid Proton.

Translates what the ``azure-servicebus`` SDK does on the wire (claims-based auth on
``$cbs``, entity links, ``$management`` requests, dispositions) into calls on the
:class:`~servicebus_emulator.broker.Broker`. Every handler is guarded: an exception is
logged and closes the affected link or connection with an AMQP error; the server keeps
running.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proton import (
    Condition,
    Delivery,
    Endpoint,
    Link,
    Message,
    Terminus,
    symbol,
    ulong,
)
from proton import int32 as amqp_int

from servicebus_emulator.auth import (
    LISTEN,
    SEND,
    AuthError,
    Grant,
    token_kind,
    unauthorized,
)
from servicebus_emulator.broker import Broker
from servicebus_emulator.codec import (
    MessageFormatError,
    parse_sections,
    render_message,
    split_sections,
)
from servicebus_emulator.frames import (
    LOCKED_UNTIL_UTC,
    SESSION_FILTER,
    dotnet_ticks,
    entity_from_address,
    lock_lost,
    parse_transfer,
    reject,
    request_body,
    session_filter,
    text,
)
from servicebus_emulator.management import Response, handle_management
from servicebus_emulator.model import SIZE_EXCEEDED, BrokerError, StoredMessage
from servicebus_emulator.ticks import TICK_SECONDS, Timer, next_tick

log = logging.getLogger(__name__)

CBS = "$cbs"
MANAGEMENT_SUFFIX = "/$management"
SEND_CREDIT = 500


@dataclass
class LinkState:
    kind: str  # cbs | mgmt | in (client sends) | out (client receives)
    entity: str = ""
    peek_lock: bool = True
    session_id: str | None = None
    unsettled: dict[bytes, StoredMessage] = field(default_factory=dict)
    owner: object = field(default_factory=object)


def guarded(method: Callable[..., None]) -> Callable[..., None]:
    """Keeps the server alive whatever one handler does."""

    @functools.wraps(method)
    def wrapper(self: AmqpHandler, event: Any) -> None:
        try:
            method(self, event)
        except Exception as exc:
            log.exception("handler %s failed", method.__name__)
            self.fail_endpoint(event, exc)

    return wrapper


class AmqpHandler:
    """Proton event handler serving one namespace."""

    def __init__(self, broker: Broker, host: str) -> None:
        self.broker = broker
        self.host = host
        self.connections: set[Any] = set()
        self.out_links: set[Any] = set()
        self.drop_requested = False
        self.namespace_down = False
        self.container: Any = None
        self.timer = Timer()  # the periodic work's next tick (the reactor thread's)

    # ------------------------------------------------------------ plumbing

    def fail_endpoint(self, event: Any, exc: Exception) -> None:
        condition = Condition("amqp:internal-error", str(exc)[:500])
        try:
            link = event.link
            if link is not None and link.state & Endpoint.LOCAL_ACTIVE:
                link.condition = condition
                link.close()
                return
            conn = event.connection
            if conn is not None and not conn.state & Endpoint.LOCAL_CLOSED:
                conn.condition = condition
                conn.close()
        except Exception:
            log.exception("could not close the failing endpoint")

    @guarded
    def on_emulator_stop(self, event: Any) -> None:
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close_tail()
                conn.transport.close_head()
        self.container.stop()

    def on_reactor_init(self, event: Any) -> None:
        self.container = event.container

    def tick_soon(self, delay: float = TICK_SECONDS) -> None:
        """The periodic work (in the reactor thread) ``delay`` seconds from now at the
        latest (:mod:`servicebus_emulator.ticks`); an idle namespace costs no CPU."""
        if self.container is not None:
            self.timer.schedule(self.container, delay, self)

    @guarded
    def on_emulator_wake(self, event: Any) -> None:
        self.tick_soon()  # a clock moved, a fault changed, connections to drop

    @guarded
    def on_timer_task(self, event: Any) -> None:
        self.timer.ran()
        if self.drop_requested:
            self.drop_requested = False
            for conn in list(self.connections):
                transport = conn.transport
                if transport is not None:
                    transport.close_tail()
                    transport.close_head()
                self.connections.discard(conn)
        for link in list(self.out_links):
            self.pump(link)
        self.tick_when_due()

    def tick_when_due(self) -> None:
        """The next tick for the attached receivers (:mod:`servicebus_emulator.ticks`)."""
        entities = (link.state_info.entity for link in self.out_links)
        delay = next_tick(self.broker, entities, self.drop_requested)
        if delay is not None:
            self.tick_soon(delay)

    @guarded
    def on_connection_bound(self, event: Any) -> None:
        if self.namespace_down:  # as if nothing listened: the connection ends at once
            event.transport.close_tail()
            event.transport.close_head()
            return
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS PLAIN MSSBCBS")
        event.transport.require_auth(False)

    @guarded
    def on_connection_remote_open(self, event: Any) -> None:
        conn = event.connection
        self.connections.add(conn)
        if conn.state & Endpoint.LOCAL_UNINIT:
            conn.container = "servicebus-emulator"
            conn.open()

    @guarded
    def on_connection_remote_close(self, event: Any) -> None:
        self._forget_connection(event.connection)
        if not event.connection.state & Endpoint.LOCAL_CLOSED:
            event.connection.close()

    @guarded
    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        if condition is not None:
            # clients often end with a frame on a just-ended session: worth a debug line only
            log.debug("connection closed: %s: %s", condition.name, condition.description)

    @guarded
    def on_transport_closed(self, event: Any) -> None:
        if event.connection is not None:
            self._forget_connection(event.connection)

    def _forget_connection(self, conn: Any) -> None:
        self.connections.discard(conn)
        link = conn.link_head(0)
        while link is not None:
            self._release_link(link)
            link = link.next(0)

    @guarded
    def on_session_remote_open(self, event: Any) -> None:
        if event.session.state & Endpoint.LOCAL_UNINIT:
            event.session.open()

    @guarded
    def on_session_remote_close(self, event: Any) -> None:
        if not event.session.state & Endpoint.LOCAL_CLOSED:
            event.session.close()

    # ------------------------------------------------------------ links

    @guarded
    def on_link_remote_open(self, event: Any) -> None:
        link = event.link
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        if link.is_receiver:
            address = link.remote_target.address
            entity = entity_from_address(address)
            if entity == CBS or entity.endswith(MANAGEMENT_SUFFIX):
                link.state_info = LinkState("cbs" if entity == CBS else "mgmt", entity)
                link.open()
                if entity != CBS and (refused := self._refusal(link, entity)) is not None:
                    self._close_link(link, refused)
                    return
                link.flow(SEND_CREDIT)
                return
            link.state_info = LinkState("in", entity)
            error = self._refusal(link, entity, SEND) or self._entity_error(entity, sending=True)
            if error is None:
                spec = self.broker.send_target(entity).spec
                link.max_message_size = spec.max_message_bytes
                link.properties = {
                    symbol("com.microsoft:max-message-batch-size"): ulong(spec.max_batch_bytes)
                }
            if error is not None:
                # the service answers an attach to a missing entity with a null terminus
                link.target.type = Terminus.UNSPECIFIED
                link.open()
                self._close_link(link, error)
            else:
                link.open()
                link.flow(SEND_CREDIT)
            return
        # the client receives on this link
        address = link.remote_source.address
        entity = entity_from_address(address)
        if entity == CBS or entity.endswith(MANAGEMENT_SUFFIX):
            link.state_info = LinkState("cbs" if entity == CBS else "mgmt", entity)
            link.open()
            if entity != CBS and (refused := self._refusal(link, entity)) is not None:
                self._close_link(link, refused)
            return
        peek_lock = link.remote_snd_settle_mode != Link.SND_SETTLED
        state = LinkState("out", entity, peek_lock=peek_lock)
        link.state_info = state
        error = self._refusal(link, entity, LISTEN) or self._entity_error(entity)
        session_requested, wanted = session_filter(link.remote_source)
        if error is None and session_requested:
            try:
                sid, locked_until = self.broker.lock_session(entity, wanted, state.owner)
                state.session_id = sid
                link.source.filter.clear()
                link.source.filter.put_dict({SESSION_FILTER: sid})
                link.properties = {LOCKED_UNTIL_UTC: dotnet_ticks(locked_until)}
            except BrokerError as exc:
                error = exc
        elif error is None and self.broker.entity(entity).requires_session:
            error = BrokerError(
                "amqp:not-allowed",
                f"It is not possible for an entity that requires sessions to create a "
                f"non-sessionful message receiver. TrackingId:{uuid.uuid4()}",
            )
        if error is not None:
            link.source.type = Terminus.UNSPECIFIED
            link.open()
            self._close_link(link, error)
            return
        if state.peek_lock:
            link.snd_settle_mode = Link.SND_UNSETTLED
        else:
            link.snd_settle_mode = Link.SND_SETTLED
        link.open()
        self.out_links.add(link)
        self.tick_soon()

    def _entity_error(self, entity: str, sending: bool = False) -> BrokerError | None:
        try:
            if sending:
                self.broker.send_target(entity)
            else:
                self.broker.entity(entity)
        except BrokerError as exc:
            return exc
        return None

    def _refusal(self, link: Any, address: str, right: str | None = None) -> BrokerError | None:
        """Why the connection may not do what needs ``right`` on ``address`` (None: it
        may): no token it put covers the address with that right (for a ``$management``
        link, with any right; each request is checked again).

        A token covers every address its audience is a prefix of; an entity's
        management node is covered by a token for the entity and by one for the node
        itself (``<entity>/$management``, the audience the JavaScript SDK signs its
        management link with), as the service does."""
        entity = address.removesuffix(MANAGEMENT_SUFFIX)
        grants: list[Grant] = getattr(link.connection, "grants", [])
        rights = (right,) if right is not None else (LISTEN, SEND)
        covered = {entity, address}
        if any(g.allows(a, r) for g in grants for r in rights for a in covered):
            return None
        refused = unauthorized(rights[0], f"sb://{self.host}/{entity}")
        return BrokerError(refused.condition, refused.description)

    def _close_link(self, link: Any, error: BrokerError) -> None:
        link.condition = Condition(error.condition, error.description)
        link.close()

    @guarded
    def on_link_remote_close(self, event: Any) -> None:
        self._release_link(event.link)
        if not event.link.state & Endpoint.LOCAL_CLOSED:
            event.link.close()

    def _release_link(self, link: Any) -> None:
        self.out_links.discard(link)
        state: LinkState | None = getattr(link, "state_info", None)
        if state is None or state.kind != "out":
            return
        if state.session_id is None:
            # the service keeps the locks of a closed link's unsettled deliveries until
            # they lapse (then each is delivered again, its delivery count one higher);
            # a client releases what it never handed out before it closes
            state.unsettled.clear()
            return
        for tag, msg in state.unsettled.items():
            with contextlib.suppress(BrokerError):
                self.broker.release_unsent(state.entity, msg, uuid.UUID(bytes_le=bytes(tag)))
        state.unsettled.clear()
        if state.session_id is not None:
            with contextlib.suppress(BrokerError):
                self.broker.release_session(state.entity, state.session_id, state.owner)

    @guarded
    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link.is_sender and link in self.out_links:
            self.pump(link)
            self.tick_when_due()  # a lock it took may expire before the next tick
        elif link.is_sender and link.drain_mode:
            link.drained()

    # ------------------------------------------------------------ deliveries

    @guarded
    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        link = delivery.link
        state: LinkState | None = getattr(link, "state_info", None)
        if state is None:
            return
        if link.is_receiver:
            if not delivery.readable or delivery.partial:
                return
            payload = bytes(link.recv(delivery.pending))
            link.advance()
            if state.kind == "in":
                self._on_send(link, state, delivery, payload)
            else:
                self._on_request(link, state, delivery, payload)
            if link.credit < SEND_CREDIT // 2:
                link.flow(SEND_CREDIT - link.credit)
        elif delivery.updated and state.kind == "out":
            self._on_disposition(state, delivery)

    def _on_send(self, link: Any, state: LinkState, delivery: Any, payload: bytes) -> None:
        delay = self.broker.fault_for(state.entity).delay_s
        if delay > 0 and self.container is not None:
            self.container.schedule(
                delay, _Later(lambda: self._accept_send(state, delivery, payload))
            )
            return
        self._accept_send(state, delivery, payload)

    def _accept_send(self, state: LinkState, delivery: Any, payload: bytes) -> None:
        try:
            messages = parse_transfer(payload)
            limit = self.broker.send_target(state.entity).spec.max_batch_bytes
            if len(messages) > 1 and len(payload) > limit:
                raise BrokerError(
                    SIZE_EXCEEDED,
                    f"The batch (size {len(payload)} bytes) exceeds the limit ({limit} bytes).",
                )
            touched: set[str] = set()
            self.broker.send(state.entity, messages, touched)
        except BrokerError as exc:
            reject(delivery, exc.condition, exc.description)
        except MessageFormatError as exc:
            reject(delivery, "amqp:decode-error", str(exc))
        else:
            delivery.update(Delivery.ACCEPTED)
            for path in touched:
                self.wake(path)
        delivery.settle()

    def wake(self, entity: str) -> None:
        """Delivers what became available on ``entity`` to its receivers."""
        key = entity.lower()
        for link in list(self.out_links):
            if link.state_info.entity.lower() == key:
                self.pump(link)
        self.tick_when_due()

    def pump(self, link: Any) -> None:
        """Sends available messages while the link has credit."""
        state: LinkState = link.state_info
        if link.state & Endpoint.LOCAL_CLOSED or link.state & Endpoint.REMOTE_CLOSED:
            self.out_links.discard(link)
            return
        credit = link.credit
        if credit <= 0:
            return
        if self.broker.fault_for(state.entity).unavailable:
            self._close_link(
                link,
                BrokerError("com.microsoft:entity-disabled", f"'{state.entity}' is unavailable."),
            )
            self.out_links.discard(link)
            return
        try:
            messages = self.broker.receive(
                state.entity, credit, peek_lock=state.peek_lock, session_id=state.session_id
            )
        except BrokerError as exc:
            if exc.condition == "com.microsoft:server-busy":
                return
            self._close_link(link, exc)
            self.out_links.discard(link)
            return
        for msg in messages:
            token = msg.lock_token or uuid.uuid4()
            tag = token.bytes_le
            delivery = link.delivery(tag)
            link.send(render_message(msg, self.broker.entity(state.entity).path))
            link.advance()
            if state.peek_lock:
                state.unsettled[tag] = msg
                delivery.state_tag = tag
            else:
                delivery.settle()
        if link.drain_mode and link.credit > 0:
            link.drained()

    def _on_disposition(self, state: LinkState, delivery: Any) -> None:
        tag = getattr(delivery, "state_tag", None)
        msg = state.unsettled.pop(tag, None) if tag is not None else None
        remote = delivery.remote
        outcome = delivery.remote_state
        if tag is None or msg is None or msg.lock_token is None:
            lock_lost(delivery)
            return
        # the lock of this delivery (its tag), not the message's current one: after the
        # lock expired and the message went to another receiver, a settlement of the
        # stale delivery must fail with lock lost and change nothing
        token = uuid.UUID(bytes_le=bytes(tag))
        try:
            if outcome == Delivery.ACCEPTED:
                self.broker.settle(state.entity, token, "complete")
            elif outcome == Delivery.REJECTED:
                cond = remote.condition
                info = {str(k): v for k, v in (cond.info or {}).items()} if cond else {}
                reason = info.pop("DeadLetterReason", None)
                description = info.pop("DeadLetterErrorDescription", None)
                self.broker.settle(  # the rest of the error's info: propertiesToModify
                    state.entity,
                    token,
                    "dead-letter",
                    reason=text(reason),
                    description=text(description),
                    properties=info,
                )
            elif outcome == Delivery.MODIFIED:  # with the client's propertiesToModify
                kind = "defer" if remote.undeliverable else "abandon"
                self.broker.settle(state.entity, token, kind, properties=remote.annotations)
            elif outcome == Delivery.RELEASED:
                self.broker.settle(state.entity, token, "release")
            else:
                return
        except BrokerError as exc:
            reject(delivery, exc.condition, exc.description)
            delivery.settle()
            return
        # The service echoes the applied outcome; a rejected echo carries no error (an
        # error there would tell the SDK that the dead-lettering failed).
        if outcome == Delivery.MODIFIED:
            delivery.local.failed = remote.failed
            delivery.local.undeliverable = remote.undeliverable
        delivery.update(outcome)
        delivery.settle()
        self.wake(state.entity)

    # ------------------------------------------------------------ requests

    def _on_request(self, link: Any, state: LinkState, delivery: Any, payload: bytes) -> None:
        delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        request = parse_sections(split_sections(payload))
        request_id = request.message_id
        reply_to = request.prop(4)
        app = {str(k): v for k, v in request.get_application_properties().items()}
        reply: Any = Message()
        reply.correlation_id = request_id
        if state.kind == "cbs":
            token_type = text(app.get("type")) or "?"
            token = text(request_body(payload)) or ""
            with self.broker.lock:
                self.broker.auth_seen[f"amqp:{token_kind(token_type, token)}"] += 1
            try:
                grant = self.broker.keys.grant(token_type, token, text(app.get("name")) or "")
            except AuthError as exc:
                reply.properties = {
                    "status-code": amqp_int(401),
                    "status-description": exc.description,
                }
            else:
                conn = link.connection
                conn.grants = [*getattr(conn, "grants", []), grant]
                reply.properties = {"status-code": amqp_int(202), "status-description": "Accepted"}
        else:
            entity = state.entity[: -len(MANAGEMENT_SUFFIX)]
            operation = text(app.get("operation")) or ""
            right = _OPERATION_RIGHTS.get(operation.removeprefix("com.microsoft:"), LISTEN)
            refused = self._refusal(link, state.entity, right)
            if refused is not None:
                response: Response = (401, refused.description, None, refused.condition)
            else:
                response = handle_management(
                    self.broker, self.wake, entity, operation, request_body(payload)
                )
            status, description, body, condition = response
            props: dict[str, Any] = {
                "statusCode": amqp_int(status),
                "statusDescription": description,
            }
            if condition is not None:
                props["errorCondition"] = symbol(condition)
            reply.properties = props
            reply.body = body
        self._reply(link, state, reply, text(reply_to))

    def _reply(self, link: Any, state: LinkState, reply: Message, reply_to: str | None) -> None:
        conn = link.connection
        candidate = conn.link_head(Endpoint.LOCAL_ACTIVE)
        fallback = None
        while candidate is not None:
            info: LinkState | None = getattr(candidate, "state_info", None)
            if candidate.is_sender and info is not None and info.kind == state.kind:
                target = candidate.remote_target.address
                if reply_to and target == reply_to:
                    fallback = candidate
                    break
                if entity_from_address(candidate.remote_source.address) == state.entity:
                    fallback = fallback or candidate
            candidate = candidate.next(Endpoint.LOCAL_ACTIVE)
        if fallback is None:
            log.warning("no reply link for a %s request on %s", state.kind, state.entity)
            return
        delivery = fallback.delivery(uuid.uuid4().bytes)
        fallback.send(reply.encode())
        fallback.advance()
        delivery.settle()


#: The management operations that need another right than Listen.
_OPERATION_RIGHTS = {"schedule-message": SEND, "cancel-scheduled-message": SEND}


class _Later:
    """A timer task that runs a callback in the reactor thread."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def on_timer_task(self, event: Any) -> None:
        try:
            self.callback()
        except Exception:
            log.exception("a delayed reply failed")
