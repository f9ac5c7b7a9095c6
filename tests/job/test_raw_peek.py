"""The one reach below the SDK's public surface (``syphon.servicebus.raw``) against the
pinned SDK and the local Service Bus: a raw peek answers what ``peek_messages`` answers,
each message with the exact bytes the service holds. Fails if an SDK upgrade renames or
changes what it relies on."""

from __future__ import annotations

import pytest
from proton import Message, char, decimal32, decimal64, symbol, ulong
from proton.utils import BlockingConnection

from servicebus_emulator import Emulator, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient
from support.sas import put_token
from syphon.core import amqp_bytes as ab
from syphon.core.peeked import read_encoded, sequence_number
from syphon.servicebus.peek import peek_receiver
from syphon.servicebus.raw import peek_raw


def park_typed(sb: Emulator, queue: str, count: int) -> None:
    """``count`` messages whose properties have types the SDK's decoder does not keep."""
    conn = BlockingConnection(f"amqp://127.0.0.1:{sb.port}", allowed_mechs="ANONYMOUS")
    try:
        assert put_token(conn, sb, queue)[0] == 202
        sender = conn.create_sender(queue)
        for i in range(count):
            message = Message(
                id=ulong(i + 1),
                body=f"b{i}".encode(),
                properties={"n": 7 + i, "s": symbol("sym")},
                annotations={symbol("x-note"): "kept"},
            )
            message.inferred = True
            sender.send(message)
    finally:
        conn.close()


def test_a_raw_peek_answers_what_peek_messages_does_with_the_stored_bytes(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    park_typed(sb, "q", 5)
    stored = {m.seq: m.parsed.bare for m in sb.broker.entity("q").messages.values()}

    with QuickClient.from_connection_string(sb.connection_string) as client:
        with peek_receiver(client, "q") as receiver:
            encoded = peek_raw(receiver, 2, 3)
            public = receiver.peek_messages(3, sequence_number=2)
            assert peek_raw(receiver, 99, 3) == []
    numbers = [sequence_number(e) for e in encoded]
    assert numbers == [m.sequence_number for m in public] == [2, 3, 4]
    for raw, message in zip(encoded, public, strict=True):
        assert raw.endswith(stored[message.sequence_number])  # the bare message, exact
        parts = {s.code: s for s in ab.sections(raw)}
        props = {ab.decode(k): v for k, v in ab.map_entries(parts[ab.APPLICATION_PROPERTIES].value)}
        types = {k: ab.type_name(v) for k, v in props.items()}
        assert types == {"n": "long", "s": "symbol"}  # what the SDK's message has lost
        assert ab.type_name(ab.compound_items(parts[ab.PROPERTIES].value)[0]) == "ulong"
        assert message.application_properties[b"n"] == ab.decode(props["n"])


def test_a_message_the_sdk_cannot_decode_is_peeked_and_then_the_sdk_decodes_it(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pinned SDK's decoder has no char, decimal32 or decimal64: its own peek (and
    receive) fails on such a message. The raw peek reads it; ``complete_decoder`` makes
    the SDK's receivers take it too. Fails if an upgrade moves the decoder's table."""
    from azure.servicebus._pyamqp import _decode
    from azure.servicebus.exceptions import ServiceBusError

    from syphon.servicebus.raw import complete_decoder

    table = _decode._DECODE_BY_CONSTRUCTOR
    taught = {code: table[code] for code in (0x73, 0x74, 0x84)}
    monkeypatch.setattr(_decode, "_DECODE_BY_CONSTRUCTOR", list(table))  # restored after
    for code in taught:  # the SDK as shipped (another test may have taught it)
        _decode._DECODE_BY_CONSTRUCTOR[code] = None
    sb = servicebus_emulator(QueueSpec("q"))
    conn = BlockingConnection(f"amqp://127.0.0.1:{sb.port}", allowed_mechs="ANONYMOUS")
    try:
        assert put_token(conn, sb, "q")[0] == 202
        conn.create_sender("q").send(
            Message(body="v", properties={"d32": decimal32(7), "d64": decimal64(7), "c": char("é")})
        )
    finally:
        conn.close()
    with QuickClient.from_connection_string(sb.connection_string, retry_total=0) as client:
        with client.get_queue_receiver("q", prefetch_count=1, keep_alive=None) as receiver:
            (encoded,) = peek_raw(receiver, 1, 10)
            with pytest.raises(ServiceBusError):
                receiver.peek_messages(10, sequence_number=1)
            complete_decoder()
            (peeked,) = receiver.peek_messages(10, sequence_number=1)
    assert sequence_number(encoded) == peeked.sequence_number == 1
    typed = read_encoded(encoded)[0]
    types = [typed[k]["amqp_type"] for k in ("d32", "d64", "c")]
    assert types == ["decimal32", "decimal64", "char"]
    assert peeked.application_properties[b"c"] == "é"


def test_encoded_messages_added_to_a_batch_arrive_byte_for_byte(
    servicebus_emulator: EmulatorFactory,
) -> None:
    """``add_encoded`` puts messages on the wire as given: the service stores each bare
    message (properties to footer) exactly, a value body and a ulong id included."""
    from azure.servicebus.exceptions import MessageSizeExceededError

    from syphon.servicebus.raw_batch import add_encoded

    sb = servicebus_emulator(QueueSpec("q", enable_partitioning=True))
    value = Message(id=ulong(9), body={"k": [1, 2]}, properties={"n": 7})
    data = Message(id="m2", body=b"bytes", properties={"s": symbol("x")})
    data.inferred = True
    encoded = [bytes(value.encode()), bytes(data.encode())]
    with QuickClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender("q") as sender:
            batch = sender.create_message_batch()
            for message in encoded:
                add_encoded(batch, message, (None, None, "key-1"))
            assert len(batch) == 2
            # the envelope carries the first message's partition key, as the SDK's own
            annotations = {bytes(k): v for k, v in batch._message[2].items()}
            assert annotations == {b"x-opt-partition-key": "key-1"}
            sender.send_messages(batch)
            tiny = sender.create_message_batch(max_size_in_bytes=len(encoded[0]) + 10)
            with pytest.raises(MessageSizeExceededError):
                add_encoded(tiny, encoded[0] + encoded[1])
            assert len(tiny) == 0
    stored = sorted(sb.broker.entity("q").messages.values(), key=lambda m: m.seq)
    bare = [b"".join(s.raw for s in ab.sections(m) if s.code >= ab.PROPERTIES) for m in encoded]
    assert [m.parsed.bare for m in stored] == bare
