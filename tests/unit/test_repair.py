"""Repair on re-drive, what the operator types: parsed and checked before anything is
read, and each value encoded as the AMQP type it is set with."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from syphon.core import amqp_bytes as ab
from syphon.core.repair import (
    Change,
    Repair,
    RepairError,
    amqp_type,
    parse_set,
    parse_unset,
)
from syphon.core.repaired import (
    decode_changes,
    encode_value,
    repair_message,
    set_application_properties,
)


def test_a_set_names_a_property_an_optional_type_and_an_expression() -> None:
    assert parse_set("retries:long=0") == Change("retries", False, "0", "long")
    assert parse_set("tenant = upper(properties['tenant'])") == Change(
        "tenant", False, "upper(properties['tenant'])", None
    )
    # an expression may hold '=' and ':' of its own
    assert parse_set("ok=a = b").expression == "a = b"
    assert parse_set("Subject=concat('x', ':', 'y')") == Change(
        "subject", True, "concat('x', ':', 'y')", None
    )
    assert parse_set("time_to_live=3600").system
    assert parse_unset("Tenant") == Change("Tenant", False)
    assert parse_unset("content-type") == Change("content_type", True)
    assert parse_unset("ContentType") == Change("content_type", True)  # the .NET spelling


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("SessionId='x'", "session id decides the order"),
        ("session_id='x'", "session id decides the order"),
        ("MessageId=uuid()", "MessageId decides duplicate detection"),
        ("partition-key='k'", "partition key decides the order"),
        ("noequals", "NAME=SQL"),
        ("n=   ", "empty"),
        ("n:int64=1", "not an AMQP type"),
        ("conn='Endpoint=sb://x/;SharedAccessKeyName=a;SharedAccessKey=b'", "secret"),
    ],
)
def test_a_set_that_cannot_be_is_refused_with_what_is_wrong(option: str, said: str) -> None:
    with pytest.raises(RepairError, match=said) as refused:
        parse_set(option)
    assert refused.value.exit_code == 2
    assert refused.value.fix  # every refusal names the fix


@pytest.mark.parametrize(
    "name",
    [
        "sessionid",
        "SESSIONID",
        "Session-Id",
        "session id",
        "partitionkey",
        "PARTITION_KEY",
        "partition-key",
        "messageid",
        "MESSAGE_ID",
        "Message Id",
        "message-ID",
    ],
)
def test_the_session_id_partition_key_and_message_id_are_refused_in_any_spelling(
    name: str,
) -> None:
    for change in (lambda: parse_set(f"{name}='x'"), lambda: parse_unset(name)):
        with pytest.raises(RepairError, match="not changeable") as refused:
            change()
        assert refused.value.exit_code == 2
        assert refused.value.fix is not None
        assert "send it yourself" in refused.value.fix


def test_a_name_that_only_resembles_a_refused_one_is_an_application_property() -> None:
    assert parse_set("session_ids='x'") == Change("session_ids", False, "'x'", None)
    assert parse_set("my-message-id='x'").system is False


def test_an_unset_of_the_message_id_is_refused_and_a_property_changed_twice_too() -> None:
    with pytest.raises(RepairError, match="MessageId"):
        parse_unset("message_id")
    with pytest.raises(RepairError, match="twice"):
        Repair.from_options(["a=1"], ["a"])
    assert Repair.from_options([], []) is None
    repair = Repair.from_options(["a:int=1", "subject='s'"], ["b"])
    assert repair is not None
    assert repair.names() == ("a", "subject", "b")
    assert repair.describe() == ["set a:int=1", "set subject='s'", "unset b"]


@pytest.mark.parametrize(
    ("value", "kind", "name", "decoded"),
    [
        (0, "long", "long", 0),
        (-5, "int", "int", -5),
        (255, "ubyte", "ubyte", 255),
        (7, "short", "short", 7),
        (True, "boolean", "boolean", True),
        ("é", "string", "string", "é"),
        (1.5, "double", "double", 1.5),
        (b"\x00\x01", "binary", "binary", b"\x00\x01"),
    ],
)
def test_a_value_is_encoded_as_its_type(
    value: object, kind: str, name: str, decoded: object
) -> None:
    encoded = encode_value(value, kind)
    assert ab.type_name(encoded) == name
    assert ab.decode(encoded) == decoded


def test_times_and_uuids_keep_their_types() -> None:
    at = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
    assert ab.type_name(encode_value(at, "timestamp")) == "timestamp"
    assert ab.decode(encode_value(at, "timestamp")) == at
    u = uuid.uuid4()
    assert ab.type_name(encode_value(str(u), "uuid")) == "uuid"
    assert encode_value(None, "long") == b"\x40"


@pytest.mark.parametrize(
    ("value", "kind", "why"),
    [
        ("12", "long", "not a whole number"),
        (2**31, "int", "outside int's range"),
        (-1, "uint", "outside uint's range"),
        (True, "long", "not a whole number"),
        (3, "string", "not a string"),
        ("x", "uuid", "not a uuid"),
        (1e39, "float", "outside float's range"),
    ],
)
def test_a_value_its_type_cannot_hold_says_why(value: object, kind: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        encode_value(value, kind)


def test_without_a_type_a_value_takes_its_expressions_and_an_ambiguous_one_is_refused() -> None:
    plain = parse_set("n=1")
    assert [amqp_type(plain, t) for t in ("int", "bigint", "string", "timestamp")] == [
        "int",
        "long",
        "string",
        "timestamp",
    ]
    assert amqp_type(parse_set("n:long=1"), "int") == "long"  # the type named wins
    with pytest.raises(RepairError, match=r"decimal\(10,2\)") as refused:
        amqp_type(plain, "decimal(10,2)")
    assert refused.value.fix is not None
    assert "n:TYPE" in refused.value.fix


def test_the_application_properties_change_only_where_told() -> None:
    original = ab.encode_map(
        [
            (ab.encode_string("keep"), b"\x71" + (7).to_bytes(4, "big")),  # an int stays an int
            (ab.encode_string("fix"), ab.encode_string("wrong")),
            (ab.encode_string("drop"), ab.encode_string("x")),
        ]
    )
    changed = set_application_properties(
        original, {"fix": encode_value(3, "long"), "drop": None, "new": ab.encode_string("n")}
    )
    entries = [(ab.decode(k), ab.type_name(v), ab.decode(v)) for k, v in ab.map_entries(changed)]
    assert entries == [("keep", "int", 7), ("fix", "long", 3), ("new", "string", "n")]
    # nothing asked, nothing changed, byte for byte
    assert set_application_properties(original, {}) == original
    assert ab.map_entries(set_application_properties(None, {"a": b"\x41"})) == [
        (ab.encode_string("a"), b"\x41")
    ]


def test_a_system_property_takes_the_type_the_service_gives_it() -> None:
    assert amqp_type(parse_set("subject=upper(subject)"), "string") == "string"
    assert amqp_type(parse_set("content-type='application/json'"), "string") == "symbol"
    assert amqp_type(parse_set("TimeToLive=INTERVAL 2 HOURS"), "interval hour") == ("milliseconds")
    assert amqp_type(parse_set("time_to_live=3600"), "int") == "milliseconds"
    with pytest.raises(RepairError, match="subject takes a string"):
        amqp_type(parse_set("subject=1"), "int")
    with pytest.raises(RepairError, match="system property"):
        parse_set("subject:long=1")
    assert ab.type_name(encode_value("a/b", "symbol")) == "symbol"
    assert ab.decode(encode_value(3600, "milliseconds")) == 3_600_000
    with pytest.raises(ValueError, match="time to live"):
        encode_value(0, "milliseconds")


def test_a_repair_changes_only_what_each_message_needs_and_says_so_by_name() -> None:
    repair = Repair.from_options(["retries:long=x", "subject=y"], ["Legacy"])
    assert repair is not None
    changes = repair.resolved({"retries": "long", "subject": "string"}).changes
    done = repair_message(changes, (3, None, True))  # subject null: left as it is
    assert done.error is None
    assert done.names == ["set retries", "unset Legacy"]
    assert decode_changes(done.application) == {"retries": encode_value(3, "long"), "Legacy": None}
    assert done.system is None
    assert done.added > len(encode_value(3, "long"))
    untouched = repair_message(changes, (None, None, False))  # nothing to change
    assert untouched.names == []
    assert untouched.application is None
    assert untouched.added == 0
    bad = repair_message(changes, ("abc", "s", True))
    assert bad.error == "--set retries: a str is not a whole number for long"
    assert "abc" not in bad.error  # a reason never carries the value


def test_the_ledger_s_words_give_the_same_repair_back() -> None:
    repair = Repair.from_options(["retries:long=0", "subject=upper(subject)"], ["Legacy"])
    assert repair is not None
    assert Repair.from_described(repair.describe()) == repair
    assert Repair.from_described(None) is None
