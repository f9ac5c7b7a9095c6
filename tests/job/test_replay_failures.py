"""The replay's ordering promise end to end: a destination that starts failing partway
through a run (the local Service Bus refuses every send after the first as disabled)
never gets a key's later message before its earlier one, the rest of it is skipped as
unavailable once a send found it so, and the next run delivers the rest in order.

The rules themselves are unit-tested in tests/unit/test_lanes.py; here they run in Spark
tasks against a real destination, through the SDK."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator import QueueSpec
from support.paired_env import PRIMARY, Pair, job_config, run_job, send_raw, stored
from support.quick_client import QuickClient
from syphon.core.schema import Detail, Outcome
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

#: Keys of the failing destination, and messages per key. With 2 replay tasks, one task
#: holds at least 4 of the 8 keys: at most one of its first batches is accepted, the next
#: is refused and the rest of its batches are skipped.
KEYS, PER_KEY = 8, 3
#: Large enough that every message is a batch of its own (standard tier: 256 KB).
BODY = 150 * 1024


def _order(message_id: str) -> int:
    return int(message_id.rsplit("-", 1)[1])


def test_a_destination_failing_partway_breaks_no_keys_order_and_the_next_run_sends_the_rest(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair.primary.broker.declare(QueueSpec("ledger"))
    sent: dict[str, str] = {}
    with QuickClient.from_connection_string(pair.secondary.connection_string) as sb:
        senders = [sb.get_queue_sender(f"{PRIMARY}/x-servicebus-transfer/{q}") for q in (0, 1)]
        for k in range(KEYS):  # a key's messages in one backlog queue, in order
            for j in range(PER_KEY):
                mid = f"o-k{k}-{j}"
                senders[k % 2].send_messages(
                    to_backlog_message(
                        ServiceBusMessage(
                            mid.encode() + b"." * BODY, message_id=mid, partition_key=f"k{k}"
                        ),
                        "orders",
                    )
                )
                sent[mid] = "orders"
        for sender in senders:
            sender.close()
    ledger = [f"l-k{k}-{j}" for k in range(2) for j in range(PER_KEY)]
    send_raw(
        pair,
        2,
        [
            to_backlog_message(
                ServiceBusMessage(m.encode(), message_id=m, partition_key=m[:4]), "ledger"
            )
            for m in ledger
        ],
    )
    config = job_config(pair, tmp_path, monkeypatch)
    pair.primary.fail_sends_after("orders", 1)  # the probes pass; one batch, then refusals

    first = run_job(config, spark)
    assert first.status == "partial", first
    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    replay = {
        r["message_id"]: r for r in audit if r["stage"] == "replay" and r["run_id"] == first.run_id
    }
    by_key: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for mid in sorted((m for m in replay if m.startswith("o-")), key=_order):
        by_key[replay[mid]["partition_key"]].append((replay[mid]["outcome"], replay[mid]["detail"]))
    assert len(by_key) == KEYS
    for key, outcomes in by_key.items():
        # sent, then at most one refused batch, then only skips: never a later message
        # of a key sent after an earlier one was not
        done = [o for o, _ in outcomes].count(Outcome.SENT)
        assert all(o == Outcome.SENT for o, _ in outcomes[:done]), (key, outcomes)
        rest = outcomes[done:]
        if rest and rest[0][0] == Outcome.FAILED:
            assert rest[0][1] == "MessagingEntityDisabledError", (key, outcomes)
            rest = rest[1:]
        assert all(o == Outcome.SKIPPED and d == Detail.DESTINATION_UNAVAILABLE for o, d in rest), (
            key,
            outcomes,
        )
    flat = [o for outcomes in by_key.values() for o in outcomes]
    assert sum(o == Outcome.SENT for o, _ in flat) == 1  # the one accepted send
    # one refusal per task (at most two), then the destination is skipped in that task
    assert 1 <= sum(o == Outcome.FAILED for o, _ in flat) <= 2
    assert (Outcome.SKIPPED, Detail.DESTINATION_UNAVAILABLE) in flat
    # the other destination is not affected
    assert all(replay[m]["outcome"] == Outcome.SENT for m in ledger)
    arrived_at_ledger = [str(m.message_id) for m in stored(pair, "ledger")]
    for key in ("l-k0", "l-k1"):  # each key in order (keys go independently)
        assert [m for m in arrived_at_ledger if m.startswith(key)] == [
            m for m in ledger if m.startswith(key)
        ]
    # what was not sent is still in the backlog, for the next run
    unsent = {m for m in sent if replay[m]["outcome"] != Outcome.SENT}
    left = {
        str(m.message_id)
        for q in range(2)
        for m in pair.secondary.broker.entity(
            f"{PRIMARY}/x-servicebus-transfer/{q}"
        ).messages.values()
    }
    assert left == unsent

    pair.primary.clear_faults()
    second = run_job(config, spark)
    assert second.status == "done", second
    arrived: dict[str, list[int]] = defaultdict(list)
    for m in stored(pair, "orders"):
        arrived[str(m.message_id).rsplit("-", 1)[0]].append(_order(str(m.message_id)))
    # every message exactly once, each key's in its original order
    assert arrived == {f"o-k{k}": list(range(PER_KEY)) for k in range(KEYS)}
