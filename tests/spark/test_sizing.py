"""The batch-size bound (:mod:`syphon.core.sizing`) against the exact size of the message
the replay sends: the rebuild of generated backlog messages of every shape (encoded by
python-qpid-proton), counted as the SDK counts a batch's message."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any

from proton import Described, Message, symbol, timestamp, uint, ulong

from support.amqp_values import TIMESPAN, every_type
from support.python_rules import message_bytes_bound
from support.snapshot_rows import T0, snapshot_row
from syphon.core import amqp_bytes as ab
from syphon.core.rebuild import MAX_TTL_MS, rebuild
from syphon.core.render import spark_schema
from syphon.core.schema import SNAPSHOT
from syphon.job.plan.classify import message_bytes_col
from syphon.job.restore import restore
from syphon.servicebus.raw_batch import encoded_batch_cost


def text(rng: random.Random, longest: int) -> str:
    # lengths around the 1-byte/4-byte length boundary (255) and multi-byte characters
    n = rng.choice([0, 1, rng.randrange(longest + 1), min(longest, 255), min(longest, 256)])
    alphabet = "abcXYZ09-é中😀"
    return "".join(rng.choice(alphabet) for _ in range(n))


def prop_value(rng: random.Random) -> Any:
    """A value of one of the AMQP types an application property may hold."""
    return rng.choice(
        [
            *every_type().values(),
            uint(rng.getrandbits(32)),
            uuid.UUID(int=rng.getrandbits(128)),
            text(rng, 300).encode(),
            text(rng, 400),
            Described(TIMESPAN, rng.getrandbits(40)),
        ]
    )


def backlog_message(rng: random.Random) -> bytes:
    """A backlog message as a peek may return it: any system properties, the aliases
    (the TTL as a long or a described TimeSpan), properties of every type, the
    service's annotations, any body kind, sometimes a footer."""
    props: dict[str, Any] = {"x-ms-path": "orders"}
    if rng.random() < 0.4:
        props["x-ms-sessionid"] = text(rng, 128) or "s"
    if rng.random() < 0.5:
        ticks = rng.randrange(1, 10**13)
        props["x-ms-timetolive"] = Described(TIMESPAN, ticks) if rng.random() < 0.3 else ticks
    if rng.random() < 0.3:
        props["x-ms-scheduledenqueuetimeutc"] = timestamp(1_900_000_000_000)
    props.update({f"p{i}-{text(rng, 40)}": prop_value(rng) for i in range(rng.randrange(8))})
    kind = rng.choice(["data", "data", "value", "sequence"])
    size = rng.choice([0, 1, 200, 300, 70_000])
    body: Any = bytes(size) if kind == "data" else "v" * size if kind == "value" else [1, "x"]

    def maybe(value: Any) -> Any:
        return value if rng.random() < 0.5 else None

    message = Message(
        id=maybe(rng.choice([text(rng, 128) or "m", ulong(9), uuid.UUID(int=3), b"id"])),
        correlation_id=maybe(text(rng, 300)),
        subject=maybe(text(rng, 300)),
        address=maybe(text(rng, 300)),
        reply_to=maybe(text(rng, 300)),
        content_type=maybe("application/json"),
        reply_to_group_id=maybe(text(rng, 128)),
        creation_time=rng.choice([0, 1_700_000_000.5]),
        expiry_time=rng.choice([0, 1_900_000_000.0]),
        properties=props,
        body=body,
        durable=True,
        annotations={
            symbol("x-opt-sequence-number"): 12,
            symbol("x-opt-enqueued-time"): timestamp(1_800_000_000_000),
            **({symbol("x-opt-partition-key"): "k"} if rng.random() < 0.3 else {}),
        },
    )
    message.inferred = kind != "value"
    encoded = bytes(message.encode())
    if rng.random() < 0.2:
        encoded += ab.section(ab.FOOTER, ab.encode_map([(ab.encode_symbol("f"), b"\x40")]))
    return encoded


def test_the_bound_is_never_below_the_replayed_size_and_stays_close(spark: Any) -> None:
    rng = random.Random(20261124)
    rows = [snapshot_row(backlog_message(rng), i) for i in range(1, 301)]
    restored = restore(spark.createDataFrame(rows, spark_schema(SNAPSHOT)))
    out = restored.withColumn("bound", message_bytes_col()).collect()
    assert [r["envelope_reason"] for r in out] == [None] * len(rows)
    slack = []
    for r in out:
        sid, ticks = r["original_session_id"], r["original_time_to_live_ticks"]
        scheduled = r["original_scheduled_enqueue_time"]
        replayed = rebuild(
            bytes(r["encoded"]),
            session_id=sid,
            time_to_live_ms=None if ticks is None else MAX_TTL_MS,
            scheduled_enqueue_time=scheduled,
        )
        exact = encoded_batch_cost(len(replayed))
        assert r["bound"] == message_bytes_bound(
            len(r["encoded"]), sid, ticks is not None, scheduled is not None
        )
        assert r["bound"] >= exact, r["sequence_number"]
        slack.append(r["bound"] - exact - alias_bytes(bytes(r["encoded"])))
    # the bound packs almost as tightly as the exact size: beside the aliases, the
    # service's annotations and header (which the replay drops) are most of the rest
    assert max(slack) <= 120, max(slack)
    assert sorted(slack)[len(slack) // 2] <= 100, sorted(slack)[len(slack) // 2]


def alias_bytes(encoded: bytes) -> int:
    """The bytes of the aliases' map entries (the rebuild drops them)."""
    app = next(s for s in ab.sections(encoded) if s.code == ab.APPLICATION_PROPERTIES)
    return sum(
        len(k) + len(v) for k, v in ab.map_entries(app.value) if ab.decode(k).startswith("x-ms-")
    )


def test_every_addition_of_the_rebuild_is_at_its_widest_in_the_bound(spark: Any) -> None:
    # a message with no properties section, an empty annotations map and a long session
    # id: the rebuild adds a header, a map section and a properties section
    sid = "中" * 128
    aliases = {
        "x-ms-path": "q",
        "x-ms-sessionid": sid,
        "x-ms-timetolive": 10**7,
        "x-ms-scheduledenqueuetimeutc": timestamp(1),
    }
    message = Message(body=b"x", properties=aliases)
    message.inferred = True
    encoded = b"".join(
        s.raw for s in ab.sections(bytes(message.encode())) if s.code != ab.PROPERTIES
    )
    replayed = rebuild(
        encoded,
        session_id=sid,
        time_to_live_ms=MAX_TTL_MS,
        scheduled_enqueue_time=T0 + timedelta(days=1),
    )
    bound = message_bytes_bound(len(encoded), sid, True, True)
    # over by the aliases the rebuild drops, the emptied sections' descriptors and headers
    # (the backlog copy's header 4, the application properties' 12) and a few bytes more
    assert 0 <= bound - encoded_batch_cost(len(replayed)) - alias_bytes(encoded) <= 16 + 16
    restored = restore(spark.createDataFrame([snapshot_row(encoded, 1)], spark_schema(SNAPSHOT)))
    assert restored.select(message_bytes_col()).first()[0] == bound
