"""Message sections are split and re-rendered without touching the bare message."""

from __future__ import annotations

from datetime import timedelta

from azure.servicebus import ServiceBusMessage
from azure.servicebus._pyamqp._decode import decode_payload
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.message import BatchMessage
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport
from proton import Data, Described, ulong

from servicebus_emulator.codec import (
    APPLICATION_PROPERTIES,
    DATA,
    PROPERTIES,
    parse_message,
    render_message,
    replace_application_properties,
    split_batch,
    split_sections,
    with_message_id,
)
from servicebus_emulator.frames import parse_transfer
from servicebus_emulator.model import StoredMessage


def encoded(message: ServiceBusMessage) -> bytes:
    amqp = PyamqpTransport.to_outgoing_amqp_message(message._raw_amqp_message)
    return bytes(encode_payload(bytearray(), amqp))


def test_the_bare_message_is_kept_byte_for_byte_through_rendering() -> None:
    raw = encoded(
        ServiceBusMessage(
            b"\x00\xff", application_properties={"k": b"\x00", "n": 2}, session_id="s"
        )
    )
    parsed = parse_message(raw)
    stored = StoredMessage(
        seq=7, parsed=parsed, enqueued_ms=1, expires_ms=None, size=len(raw), session_id="s"
    )
    rendered = render_message(stored, "q")
    assert rendered.endswith(parsed.bare)
    assert raw.endswith(parsed.bare)
    back = decode_payload(memoryview(rendered))
    assert back.application_properties == {b"k": b"\x00", b"n": 2}
    assert back.message_annotations[b"x-opt-sequence-number"] == 7


def test_a_batch_is_split_into_its_messages_and_a_plain_message_is_not() -> None:
    inner = [encoded(ServiceBusMessage(str(i))) for i in range(3)]
    batch = bytes(encode_payload(bytearray(), BatchMessage(data=inner)))
    parts = split_batch(split_sections(batch))
    assert parts is not None
    assert [raw for raw, _ in parts] == inner
    assert split_batch(split_sections(inner[0])) is None
    assert [p.bare for p, _ in parse_transfer(batch)] == [parse_message(m).bare for m in inner]


def test_maps_with_binary_keys_decode() -> None:
    # Proton's own get_object cannot build such a map (memoryviews do not hash).
    footer = Data()
    footer.put_object(Described(ulong(0x78), {b"\x01": b"\x02", "s": [b"\x03"]}))
    raw = encoded(ServiceBusMessage("x")) + footer.encode()
    sections = split_sections(raw)
    assert sections[-1].code == 0x78
    assert sections[-1].value == {b"\x01": b"\x02", "s": [b"\x03"]}


def test_application_properties_can_be_replaced_in_place() -> None:
    raw = encoded(ServiceBusMessage(b"body", application_properties={"a": 1}))
    bare = parse_message(raw).bare
    replaced = replace_application_properties(bare, {"DeadLetterReason": "r", "a": 1})
    codes = [s.code for s in split_sections(replaced)]
    assert codes == [PROPERTIES, APPLICATION_PROPERTIES, DATA]
    assert parse_message(replaced).get_application_properties() == {"DeadLetterReason": "r", "a": 1}
    no_props = parse_message(encoded(ServiceBusMessage(b"body"))).bare
    added = replace_application_properties(no_props, {"x": "y"})
    assert [s.code for s in split_sections(added)] == [PROPERTIES, APPLICATION_PROPERTIES, DATA]


def test_a_stamped_message_id_leaves_every_other_field_and_section_as_it_was() -> None:
    import uuid

    from proton import Message, symbol, timestamp, uint

    correlation = uuid.uuid4()
    message = Message(
        body=b"\x00\x01",
        user_id=b"u",
        address="to",
        subject="s",
        reply_to="r",
        correlation_id=correlation,
        content_type=symbol("t/p"),
        expiry_time=timestamp(1_800_000_000_000),
        group_id="g",
        group_sequence=uint(7),
        reply_to_group_id="rg",
        properties={"k": 1},
    )
    parsed = parse_message(bytes(message.encode()))
    stamped = with_message_id(parsed, "abc")
    assert stamped.message_id == "abc"
    assert stamped.bare.endswith(parsed.bare[len(split_sections(parsed.bare)[0].raw) :])
    back = Message()
    back.decode(stamped.bare)
    assert back.id == "abc"
    fields = (
        "user_id",
        "address",
        "subject",
        "reply_to",
        "correlation_id",
        "content_type",
        "expiry_time",
        "group_id",
        "group_sequence",
        "reply_to_group_id",
    )
    assert [getattr(back, f) for f in fields] == [getattr(message, f) for f in fields]
    assert back.correlation_id == correlation
    assert (back.body, back.properties) == (b"\x00\x01", {"k": 1})


def test_a_delivery_renders_its_header_and_annotations_over_the_senders() -> None:
    # the sender's annotations are kept (encoded once per message), those a delivery sets
    # replace any the sender gave (a message forwarded from another entity carries them)
    message = ServiceBusMessage(b"x", partition_key="k", time_to_live=timedelta(seconds=90))
    message.raw_amqp_message.annotations = {
        "x-opt-partition-key": "k",
        "x-opt-sequence-number": 999,
        "custom": 5,
    }
    raw = encoded(message)
    parsed = parse_message(raw)
    for count, locked, source in ((0, None, None), (300, 2**40, "q/$DeadLetterQueue")):
        stored = StoredMessage(
            seq=2**33 + count,
            parsed=parsed,
            enqueued_ms=1_700_000_000_123,
            expires_ms=None,
            size=len(raw),
            session_id=None,
            delivery_count=count,
            locked_until_ms=locked,
            dead_letter_source=source,
        )
        back = decode_payload(memoryview(render_message(stored, "q")))
        header = back.header
        assert (header.durable, header.priority, header.ttl) == (False, 4, 90_000)
        assert (header.first_acquirer, header.delivery_count) == (count == 0, count)
        expected = {
            b"x-opt-partition-key": b"k",
            b"custom": 5,
            b"x-opt-sequence-number": stored.seq,
            b"x-opt-enqueue-sequence-number": stored.seq,
            b"x-opt-enqueued-time": 1_700_000_000_123,
            b"x-opt-message-state": 0,
        }
        if locked is not None:
            expected[b"x-opt-locked-until"] = locked
        if source is not None:
            expected[b"x-opt-deadletter-source"] = source.encode()
        assert back.message_annotations == expected
        assert render_message(stored, "q").endswith(parsed.bare)
