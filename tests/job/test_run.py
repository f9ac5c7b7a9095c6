"""``syphon run`` end to end: a real outage, replay to the primaries, settle the backlog."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from paired_env import BACKLOG_QUEUES, PRIMARY, Pair, job_config, park_outage, send_raw
from servicebus_emulator import QueueSpec
from syphon.core.config import load_config
from syphon.job.run import EXIT_DONE, EXIT_MISSING_DESTINATION, EXIT_PARTIAL, run
from syphon.producer.paired import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

ENTITIES = {"orders": "orders", "sessions": "sessions", "events": "events/Subscriptions/all"}


def stored(pair: Pair, path: str) -> list[Any]:
    """An entity's messages (scheduled ones included) in sequence order."""
    entity = pair.primary.broker.entity(path)
    return [entity.messages[s] for s in sorted(entity.messages)]


def backlog_state(pair: Pair) -> dict[str, list[str]]:
    out = {}
    for i in range(BACKLOG_QUEUES):
        path = f"{PRIMARY}/x-servicebus-transfer/{i}"
        entity = pair.secondary.broker.entity(path)
        out[path] = sorted(str(m.message_id) for m in entity.messages.values())
        assert entity.dlq is not None
        out[path + "/$DeadLetterQueue"] = sorted(
            str(m.message_id) for m in entity.dlq.messages.values()
        )
    return out


def test_run_replays_the_outage_in_order_and_settles_the_backlog(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    primary = pair.primary
    primary.broker.declare(QueueSpec("paused"))
    result = park_outage(pair, messages_per_phase=8)
    parked = result.to_backlog()
    assert parked
    # trouble: an invalid message, a duplicate of a parked one, and a destination that
    # refuses sends during the run
    dup = parked[0]
    send_raw(pair, 3, [
        to_backlog_message(ServiceBusMessage(b"x", message_id="bad-1"), "nowhere"),
        to_backlog_message(ServiceBusMessage(dup.body, message_id=dup.message_id,
                                             session_id=dup.session_id,
                                             partition_key=dup.partition_key), dup.destination),
        to_backlog_message(ServiceBusMessage(b"p1", message_id="paused-1"), "paused"),
        to_backlog_message(ServiceBusMessage(b"p2", message_id="paused-2"), "paused"),
    ])  # fmt: skip
    primary.make_unavailable("paused")
    before = {path: [str(m.message_id) for m in stored(pair, p)] for path, p in ENTITIES.items()}

    config = job_config(pair, tmp_path, monkeypatch)
    first = run(config, lambda: spark)
    assert first.status == "partial", first
    # work left (paused) and a destination that does not exist (nowhere): the latter is
    # the one the operator must act on, so it decides the exit code
    assert first.exit_code == EXIT_MISSING_DESTINATION
    assert first.hint == (
        "a destination does not exist: create nowhere on contoso-primary (messages "
        "dead-lettered in the backlog queues with reason destination_unknown; resubmit "
        "them from there), or correct the senders' entity names"
    )

    # every parked message reached its destination once, after what was there
    for name, path in ENTITIES.items():
        ids = [str(m.message_id) for m in stored(pair, path)]
        assert ids[: len(before[name])] == before[name]
        replayed = ids[len(before[name]) :]
        want = {m.message_id for m in parked if m.destination == name}
        assert sorted(replayed) == sorted(want), name
    # in the original order per partition key (the scenario's seq grows per producer)
    by_id = {m.message_id: m for m in parked}
    for name, path in ENTITIES.items():
        lanes: dict[Any, list[int]] = defaultdict(list)
        for m in stored(pair, path):
            sent = by_id.get(str(m.message_id))
            if sent is not None:
                lanes[(sent.session_id, sent.partition_key)].append(sent.seq)
        for lane, seqs in lanes.items():
            assert seqs == sorted(seqs), (name, lane, seqs)
    # with the original properties
    sample = next(m for m in parked if m.session_id and m.time_to_live)
    (copy,) = [m for m in stored(pair, "sessions") if str(m.message_id) == sample.message_id]
    assert copy.session_id == sample.session_id
    with (
        ServiceBusClient.from_connection_string(primary.connection_string) as client,
        client.get_queue_receiver("sessions", session_id=sample.session_id) as receiver,
    ):
        (peeked,) = [m for m in receiver.peek_messages(100) if m.message_id == sample.message_id]
    assert b"".join(peeked.body) == sample.body  # byte for byte
    assert peeked.partition_key == sample.partition_key
    props = {k.decode() if isinstance(k, bytes) else k: v
             for k, v in copy.parsed.get_application_properties().items()}  # fmt: skip
    assert props == {"producer": sample.producer, "seq": sample.seq}
    assert copy.expires_ms is not None
    assert 0 < copy.expires_ms - copy.enqueued_ms < 3600 * 1000  # TTL less the time parked

    # the backlog keeps only the paused destination's messages; the invalid one is
    # dead-lettered, the duplicate completed
    state = backlog_state(pair)
    active = sorted(i for path, ids in state.items() if "DeadLetter" not in path for i in ids)
    dead = sorted(i for path, ids in state.items() if "DeadLetter" in path for i in ids)
    assert active == ["paused-1", "paused-2"]
    assert dead == ["bad-1"]

    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    mine = [r for r in audit if r["run_id"] == first.run_id]
    replay_rows = {r["message_id"]: (r["outcome"], r["detail"]) for r in mine
                   if r["stage"] == "replay"}  # fmt: skip
    assert replay_rows["paused-1"] == ("skipped", "destination_unavailable")
    assert all(replay_rows[m.message_id] == ("sent", None) for m in parked)
    settle = {r["message_id"]: r["outcome"] for r in mine if r["stage"] == "settle"}
    assert settle["bad-1"] == "dead_lettered"
    assert settle["paused-2"] == "left"
    runs = sorted((r for r in read_table(Path(config.audit.path) / RUNS_TABLE).to_pylist()
                   if r["run_id"] == first.run_id), key=lambda r: r["recorded_at"])  # fmt: skip
    assert [r["status"] for r in runs] == ["planned", "replaying", "replayed", "partial"]
    ops = dict(runs[-1]["operations"])
    assert ops["replay.messages_sent"] == len(parked)
    assert ops["settle.completes"] == len(parked) + 1
    assert ops["settle.dead_letters"] == 1
    assert ops["replay.pings"] == 4  # orders, sessions, events, paused
    assert ops["snapshot.messages_peeked"] == len(parked) + 4
    assert runs[-1]["credits_per_replayed_message"] == pytest.approx(
        ops["credits_estimated"] / len(parked)
    )

    # the destination is back: the next run finishes the work
    primary.clear_faults()
    second = run(config, lambda: spark)
    assert second.status == "done", second
    assert second.exit_code == EXIT_DONE
    assert sorted(str(m.message_id) for m in stored(pair, "paused")) == ["paused-1", "paused-2"]
    state = backlog_state(pair)
    assert not [i for path, ids in state.items() if "DeadLetter" not in path for i in ids]
    # and a run over the empty backlog starts no Spark session
    third = run(config, lambda: pytest.fail("an empty run must not start Spark"))
    assert third.status == "empty"
    assert third.exit_code == EXIT_DONE


def test_a_destination_the_primary_cannot_list_and_the_send_does_not_find_is_left_with_exit_8(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    send_raw(
        pair,
        0,
        [
            to_backlog_message(ServiceBusMessage(b"a", message_id="o1"), "orders"),
            to_backlog_message(ServiceBusMessage(b"b", message_id="g1"), "gone"),
        ],
    )
    config = job_config(pair, tmp_path, monkeypatch)
    # the primary's management API does not answer: its entities are not known, so the
    # missing destination shows only when the replay's ping finds no entity
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("SYPHON__PRIMARIES__0__MANAGEMENT_ENDPOINT", f"127.0.0.1:{closed}")
    config = load_config(config.source)
    result = run(config, lambda: spark)
    assert result.status == "partial", result
    assert result.exit_code == EXIT_MISSING_DESTINATION
    assert result.hint == (
        "a destination does not exist: create gone on contoso-primary (messages left in "
        "the backlog for the next run), or correct the senders' entity names"
    )
    assert [str(m.message_id) for m in stored(pair, "orders")] == ["o1"]
    assert backlog_state(pair)[f"{PRIMARY}/x-servicebus-transfer/0"] == ["g1"]

    # once the destination exists, the next run sends what waited and exits 0
    pair.primary.broker.declare(QueueSpec("gone"))
    again = run(config, lambda: spark)
    assert (again.status, again.exit_code) == ("done", EXIT_DONE)
    assert [str(m.message_id) for m in stored(pair, "gone")] == ["g1"]
    # while a run that only leaves work for later (a paused destination) exits 5
    pair.primary.make_unavailable("orders")
    send_raw(pair, 1, [to_backlog_message(ServiceBusMessage(b"c", message_id="o2"), "orders")])
    paused = run(config, lambda: spark)
    assert (paused.status, paused.exit_code, paused.hint) == ("partial", EXIT_PARTIAL, None)


def test_a_primary_that_goes_down_mid_run_fails_the_run_and_the_next_run_finishes(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parked = {}
    for q in range(BACKLOG_QUEUES):
        batch = []
        for i in range(8):
            mid = f"m-{q}-{i}"
            batch.append(to_backlog_message(
                ServiceBusMessage(mid.encode(), message_id=mid, partition_key=f"k{i % 4}"),
                "orders"))  # fmt: skip
            parked[mid] = "orders"
        send_raw(pair, q, batch)
    config = job_config(pair, tmp_path, monkeypatch)
    pair.primary.slow_down(0.3, "orders")  # a replay long enough to fail in the middle
    fault_at: list[float] = []

    def take_the_primary_down() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if pair.primary.broker.entity("orders").messages:  # some batches are through
                pair.primary.make_namespace_unavailable()
                fault_at.append(time.monotonic())
                return
            time.sleep(0.1)

    watcher = threading.Thread(target=take_the_primary_down)
    watcher.start()
    first = run(config, lambda: spark)
    watcher.join()
    assert fault_at
    assert first.status == "failed", first
    assert first.exit_code == 1
    assert first.detail == "namespace_fault: primary"
    assert stored(pair, "orders")
    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    cut = {
        r["message_id"]
        for r in audit
        if r["stage"] == "replay"
        and r["outcome"] in ("in_doubt", "skipped")
        and r["run_id"] == first.run_id
    }
    assert cut  # the batches in flight or still to send when the namespace went down

    pair.primary.clear_faults()
    second = run(config, lambda: spark)
    assert second.status == "done", second
    assert second.operations["replay.messages_sent"] == len(cut)
    delivered = Counter(str(m.message_id) for m in stored(pair, "orders"))
    assert set(delivered) == set(parked)  # nothing lost
    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    resent = {r["message_id"] for r in audit if r["detail"] == "resent_in_doubt"}
    assert {m for m, n in delivered.items() if n > 1} <= resent
    assert not any(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/{q}").messages
                   for q in range(BACKLOG_QUEUES))  # fmt: skip


def test_a_planned_run_is_replayed_later_and_status_shows_it(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from syphon.job.plan import run_plan
    from syphon.job.run import format_status, replay_run, status

    for q in range(2):
        send_raw(pair, q, [to_backlog_message(
            ServiceBusMessage(f"b{q}{i}".encode(), message_id=f"r-{q}-{i}"), "orders")
            for i in range(3)])  # fmt: skip
    config = job_config(pair, tmp_path, monkeypatch)
    planned = run_plan(spark, config)
    assert not stored(pair, "orders")  # a plan sends nothing

    report = status(config)
    depth = {q.path.rsplit("/", 1)[1]: q.message_count for q in report.queues}
    assert depth == {"0": 3, "1": 3, "2": 0, "3": 0}
    assert [(r["run_id"], r["status"]) for r in report.runs] == [(planned.run_id, "planned")]

    # a message that arrives after the plan is not part of it: it stays for the next run
    send_raw(pair, 0, [to_backlog_message(ServiceBusMessage(b"late", message_id="late"),
                                          "orders")])  # fmt: skip
    resumed = replay_run(spark, config, planned.run_id)
    assert resumed.status == "done", resumed
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == sorted(
        f"r-{q}-{i}" for q in range(2) for i in range(3))  # fmt: skip
    left = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").messages
    assert [str(m.message_id) for m in left.values()] == ["late"]

    report = status(config)
    assert report.runs[0]["status"] == "done"
    text = format_status(report)
    assert planned.run_id in text
    assert pair.secondary.connection_string not in text
    with pytest.raises(Exception, match="never planned"):
        replay_run(spark, config, "no-such-run")


def test_a_throttled_destination_backs_off_and_a_held_lease_stops_a_second_run(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta as td

    import syphon.job.replay
    from syphon.job.run import EXIT_BUSY
    from syphon.store.lease import Lease

    send_raw(pair, 1, [to_backlog_message(
        ServiceBusMessage(f"t{i}".encode(), message_id=f"t-{i}", partition_key="k"), "orders")
        for i in range(5)])  # fmt: skip
    config = job_config(pair, tmp_path, monkeypatch)

    # another run holds the lease: this one records busy and touches nothing
    other = Lease(config.audit.path, "another-run", td(minutes=5))
    assert other.acquire().holder == other.holder
    busy = run(config, lambda: pytest.fail("a busy run must not start Spark"))
    assert (busy.status, busy.exit_code) == ("busy", EXIT_BUSY)
    assert busy.detail is not None
    assert "another-run" in busy.detail
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/1").messages) == 5
    other.release()

    # server busy beyond the SDK's own retries: the replay backs off and goes on
    original_ping = syphon.job.replay.ping_destinations

    def ping_then_throttle(*args: Any, **kwargs: Any) -> Any:
        answer = original_ping(*args, **kwargs)
        pair.primary.throttle("orders")
        threading.Timer(15.0, lambda: pair.primary.throttle("orders", busy=False)).start()
        return answer

    monkeypatch.setattr("syphon.job.replay.ping_destinations", ping_then_throttle)
    done = run(config, lambda: spark)
    assert done.status == "done", done
    assert done.operations["replay.busy_retries"] >= 1
    assert [str(m.message_id) for m in stored(pair, "orders")] == [f"t-{i}" for i in range(5)]


def test_a_secondary_that_goes_down_while_settling_fails_the_run_and_the_next_run_finishes(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import syphon.job.settle

    messages = [ServiceBusMessage(f"s{i}".encode(), message_id=f"s-{i}") for i in range(4)]
    send_raw(pair, 2, [to_backlog_message(m, "orders") for m in messages])
    config = job_config(pair, tmp_path, monkeypatch)
    settle_queues = syphon.job.settle.settle_queues

    def settle_with_the_secondary_down(*args: Any, **kwargs: Any) -> Any:
        pair.secondary.make_namespace_unavailable()
        return settle_queues(*args, **kwargs)

    monkeypatch.setattr("syphon.job.settle.settle_queues", settle_with_the_secondary_down)
    first = run(config, lambda: spark)
    assert (first.status, first.detail) == ("failed", "namespace_fault: secondary"), first
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == [f"s-{i}" for i in range(4)]
    backlog = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/2").messages
    assert len(backlog) == 4  # sent, but nothing settled

    monkeypatch.setattr("syphon.job.settle.settle_queues", settle_queues)
    pair.secondary.clear_faults()
    second = run(config, lambda: spark)
    assert second.status == "done", second
    assert second.counts == {"duplicate": 4}  # already replayed: completed, not sent again
    assert not backlog
    assert len(stored(pair, "orders")) == 4
