"""Settlement on the wire, through python-qpid-proton's own client (not the Service Bus
SDK's encoder and decoder): what the local Service Bus answers to each delivery's
disposition, as any AMQP client would see it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from proton import UNDESCRIBED, Array, Condition, Data, Delivery, Message, symbol
from proton.utils import BlockingConnection

from servicebus_emulator import Emulator, ManualClock, QueueSpec
from servicebus_emulator.model import DEFERRED
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.sas import put_token

LOCK_LOST = "com.microsoft:message-lock-lost"


@pytest.fixture
def sb(servicebus_emulator: EmulatorFactory) -> Emulator:
    return servicebus_emulator(
        QueueSpec("q", lock_duration=timedelta(seconds=2)), clock=ManualClock()
    )


@pytest.fixture
def connection(sb: Emulator) -> Iterator[BlockingConnection]:
    conn = BlockingConnection(f"amqp://127.0.0.1:{sb.port}", allowed_mechs="ANONYMOUS")
    assert put_token(conn, sb, "q") == (202, "Accepted")
    yield conn
    conn.close()


def receive_one(conn: BlockingConnection, name: str, sb: Emulator | None = None) -> tuple[Any, Any]:
    """A peek-lock receiver (unsettled deliveries) named ``name`` and its first delivery;
    with ``sb``, once the receiver is attached, the clock moves past the lock the
    previous delivery holds, so the message comes to this one."""
    receiver = conn.create_receiver("q", credit=1, name=name)
    if sb is not None:
        sb.advance(2.1)
    receiver.receive(timeout=10)
    return receiver, receiver.fetcher.unsettled[0]


def management(conn: BlockingConnection, operation: str, body: dict[str, Any]) -> Any:
    """One request on the queue's ``$management`` link; the reply message."""
    sender = conn.create_sender("q/$management", name=f"mgmt-tx-{operation}")
    receiver = conn.create_receiver("q/$management", credit=1, name=f"mgmt-rx-{operation}")
    sender.send(
        Message(
            id="req",
            reply_to=f"mgmt-rx-{operation}",
            body=body,
            properties={"operation": operation},
        )
    )
    reply = receiver.receive(timeout=10)  # sent settled: nothing to accept
    sender.close()
    receiver.close()
    return reply


def update_disposition(conn: BlockingConnection, status: str, token: Any, **more: Any) -> Any:
    """``com.microsoft:update-disposition`` of one lock token; the reply message."""
    body = {"disposition-status": status, "lock-tokens": Array(UNDESCRIBED, Data.UUID, token)}
    return management(conn, "com.microsoft:update-disposition", {**body, **more})


def settle(conn: BlockingConnection, delivery: Any, outcome: int) -> tuple[int, Any]:
    """Sends ``outcome`` for ``delivery`` unsettled and waits for the server's answer."""
    delivery.update(outcome)
    conn.wait(lambda: delivery.remote_state != 0, timeout=10)
    condition = delivery.remote.condition
    return delivery.remote_state, condition.name if condition is not None else None


def test_a_stale_delivery_cannot_settle_the_redelivered_message(
    sb: Emulator, connection: BlockingConnection
) -> None:
    connection.create_sender("q", name="send").send(Message(body="a", id="m1"))
    _, stale = receive_one(connection, "old")
    _, fresh = receive_one(connection, "new", sb)  # after the first lock expired
    stored = sb.broker.entity("q")
    (msg,) = stored.messages.values()
    held = (msg.lock_token, msg.delivery_count)

    for outcome in (Delivery.ACCEPTED, Delivery.RELEASED):
        assert settle(connection, stale, outcome) == (Delivery.REJECTED, LOCK_LOST)
    # neither removed nor given back by the stale delivery: still the new holder's
    assert list(stored.messages.values()) == [msg]
    assert (msg.lock_token, msg.delivery_count) == held

    assert settle(connection, fresh, Delivery.ACCEPTED) == (Delivery.ACCEPTED, None)
    assert stored.messages == {}


def test_a_stale_lock_token_cannot_settle_through_management(
    sb: Emulator, connection: BlockingConnection
) -> None:
    connection.create_sender("q", name="send").send(Message(body="a", id="m1"))
    receive_one(connection, "old")
    (msg,) = sb.broker.entity("q").messages.values()
    stale = msg.lock_token
    receive_one(connection, "new", sb)
    held = (msg.lock_token, msg.delivery_count)
    assert held[0] != stale

    refused = update_disposition(connection, "completed", stale)
    assert refused.properties["errorCondition"] == LOCK_LOST
    assert list(sb.broker.entity("q").messages.values()) == [msg]
    assert (msg.lock_token, msg.delivery_count) == held
    assert update_disposition(connection, "completed", held[0]).properties["statusCode"] == 200
    assert sb.broker.entity("q").messages == {}


def test_closing_a_link_with_a_stale_delivery_leaves_the_new_lock(
    sb: Emulator, connection: BlockingConnection
) -> None:
    connection.create_sender("q", name="send").send(Message(body="a", id="m1"))
    old, _ = receive_one(connection, "old")
    _, fresh = receive_one(connection, "new", sb)
    (msg,) = sb.broker.entity("q").messages.values()
    held = (msg.lock_token, msg.delivery_count)
    old.close()  # its unsettled delivery is stale: the message is not put back
    assert (msg.lock_token, msg.delivery_count) == held
    assert settle(connection, fresh, Delivery.ACCEPTED) == (Delivery.ACCEPTED, None)


def test_a_released_delivery_is_given_back_without_counting_a_delivery(
    sb: Emulator, connection: BlockingConnection
) -> None:
    """Released (the client never handed the message to its application, e.g. it arrived
    after a receive call ended) gives the message back without counting a delivery, as
    the service does; an abandon (modified) counts one
    (test_queues.py::test_abandon_redelivers_with_a_higher_delivery_count)."""
    connection.create_sender("q", name="send").send(Message(body="a", id="m1"))
    _, first = receive_one(connection, "first")
    (msg,) = sb.broker.entity("q").messages.values()
    held = msg.lock_token
    assert settle(connection, first, Delivery.RELEASED) == (Delivery.RELEASED, None)
    assert msg.lock_token != held  # given back (and perhaps delivered again since)
    assert msg.delivery_count == 0


def test_a_message_sent_without_a_message_id_is_given_one(
    sb: Emulator, connection: BlockingConnection
) -> None:
    """The service stamps a MessageId on every message that has none (clients settle and
    renew by it); the rest of the message stays as sent."""
    sender = connection.create_sender("q", name="send")
    sender.send(Message(body="a", subject="s", content_type="text/plain", properties={"k": 1}))
    sender.send(Message(body="b"))  # no properties section at all
    sender.send(Message(body="c", id="mine"))
    receiver = connection.create_receiver("q", credit=3, name="get")
    got = [receiver.receive(timeout=10) for _ in range(3)]
    receiver.accept()
    ids = [m.id for m in got]
    assert ids[2] == "mine"
    assert all(isinstance(i, str) and len(i) == 32 for i in ids[:2]), ids
    assert ids[0] != ids[1]
    assert [m.body for m in got] == ["a", "b", "c"]
    assert (got[0].subject, got[0].content_type, got[0].properties) == ("s", "text/plain", {"k": 1})


def test_an_abandon_or_defer_applies_the_properties_to_modify(
    sb: Emulator, connection: BlockingConnection
) -> None:
    """A ``modified`` outcome carries the client's propertiesToModify in its message
    annotations; the message keeps them (abandon: available again; defer: deferred)."""
    connection.create_sender("q", name="send").send(
        Message(body="a", id="m1", properties={"k": "v1", "kept": 1})
    )
    receiver, delivery = receive_one(connection, "get")
    delivery.local.annotations = {symbol("k"): "v2", symbol("added"): 7}
    assert settle(connection, delivery, Delivery.MODIFIED) == (Delivery.MODIFIED, None)
    again = receiver.receive(timeout=10)
    assert again.properties == {"k": "v2", "kept": 1, "added": 7}

    # the same through $management: defer with properties-to-modify
    (msg,) = sb.broker.entity("q").messages.values()
    reply = update_disposition(
        connection, "defered", msg.lock_token, **{"properties-to-modify": {"k": "v3"}}
    )
    assert reply.properties["statusCode"] == 200
    assert msg.state == DEFERRED
    props = {str(k): v for k, v in msg.parsed.get_application_properties().items()}
    assert props == {"k": "v3", "kept": 1, "added": 7}


def test_a_dead_letter_applies_the_properties_to_modify_in_its_error_info(
    sb: Emulator, connection: BlockingConnection
) -> None:
    """A ``rejected`` outcome carries the reason and description and, beside them, the
    client's propertiesToModify (as the .NET SDK sends a dead-letter with properties)."""
    connection.create_sender("q", name="send").send(
        Message(body="a", id="m1", properties={"k": "v1", "kept": 1})
    )
    _, delivery = receive_one(connection, "get")
    info = {
        symbol("DeadLetterReason"): "bad",
        symbol("DeadLetterErrorDescription"): "why",
        symbol("k"): "v2",
        symbol("added"): 7,
    }
    delivery.local.condition = Condition("com.microsoft:dead-letter", None, info)
    assert settle(connection, delivery, Delivery.REJECTED)[0] == Delivery.REJECTED
    dead = connection.create_receiver("q/$DeadLetterQueue", credit=1, name="dlq")
    got = dead.receive(timeout=10)
    dead.accept()
    assert got.properties == {
        "k": "v2",
        "kept": 1,
        "added": 7,
        "DeadLetterReason": "bad",
        "DeadLetterErrorDescription": "why",
    }


def _section(code: int, value: Any) -> bytes:
    """One described AMQP section (``code``: its descriptor) holding ``value``."""
    data = Data()
    data.put_described()
    data.enter()
    data.put_ulong(code)
    data.put_object(value)
    data.exit()
    return bytes(data.encode())


def send_raw(conn: BlockingConnection, payload: bytes, address: str = "q") -> int:
    """One transfer of exactly ``payload`` (proton does not let a client set the transfer's
    message format; the local Service Bus cannot read it either); its outcome."""
    link = conn.create_sender(address, name=f"raw-{uuid.uuid4()}").link
    conn.wait(lambda: link.credit > 0, timeout=10)
    delivery = link.delivery(link.delivery_tag())
    link.stream(payload)
    link.advance()
    conn.wait(lambda: delivery.remote_state != 0, timeout=10)
    return int(delivery.remote_state)


def test_a_batch_whose_envelope_carries_sections_keeps_every_inner_message(
    sb: Emulator, connection: BlockingConnection
) -> None:
    """A batch as another SDK sends it: its envelope copies the first inner message's
    properties, annotations and application properties, then one data section per inner
    message. Each inner message is stored on its own, with its own sections only."""
    inner = [
        Message(id="m1", body="a", properties={"k": "first"}, subject="s1"),
        Message(id="m2", body="b"),
        Message(id="m3", body="c", properties={"k": "third", "n": 3}),
    ]
    envelope = (
        _section(0x72, {symbol("x-opt-note"): "copied"})
        + _section(0x73, ["m1", None, None, None, "s1"])
        + _section(0x74, {"k": "first"})
        + b"".join(_section(0x75, bytes(m.encode())) for m in inner)
    )
    assert send_raw(connection, envelope) == Delivery.ACCEPTED
    assert len(sb.broker.entity("q").messages) == 3

    receiver = connection.create_receiver("q", credit=3, name="get")
    got = [receiver.receive(timeout=10) for _ in range(3)]
    receiver.accept()
    assert [(m.id, m.body, m.subject) for m in got] == [
        ("m1", "a", "s1"),
        ("m2", "b", None),
        ("m3", "c", None),
    ]
    assert [m.properties for m in got] == [{"k": "first"}, None, {"k": "third", "n": 3}]


def test_a_batch_over_1_mb_is_refused_even_where_large_messages_are_taken(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("huge", max_message_size_in_kilobytes=4096))
    conn = BlockingConnection(f"amqp://127.0.0.1:{sb.port}", allowed_mechs="ANONYMOUS")
    try:
        assert put_token(conn, sb, "huge")[0] == 202
        inner = [bytes(Message(id=f"m{i}", body=b"y" * (600 * 1024)).encode()) for i in range(2)]
        batch = b"".join(_section(0x75, m) for m in inner)
        assert send_raw(conn, batch, "huge") == Delivery.REJECTED
        assert sb.broker.entity("huge").messages == {}
        assert send_raw(conn, inner[0], "huge") == Delivery.ACCEPTED  # one message: taken
    finally:
        conn.close()
