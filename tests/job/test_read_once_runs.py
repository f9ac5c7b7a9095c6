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

#: Three waves of six at least: a first, a middle and a last wave.
MESSAGES = 18


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
    assert len(planned) >= 3
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
    peeked, received = reads(pair)
    assert received == MESSAGES + MESSAGES // 2
    # the second run's gap check peeks each hole the first run's completions left
    # between the messages it receives (one message each: the one after the hole)
    assert 0 < peeked <= MESSAGES // 2
    assert second.operations.snapshot_messages_peeked == peeked


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


def test_locks_that_lapse_while_a_destination_stalls_lose_nothing_and_send_nothing_twice(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A destination stalls (1.5 s a send) while the run cannot renew its locks (the
    renewal is off for the whole first run, as when the namespace refuses it; 3 s locks
    here), and the first wave's settle starts only once every lock the run holds has
    lapsed. Its settlements fail and are recorded ``left``; the messages are the
    queue's again. The later waves of the run receive them again and hold them without
    taking them; the next run (renewing) reads them with their outcomes in the audit:
    what was sent is a duplicate, completed unsent. Every key arrives in order and once,
    and the backlog ends empty."""
    import threading
    from dataclasses import replace
    from datetime import timedelta

    from support.crash_scenario import locked
    from support.waiting import wait_until
    from syphon.job.run import runner
    from syphon.servicebus.renewal import Renewal

    for q in range(QUEUES):
        entity = pair.secondary.broker.entity(queue(q))
        pair.secondary.broker.update_queue(replace(entity.spec, lock_duration=timedelta(seconds=3)))
    stalled, first = threading.Event(), threading.Event()
    stalled.set()
    first.set()
    renew, settle = Renewal.renew_once, runner.settle

    def renew_unless_stalled(self: Renewal) -> None:
        if not stalled.is_set():
            renew(self)

    def settle_once_the_locks_lapsed(*args: Any, **kwargs: Any) -> Any:
        if first.is_set():
            first.clear()
            wait_until(lambda: locked(pair) == 0, timeout=30, what="the locks lapse")
            pair.primary.broker.clear_faults()
        return settle(*args, **kwargs)

    monkeypatch.setattr(Renewal, "renew_once", renew_unless_stalled)
    monkeypatch.setattr(runner, "settle", settle_once_the_locks_lapsed)
    keys = park_spread(pair, "l", 18)  # three waves: the third is read after the lapse
    config = once_config(pair, tmp_path, monkeypatch)
    pair.primary.broker.set_fault("orders", delay_s=1.5)  # a send takes 1.5 s to answer
    runs = [run_job(config, spark, "stalled")]
    stalled.clear()
    assert runs[0].status == Status.PARTIAL, runs[0]
    assert runs[0].outcomes.get("settle_left", 0) > 0, runs[0]  # the lapsed locks
    # every message the queues handed out is counted (those received again after their
    # lock lapsed too): the credit estimate is what the service charges
    _, received = reads(pair)
    assert received > 18  # some came back after their lock lapsed
    assert runs[0].operations.snapshot_messages_received == received
    # the partial line says that locks lapsed and why, and its fix fits that case
    assert "locks lapsed while the run kept them" in (runs[0].detail or ""), runs[0].detail
    assert "could not renew them in time" in (runs[0].detail or "")
    assert runs[0].fix is not None
    assert "lock duration" in runs[0].fix, runs[0].fix
    assert "destination" not in runs[0].fix, runs[0].fix
    while runs[-1].status != Status.DONE:
        assert len(runs) < 4, [(r.run_id, r.status, r.counts, r.outcomes, r.detail) for r in runs]
        runs.append(run_job(config, spark, f"after-{len(runs)}"))
    assert arrived(pair) == keys  # each key in order, no message sent twice
    assert not any(backlog_state(pair).values())
    settled = context(config, spark).store.run_rows("stalled", "settle")
    assert settled is not None
    failed = [r["detail"] for r in settled.where("outcome = 'left'").select("detail").collect()]
    assert failed
    assert set(failed) == {"lock_lost"}, failed
    # what was sent and read again was completed unsent, by the next run
    assert sum(r.counts.get("duplicate", 0) for r in runs[1:]) == len(failed)


def test_a_queue_whose_messages_another_receiver_holds_leaves_the_run_partial_naming_it(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another receiver holds a backlog queue's messages locked (as a killed run's locks
    hold until they lapse): a receive hands none of them out. The run sends the rest,
    and ends ``partial`` naming the queue as not read, instead of ``done`` while the queue
    still holds them; the next run, once the locks lapsed, takes them."""
    from support.crash_scenario import short_locks, wait_for_the_killed_runs_locks
    from support.paired_env import send_raw
    from support.quick_client import QuickClient
    from syphon.servicebus.backlog_messages import to_backlog_message

    short_locks(pair)
    # a receive that comes back empty waits once more, briefly (not 2 + 4 + 8 s)
    monkeypatch.setattr("syphon.job.read.once._SHORT_PAGE_WAITS", (0.3,))
    for q, ids in ((0, ["held-1", "held-2"]), (1, ["free-1", "free-2"])):
        messages = [ServiceBusMessage(m.encode(), message_id=m) for m in ids]
        send_raw(pair, q, [to_backlog_message(m, "orders") for m in messages])
    config = once_config(pair, tmp_path, monkeypatch)
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_receiver(queue(0)) as other:
            assert len(other.receive_messages(max_message_count=2, max_wait_time=5)) == 2
            first = run_job(config, spark, "short")
    assert first.status == Status.PARTIAL, first
    assert f"2 messages are locked by another receiver in {queue(0)} (2)" in (first.detail or "")
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == ["free-1", "free-2"]

    wait_for_the_killed_runs_locks(pair)
    second = run_job(config, spark, "after")
    assert second.status == Status.DONE, second
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == [
        "free-1",
        "free-2",
        "held-1",
        "held-2",
    ]
