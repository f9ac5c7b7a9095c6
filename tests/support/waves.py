"""Backlogs for runs drained in waves: a key's messages spread over the backlog queues
in their order, and what arrived on the primary, per key."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusMessage

from support.paired_env import PRIMARY, Pair, job_config, stored
from support.quick_client import QuickClient
from syphon.servicebus.backlog_messages import to_backlog_message

QUEUES = 3


def queue(i: int) -> str:
    return f"{PRIMARY}/x-servicebus-transfer/{i}"


def waves_config(
    pair: Pair, tmp_path: Path, monkeypatch: Any, wave_messages: int = 6, read: str | None = None
) -> Any:
    """A job config whose runs take waves of ``wave_messages``; ``read``: its
    ``run.read`` (None: the default)."""
    reads = "" if read is None else f"  read: {read}\n"
    return job_config(
        pair, tmp_path, monkeypatch, extra=f"run:\n  wave_messages: {wave_messages}\n{reads}"
    )


def park_spread(pair: Pair, prefix: str, messages: int) -> dict[str, list[str]]:
    """Parks ``messages`` one at a time, in turn over the backlog queues (message ``i`` to
    queue ``i % 3``), alternately for ``orders`` (partition keys p0..p2) and for
    ``sessions`` (sessions s0..s2), a key's messages in their order on several queues.
    Returns each key's MessageIds in the order they were sent."""
    keys: dict[str, list[str]] = defaultdict(list)
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        senders = [client.get_queue_sender(queue(q)) for q in range(QUEUES)]
        try:
            for i in range(messages):
                mid = f"{prefix}-{i}"
                if i % 2 == 0:
                    key = f"p{(i // 2) % 3}"
                    message = ServiceBusMessage(mid.encode(), message_id=mid, partition_key=key)
                    dest = "orders"
                else:
                    key = f"s{(i // 2) % 3}"
                    message = ServiceBusMessage(mid.encode(), message_id=mid, session_id=key)
                    dest = "sessions"
                senders[i % QUEUES].send_messages(to_backlog_message(message, dest))
                keys[key].append(mid)
                time.sleep(0.002)  # a message per millisecond at most: distinct times
        finally:
            for s in senders:
                s.close()
    return dict(keys)


def arrived(pair: Pair) -> dict[str, list[str]]:
    """Each key's MessageIds on the primary, in the order they were stored."""
    out: dict[str, list[str]] = defaultdict(list)
    for path in ("orders", "sessions"):
        for m in stored(pair, path):
            key = m.session_id if path == "sessions" else m.parsed.annotation("x-opt-partition-key")
            out[str(key)].append(str(m.message_id))
    return dict(out)
