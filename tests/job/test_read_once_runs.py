"""Runs that read their source once (``run.read: once``) against the local Service Bus:
each wave received under lock beside the driver, held until its outcomes are in the
audit, settled by those locks. Nothing is peeked, each message is received once (the
secondary counts it), a key's messages spread over queues and waves arrive in order and
once, and what a wave leaves is held, not received again by the later waves; a
dead-letter re-drive with a repair is read once too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import (
    Pair,
    application_properties,
    backlog_state,
    command_config,
    context,
    dead_letter,
    dead_letters,
    job_config,
    redrive_sources,
    run_job,
    stored,
)
from support.waves import QUEUES, arrived, park_spread, queue
from syphon.core.schema import Status

pytestmark = pytest.mark.timeout(400)

#: Four waves of six at least.
MESSAGES = 24


def once_config(pair: Pair, tmp_path: Path, monkeypatch: Any, wave_messages: int = 6) -> Any:
    extra = f"run:\n  wave_messages: {wave_messages}\n  read: once\n"
    return job_config(pair, tmp_path, monkeypatch, extra=extra)


def reads(pair: Pair) -> tuple[int, int]:
    """(messages peeked, messages received) of the backlog queues, as the secondary
    counts them."""
    broker = pair.secondary.broker
    paths = [queue(q).lower() for q in range(QUEUES)]
    return (
        sum(broker.messages_peeked[p] for p in paths),
        sum(broker.messages_received[p] for p in paths),
    )


def test_a_backlog_read_once_in_waves_keeps_each_keys_order_and_reads_each_message_once(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = park_spread(pair, "o", MESSAGES)
    config = once_config(pair, tmp_path, monkeypatch)
    result = run_job(config, spark, "once")
    assert result.status == Status.DONE, result
    assert arrived(pair) == keys  # every key in order, every message once
    assert not any(backlog_state(pair).values())
    assert reads(pair) == (0, MESSAGES)  # no peek; each message received once
    ops = result.operations
    assert (ops.snapshot_messages_peeked, ops.snapshot_messages_received) == (0, MESSAGES)
    assert ops.settle_receives == 0
    # the credits: a receive and a send per message, and a settlement request per
    # queue and wave (a page each: at a wave of this size, half a credit a message)
    assert ops.credits_estimated == 2 * MESSAGES + (ops.settle_requests or 0)
    settled = context(config, spark).store.run_rows("once", "settle")
    assert settled is not None
    assert {r["outcome"]: r["count"] for r in settled.groupBy("outcome").count().collect()} == {
        "completed": MESSAGES
    }
    planned = [
        r
        for r in context(config, spark).store.runs()
        if r.run_id == "once" and r.status == Status.PLANNED
    ]
    assert len(planned) >= 4
    assert (ops.settle_requests or 0) <= len(planned) * QUEUES
    # completions went a page per request: fewer requests than messages
    disposed = [d for d in pair.secondary.broker.disposition_requests if d[1] == "completed"]
    assert sum(n for _, _, n in disposed) == MESSAGES
    assert len(disposed) < MESSAGES


def test_what_a_wave_leaves_is_held_not_read_again_and_the_next_run_finishes_in_order(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = park_spread(pair, "h", MESSAGES)
    config = once_config(pair, tmp_path, monkeypatch)
    pair.primary.broker.set_fault("orders", sends_left=0)  # probes answer, sends fail
    first = run_job(config, spark, "failing")
    assert first.status == Status.PARTIAL, first
    # the orders keys' messages were left by every wave and held: each message of the
    # backlog received once by the whole run, none given back between waves
    assert reads(pair) == (0, MESSAGES)
    assert first.outcomes["settle_completed"] == MESSAGES // 2
    sessions = arrived(pair)
    assert {k: v for k, v in sessions.items() if k.startswith("s")} == {
        k: v for k, v in keys.items() if k.startswith("s")
    }
    # the run gave back what it held when it ended: available, delivered once
    left = [
        m for q in range(QUEUES) for m in pair.secondary.broker.entity(queue(q)).messages.values()
    ]
    assert len(left) == MESSAGES // 2
    assert {(m.lock_token, m.delivery_count) for m in left} == {(None, 1)}

    pair.primary.broker.clear_faults()
    second = run_job(config, spark, "finishing")
    assert second.status == Status.DONE, second
    assert arrived(pair) == keys
    assert not any(backlog_state(pair).values())
    assert reads(pair) == (0, MESSAGES + MESSAGES // 2)


def test_a_dead_letter_redrive_is_read_once_with_a_repair(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead-letter queue is read in one wave, received once under lock: the selected
    messages sent repaired in their keys' order and completed by their locks, the one
    left out given back to the dead-letter queue when the run ends; nothing peeked."""
    from syphon.app.cli import main

    sent = [
        ServiceBusMessage(
            f"body of {mid}".encode(),
            message_id=mid,
            partition_key=key,
            application_properties={"tenant": tenant, "legacy": True},
        )
        for mid, key, tenant in (
            ("a-1", "k1", "contoso"),
            ("b-1", "k2", "contoso"),
            ("a-2", "k1", "contoso"),
            ("x-1", "k3", "fabrikam"),
            ("a-3", "k1", "contoso"),
        )
    ]
    dead_letter(pair, "orders", sent)
    extra = redrive_sources("orders") + "run:\n  read: once\n"
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=extra)
    repair = ["--where", "properties['tenant'] = 'contoso'", "--set", "tenant='CONTOSO'"]
    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "r", *repair]) == 0
    got = stored(pair, "orders")
    assert [str(m.message_id) for m in got if str(m.message_id).startswith("a")] == [
        "a-1",
        "a-2",
        "a-3",
    ]
    assert sorted(str(m.message_id) for m in got) == ["a-1", "a-2", "a-3", "b-1"]
    assert {application_properties(m)["tenant"] for m in got} == {("string", "CONTOSO")}
    assert dead_letters(pair, "orders") == ["x-1"]
    (left,) = pair.primary.broker.entity("orders").dlq.messages.values()
    assert (left.lock_token, left.delivery_count) == (None, 1)  # held, then given back
    broker = pair.primary.broker
    dlq = "orders/$deadletterqueue"
    # the discovery's one peek tells the queue is not empty; the read peeks nothing
    assert (broker.messages_peeked[dlq], broker.messages_received[dlq]) == (1, len(sent))
