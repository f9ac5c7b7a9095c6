"""A wave's read against the local Service Bus (syphon.job.read.waves.read_wave): backlog
queues filled in turn, read wave after wave with a small limit. Each message is taken
by exactly one wave, every wave's messages were enqueued before the next wave's, a
queue gives a wave at most the limit (and one front more is read), and reading removes
or locks nothing."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import PRIMARY, Pair, backlog_state, context, job_config
from support.quick_client import QuickClient
from syphon.job.read.modes import Peeking, Receiving
from syphon.job.request import run_request
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.servicebus.discovery import DiscoveredQueue

pytestmark = pytest.mark.timeout(240)


def queue(i: int) -> str:
    return f"{PRIMARY}/x-servicebus-transfer/{i}"


def fill_in_turn(pair: Pair, queues: int, messages: int) -> list[str]:
    """Sends ``messages`` one at a time to the queues in turn (w-0 to queue 0, w-1 to
    queue 1, ...): a key's messages spread over every queue, in time order."""
    ids = [f"w-{i}" for i in range(messages)]
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        senders = [client.get_queue_sender(queue(q)) for q in range(queues)]
        try:
            for i, mid in enumerate(ids):
                message = ServiceBusMessage(mid.encode(), message_id=mid, session_id="k")
                senders[i % queues].send_messages(to_backlog_message(message, "orders"))
        finally:
            for s in senders:
                s.close()
    return ids


@pytest.mark.parametrize("read", ["peek", "once"])
def test_waves_take_each_message_once_and_in_time_order(
    pair: Pair, spark: Any, read: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Peeked, or received once under lock and kept locked (then nothing is peeked, each
    message is received once, and what is locked is invisible to the next wave's
    receives)."""
    ids = fill_in_turn(pair, queues=3, messages=31)
    paths = [queue(q) for q in range(3)]
    before = backlog_state(pair)
    ctx = context(job_config(pair, tmp_path, monkeypatch), spark)
    request = run_request(ctx)
    if read == "peek":
        waves, peeked = _read_all(Peeking(ctx, request), paths)
    else:
        queues = [DiscoveredQueue(PRIMARY, q, p, None, False) for q, p in enumerate(paths)]
        with Receiving(ctx, request, queues) as reading:
            waves, peeked = _read_all(reading, paths)
            assert reading.once.received == len(ids)
            locked = [m for p in paths for m in pair.secondary.broker.entity(p).messages.values()]
            assert all(m.lock_token is not None for m in locked)

    taken = [r["message_id"] for rows in waves for r in rows]
    assert sorted(taken) == sorted(ids)  # each message once
    assert len(waves) > 2
    for earlier, later in itertools.pairwise(waves):
        if earlier and later:
            assert max(r["enqueued_time"] for r in earlier) < min(r["enqueued_time"] for r in later)
    # a message sent before another is never taken by a later wave
    wave_of = {r["message_id"]: k for k, rows in enumerate(waves) for r in rows}
    assert [wave_of[m] for m in ids] == sorted(wave_of[m] for m in ids)
    assert backlog_state(pair) == before  # nothing removed (what was locked is given back)
    # what a wave read beyond its watermark the next took as read: each message read
    # once (a credit each), as the secondary counts them
    assert peeked == len(ids)
    broker = pair.secondary.broker
    by_peek = sum(broker.messages_peeked[p.lower()] for p in paths)
    by_receive = sum(broker.messages_received[p.lower()] for p in paths)
    assert (by_peek, by_receive) == ((len(ids), 0) if read == "peek" else (0, len(ids)))


def _read_all(reading: Any, paths: list[str]) -> tuple[list[list[Any]], int]:
    """Every wave of ``paths`` read with a limit of 4; their rows and how many messages
    the reads took from the queues."""
    from syphon.job.read.waves import read_wave

    cursors: dict[str, int] = {}
    carried = None
    waves: list[list[Any]] = []
    peeked = 0
    while True:
        wave, carried = read_wave(reading, paths, cursors, limit=4, carried=carried)
        peeked += wave.handed_out
        rows = wave.rows.select("message_id", "backlog_queue", "enqueued_time").collect()
        per_queue = {p: sum(r["backlog_queue"] == p for r in rows) for p in paths}
        assert max(per_queue.values()) <= wave.limit
        assert all(r.read <= wave.limit + 1 for r in wave.reads)
        if wave.watermark is not None:  # Spark's naive times are the process's local time
            assert all(r["enqueued_time"].astimezone() < wave.watermark for r in rows)
        waves.append(rows)
        if wave.last:
            break
        cursors = wave.cut.cursors
        assert len(waves) < 40, "the waves make no progress"
    return waves, peeked


def test_a_burst_in_one_millisecond_doubles_the_limit_rather_than_stall(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five messages sent in one batch share their enqueue time: a limit of two cannot
    cut before them and after another queue's earlier messages, so the wave reads again
    with a larger limit and takes the burst whole."""
    from syphon.job.read.waves import read_wave

    burst = [
        to_backlog_message(ServiceBusMessage(f"b-{i}".encode(), message_id=f"b-{i}"), "orders")
        for i in range(5)
    ]
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_sender(queue(0)) as sender:
            sender.send_messages(burst)
        with client.get_queue_sender(queue(1)) as sender:
            for i in range(3):
                sender.send_messages(
                    to_backlog_message(ServiceBusMessage(b"x", message_id=f"later-{i}"), "orders")
                )
    ctx = context(job_config(pair, tmp_path, monkeypatch), spark)
    reading = Peeking(ctx, run_request(ctx))
    wave, _ = read_wave(reading, [queue(0), queue(1)], {}, limit=2)
    taken = sorted(r["message_id"] for r in wave.rows.select("message_id").collect())
    assert wave.limit > 2
    assert [m for m in taken if m.startswith("b-")] == [f"b-{i}" for i in range(5)]
