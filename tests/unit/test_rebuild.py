"""The original message rebuilt from its backlog form, checked with python-qpid-proton's
codec (neither syphon's nor the SDK's): every section equal to the original's, types
and all, except the aliases restored and the TTL the replay sets."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any

import pytest
from proton import (
    Data,
    Message,
    symbol,
    timestamp,
    ulong,
)

from support.amqp_values import every_type
from syphon.core import amqp_bytes as ab
from syphon.core.rebuild import DEAD_LETTER_PROPERTIES, rebuild

SCHEDULED = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
FOOTER = ab.section(ab.FOOTER, ab.encode_map([(ab.encode_symbol("f"), b"\x54\x01")]))


def original(body: Any) -> Message:
    message = Message(
        id=ulong(5),
        correlation_id=uuid.UUID(int=7),
        subject="s",
        address="to-x",
        reply_to="r",
        content_type="application/json",
        content_encoding="gzip",
        reply_to_group_id="rs",
        group_id="session-1",
        group_sequence=3,
        creation_time=1_700_000_000.5,
        expiry_time=1_900_000_000.0,
        user_id=b"u",
        properties=every_type(),
        body=body,
        annotations={symbol("x-opt-partition-key"): "session-1", symbol("x-mine"): 1},
    )
    message.inferred = isinstance(body, (bytes, list))
    return message


def backlog_form(message: Message) -> bytes:
    """``message`` as a paired sender parks it and a peek returns it: session id, TTL and
    schedule in aliases, the service's annotations added, a header and delivery
    annotations of the service's."""
    parked = Message(
        id=message.id,
        correlation_id=message.correlation_id,
        subject=message.subject,
        address=message.address,
        reply_to=message.reply_to,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        reply_to_group_id=message.reply_to_group_id,
        group_sequence=message.group_sequence,
        creation_time=message.creation_time,
        expiry_time=message.expiry_time,
        user_id=message.user_id,
        body=message.body,
        durable=True,
        instructions={symbol("x-opt-lock-token"): uuid.UUID(int=1)},
        properties={
            **message.properties,
            "x-ms-path": "orders",
            "x-ms-sessionid": "session-1",
            "x-ms-timetolive": 36_000_000_000,
            "x-ms-scheduledenqueuetimeutc": timestamp(1_900_000_000_000),
        },
        annotations={
            **message.annotations,
            symbol("x-opt-sequence-number"): 12,
            symbol("x-opt-enqueued-time"): timestamp(1_800_000_000_000),
            symbol("x-opt-locked-until"): timestamp(1_800_000_060_000),
        },
    )
    parked.inferred = message.inferred
    return bytes(parked.encode()) + FOOTER


def canonical(section: ab.Section) -> bytes:
    data = Data()
    data.decode(section.raw)
    return bytes(data.encode())


def by_code(encoded: bytes) -> dict[int, ab.Section]:
    return {s.code: s for s in ab.sections(encoded)}


@pytest.mark.parametrize(
    "body",
    [b"\x00\x01binary", {"k": [1, 2.5], "t": timestamp(5)}, [[1, "a"], [ulong(2)]]],
    ids=["data", "value", "sequence"],
)
def test_every_section_comes_back_as_the_sender_wrote_it(body: Any) -> None:
    sent = original(body)
    parked = backlog_form(sent)
    rebuilt = by_code(
        rebuild(
            parked, session_id="session-1", time_to_live_ms=60_000, scheduled_enqueue_time=SCHEDULED
        )
    )
    want = by_code(bytes(sent.encode()) + FOOTER)
    for code in (ab.PROPERTIES, ab.APPLICATION_PROPERTIES, ab.FOOTER):
        assert canonical(rebuilt[code]) == canonical(want[code]), hex(code)
    body_codes = {ab.DATA, ab.AMQP_VALUE, ab.AMQP_SEQUENCE}
    assert [s.raw for c, s in rebuilt.items() if c in body_codes] == [
        s.raw for c, s in want.items() if c in body_codes
    ]
    assert ab.DELIVERY_ANNOTATIONS not in rebuilt
    annotations = {
        ab.decode(k): v for k, v in ab.map_entries(rebuilt[ab.MESSAGE_ANNOTATIONS].value)
    }
    assert {k: ab.decode(v) for k, v in annotations.items()} == {
        "x-opt-partition-key": "session-1",
        "x-mine": 1,
        "x-opt-scheduled-enqueue-time": SCHEDULED,
    }
    header = ab.compound_items(rebuilt[ab.HEADER].value)
    assert (ab.type_name(header[2]), ab.decode(header[2])) == ("uint", 60_000)
    assert ab.decode(header[0]) is None  # the backlog copy's own header is not kept


def test_without_ttl_schedule_or_session_nothing_is_added() -> None:
    sent = Message(id="m1", body=b"x", properties={"x-ms-path": "q"})
    sent.inferred = True
    rebuilt = by_code(
        rebuild(
            bytes(sent.encode()), session_id=None, time_to_live_ms=None, scheduled_enqueue_time=None
        )
    )
    assert set(rebuilt) == {ab.PROPERTIES, ab.DATA}  # no header, annotations or aliases left
    assert ab.decode(ab.compound_items(rebuilt[ab.PROPERTIES].value)[0]) == "m1"


def test_a_session_id_is_restored_where_the_message_had_no_properties() -> None:
    sent = Message(body=b"x", properties={"x-ms-path": "q", "k": 1})
    sent.inferred = True
    encoded = b"".join(s.raw for s in ab.sections(bytes(sent.encode())) if s.code != ab.PROPERTIES)
    rebuilt = by_code(
        rebuild(encoded, session_id="s", time_to_live_ms=None, scheduled_enqueue_time=None)
    )
    items = ab.compound_items(rebuilt[ab.PROPERTIES].value)
    assert (len(items), ab.decode(items[10])) == (11, "s")
    assert [ab.decode(k) for k, _ in ab.map_entries(rebuilt[ab.APPLICATION_PROPERTIES].value)] == [
        "k"
    ]


def codes(encoded: bytes) -> list[int]:
    return [s.code for s in ab.sections(encoded)]


@pytest.mark.parametrize(
    ("given", "sent"),
    [(2**40, 2**32 - 1), (2**32 - 1, 2**32 - 1), (2**32 - 2, 2**32 - 2), (1, 1), (0, 0), (-5, 0)],
)
def test_the_ttl_is_a_header_list_holding_at_most_the_longest_uint(given: int, sent: int) -> None:
    from syphon.core.rebuild import MAX_TTL_MS

    assert MAX_TTL_MS == 2**32 - 1  # what an AMQP uint of milliseconds holds
    sent_message = Message(id="m", body=b"x", properties={"x-ms-path": "q"})
    sent_message.inferred = True
    rebuilt = rebuild(
        bytes(sent_message.encode()),
        session_id=None,
        time_to_live_ms=given,
        scheduled_enqueue_time=None,
    )
    header = by_code(rebuilt)[ab.HEADER].value
    assert ab.type_name(header) == "list"
    items = ab.compound_items(header)
    assert (len(items), ab.type_name(items[2]), ab.decode(items[2])) == (3, "uint", sent)


def test_each_section_appears_once_and_a_parked_schedule_annotation_is_replaced() -> None:
    parked = Message(
        id="m",
        body=b"x",
        durable=True,
        properties={"x-ms-path": "q"},
        annotations={
            symbol("x-opt-scheduled-enqueue-time"): timestamp(1),
            symbol("x-opt-sequence-number"): 4,
        },
    )
    parked.inferred = True
    encoded = bytes(parked.encode())
    assert codes(encoded)[:3] == [ab.HEADER, ab.MESSAGE_ANNOTATIONS, ab.PROPERTIES]
    for session, scheduled in ((None, None), ("s", None), ("s", SCHEDULED), (None, SCHEDULED)):
        rebuilt = rebuild(
            encoded, session_id=session, time_to_live_ms=5, scheduled_enqueue_time=scheduled
        )
        assert sorted(codes(rebuilt)) == sorted(set(codes(rebuilt)))  # none twice
        annotations = by_code(rebuilt).get(ab.MESSAGE_ANNOTATIONS)
        names = [ab.decode(k) for k, _ in ab.map_entries(annotations.value)] if annotations else []
        assert names == ([] if scheduled is None else ["x-opt-scheduled-enqueue-time"])


def test_the_session_id_goes_at_the_group_id_of_a_short_properties_list() -> None:
    parked = Message(id="m", user_id=b"u", address="to-x", body=b"x", properties={"x-ms-path": "q"})
    parked.inferred = True
    properties = by_code(bytes(parked.encode()))[ab.PROPERTIES].value
    items = ab.compound_items(properties)
    short = ab.section(ab.PROPERTIES, ab.encode_compound(items[:3], is_map=False))
    encoded = short + b"".join(
        s.raw for s in ab.sections(bytes(parked.encode())) if s.code != ab.PROPERTIES
    )
    rebuilt = by_code(
        rebuild(encoded, session_id="s-1", time_to_live_ms=None, scheduled_enqueue_time=None)
    )
    got = ab.compound_items(rebuilt[ab.PROPERTIES].value)
    assert got[:3] == items[:3]
    assert got[3:10] == [b"\x40"] * 7
    assert (len(got), ab.decode(got[10])) == (11, "s-1")


def test_a_dead_lettered_message_loses_only_the_dead_letter_properties() -> None:
    # a re-driven message is live again: the service's reason and description go, every
    # other property stays with its bytes (an x-ms-path of the sender's own too)
    sent = Message(
        id="m1",
        body=b"x",
        group_id="s1",
        properties={
            "DeadLetterReason": "MaxDeliveryCountExceeded",
            "DeadLetterErrorDescription": "10",
            "x-ms-path": "kept",
            "tenant": "contoso",
            "n": ulong(7),
        },
    )
    sent.inferred = True
    encoded = bytes(sent.encode())
    rebuilt = by_code(
        rebuild(
            encoded,
            session_id="s1",
            time_to_live_ms=None,
            scheduled_enqueue_time=None,
            dropped=DEAD_LETTER_PROPERTIES,
        )
    )
    kept = {
        ab.decode(k): (ab.type_name(v), ab.decode(v))
        for k, v in ab.map_entries(rebuilt[ab.APPLICATION_PROPERTIES].value)
    }
    assert kept == {
        "x-ms-path": ("string", "kept"),
        "tenant": ("string", "contoso"),
        "n": ("ulong", 7),
    }
    assert rebuilt[ab.PROPERTIES].raw == by_code(encoded)[ab.PROPERTIES].raw


def test_a_repair_changes_what_it_names_and_nothing_else() -> None:
    message = original(b"\x00\x01binary")
    encoded = backlog_form(message)
    plain = by_code(
        rebuild(encoded, session_id="session-1", time_to_live_ms=None, scheduled_enqueue_time=None)
    )
    repaired = by_code(
        rebuild(
            encoded,
            session_id="session-1",
            time_to_live_ms=None,
            scheduled_enqueue_time=None,
            application={"retries": b"\x81" + (2).to_bytes(8, "big"), "int": None},
            system={"subject": ab.encode_string("fixed"), "reply_to": None},
        )
    )
    # every section but the two changed keeps its bytes
    changed = (ab.PROPERTIES, ab.APPLICATION_PROPERTIES)
    assert {c: s.raw for c, s in repaired.items() if c not in changed} == {
        c: s.raw for c, s in plain.items() if c not in changed
    }
    before = ab.compound_items(plain[ab.PROPERTIES].value)
    after = ab.compound_items(repaired[ab.PROPERTIES].value)
    assert ab.decode(after[3]) == "fixed"
    assert after[4] == b"\x40"
    assert [a for i, a in enumerate(after) if i not in (3, 4)] == [
        b for i, b in enumerate(before) if i not in (3, 4)
    ]
    old = dict(ab.map_entries(plain[ab.APPLICATION_PROPERTIES].value))
    new = dict(ab.map_entries(repaired[ab.APPLICATION_PROPERTIES].value))
    name = ab.encode_string
    assert name("int") in old
    assert name("int") not in new
    assert (ab.type_name(new[name("retries")]), ab.decode(new[name("retries")])) == ("long", 2)
    assert {k: v for k, v in new.items() if k != name("retries")} == {
        k: v for k, v in old.items() if k != name("int")
    }


def test_a_repair_adds_the_sections_a_bare_message_lacks() -> None:
    bare = Message(body=b"x")
    bare.inferred = True
    rebuilt = rebuild(
        bytes(bare.encode()),
        session_id=None,
        time_to_live_ms=None,
        scheduled_enqueue_time=None,
        application={"tenant": ab.encode_string("t1")},
        system={"content_type": ab.encode_symbol("application/json")},
    )
    back = Message()
    back.decode(rebuilt)
    assert (back.properties, back.content_type, back.body) == (
        {"tenant": "t1"},
        "application/json",
        b"x",
    )
