"""``syphon run`` end to end: a real outage, replay to the primaries, settle the backlog."""

from __future__ import annotations

import socket
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusSubQueue,
)
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import QueueSpec
from support.paired_env import (
    PRIMARY,
    Pair,
    backlog_state,
    context,
    job_config,
    park_orders,
    park_outage,
    run_job,
    send_raw,
    stored,
)
from support.quick_client import QuickClient
from syphon.core.configfile import load_config
from syphon.core.errors import ExitCode
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

ENTITIES = {"orders": "orders", "sessions": "sessions", "events": "events/Subscriptions/all"}


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
    now = datetime.now(timezone.utc)
    later = (now + timedelta(hours=1)).replace(microsecond=0)
    send_raw(
        pair,
        3,
        [
            to_backlog_message(ServiceBusMessage(b"x", message_id="bad-1"), "nowhere"),
            to_backlog_message(
                ServiceBusMessage(
                    dup.body,
                    message_id=dup.message_id,
                    session_id=dup.session_id,
                    partition_key=dup.partition_key,
                ),
                dup.destination,
            ),
            to_backlog_message(ServiceBusMessage(b"p1", message_id="paused-1"), "paused"),
            to_backlog_message(ServiceBusMessage(b"p2", message_id="paused-2"), "paused"),
            # every header a sender may set, and scheduled times in the past and the future
            to_backlog_message(
                ServiceBusMessage(
                    b'{"a": 1}',
                    message_id="rich-1",
                    content_type="application/json",
                    correlation_id="corr-1",
                    subject="subj-1",
                    to="to-1",
                    reply_to="reply-q",
                    reply_to_session_id="reply-s",
                ),
                "orders",
            ),
            to_backlog_message(
                ServiceBusMessage(
                    b"past",
                    message_id="past-1",
                    scheduled_enqueue_time_utc=now - timedelta(minutes=5),
                ),
                "orders",
            ),
            to_backlog_message(
                ServiceBusMessage(b"later", message_id="later-1", scheduled_enqueue_time_utc=later),
                "orders",
            ),
            # one MessageId with two bodies (the second a conflict), and a message whose own
            # time to live ran out while it was parked
            to_backlog_message(ServiceBusMessage(b"A", message_id="twice"), "orders"),
            to_backlog_message(ServiceBusMessage(b"B", message_id="twice"), "orders"),
            to_backlog_message(
                ServiceBusMessage(b"old", message_id="old-1", time_to_live=timedelta(seconds=1)),
                "orders",
            ),
        ],
    )
    extra = {"orders": {"rich-1", "past-1", "later-1", "twice"}}
    parked_at = time.monotonic()
    primary.make_unavailable("paused")
    before = {path: [str(m.message_id) for m in stored(pair, p)] for path, p in ENTITIES.items()}

    config = job_config(pair, tmp_path, monkeypatch)
    time.sleep(max(0.0, parked_at + 1.1 - time.monotonic()))  # old-1's one second passes
    started = time.monotonic()
    first = run_job(config, spark)
    took = time.monotonic() - started
    assert first.status == "partial", first
    # work left (paused) and a destination that does not exist (nowhere): the latter is
    # the one the operator must act on, so it decides the exit code
    assert first.exit_code == ExitCode.MISSING_DESTINATION
    assert first.fix == (
        "a destination does not exist: create nowhere on contoso-primary (messages "
        "dead-lettered in the backlog queues with reason destination_unknown; resubmit "
        "them from there), or correct the senders' entity names"
    )

    # every parked message reached its destination once, after what was there
    for name, path in ENTITIES.items():
        ids = [str(m.message_id) for m in stored(pair, path)]
        assert ids[: len(before[name])] == before[name]
        replayed = ids[len(before[name]) :]
        want = {m.message_id for m in parked if m.destination == name} | extra.get(name, set())
        assert sorted(replayed) == sorted(want), (name, set(replayed) ^ set(want))
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
        QuickClient.from_connection_string(primary.connection_string) as client,
        client.get_queue_receiver("sessions", session_id=sample.session_id) as receiver,
    ):
        (peeked,) = [m for m in receiver.peek_messages(100) if m.message_id == sample.message_id]
    assert b"".join(peeked.body) == sample.body  # byte for byte
    assert peeked.partition_key == sample.partition_key
    props = {
        k.decode() if isinstance(k, bytes) else k: v
        for k, v in copy.parsed.get_application_properties().items()
    }
    assert props == {"producer": sample.producer, "seq": sample.seq}
    assert copy.expires_ms is not None
    assert 0 < copy.expires_ms - copy.enqueued_ms < 3600 * 1000  # TTL less the time parked
    # every header as the sender set it; a past schedule sent at once, a future one kept
    with (
        QuickClient.from_connection_string(primary.connection_string) as client,
        client.get_queue_receiver("orders") as receiver,
    ):
        at_orders = {str(m.message_id): m for m in receiver.peek_messages(500)}
    rich = at_orders["rich-1"]
    assert (
        rich.content_type,
        rich.correlation_id,
        rich.subject,
        rich.to,
        rich.reply_to,
        rich.reply_to_session_id,
    ) == ("application/json", "corr-1", "subj-1", "to-1", "reply-q", "reply-s")
    assert b"".join(rich.body) == b'{"a": 1}'
    assert at_orders["past-1"].state == ServiceBusMessageState.ACTIVE
    assert at_orders["later-1"].state == ServiceBusMessageState.SCHEDULED
    assert at_orders["later-1"].scheduled_enqueue_time_utc == later
    assert b"".join(at_orders["twice"].body) == b"A"  # the first body; the other is a conflict

    # the backlog keeps only the paused destination's messages; the invalid one and the
    # conflict are dead-lettered with the verdict's reason, the duplicate and the expired
    # one completed
    state = backlog_state(pair)
    active = sorted(i for path, ids in state.items() if "DeadLetter" not in path for i in ids)
    dead = sorted(i for path, ids in state.items() if "DeadLetter" in path for i in ids)
    assert active == ["paused-1", "paused-2"]
    assert dead == ["bad-1", "twice"]
    with (
        QuickClient.from_connection_string(pair.secondary.connection_string) as client,
        client.get_queue_receiver(
            f"{PRIMARY}/x-servicebus-transfer/3", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as receiver,
    ):
        letters = {str(m.message_id): m for m in receiver.peek_messages(10)}
    assert letters["twice"].dead_letter_reason == "message_id_reused_in_snapshot"
    assert letters["twice"].dead_letter_error_description == f"syphon run {first.run_id}: conflict"
    assert letters["bad-1"].dead_letter_reason == "destination_unknown"

    audit = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    mine = [r for r in audit if r["run_id"] == first.run_id]
    replay_rows = {
        r["message_id"]: (r["outcome"], r["detail"]) for r in mine if r["stage"] == "replay"
    }
    # the probe attaches a link, which the paused destination accepts; its send refuses
    assert replay_rows["paused-1"] == ("failed", "MessagingEntityDisabledError")
    assert all(replay_rows[m.message_id] == ("sent", None) for m in parked)
    settle = {r["message_id"]: r["outcome"] for r in mine if r["stage"] == "settle"}
    assert settle["bad-1"] == "dead_lettered"
    assert settle["paused-2"] == "left"
    assert settle["old-1"] == "completed"
    verdicts = {(r["message_id"], r["verdict"]) for r in mine if r["stage"] == "plan"}
    assert {("old-1", "expired"), ("twice", "replay"), ("twice", "conflict")} <= verdicts
    twice = sorted(
        (r["verdict"], r["outcome"])
        for r in mine
        if r["stage"] == "settle" and r["message_id"] == "twice"
    )
    assert twice == [("conflict", "dead_lettered"), ("replay", "completed")]
    runs = sorted(
        (
            r
            for r in read_table(Path(config.audit.path) / RUNS_TABLE).to_pylist()
            if r["run_id"] == first.run_id
        ),
        key=lambda r: r["recorded_at"],
    )
    assert [r["status"] for r in runs] == ["planned", "replaying", "replayed", "partial"]
    ops = dict(runs[-1]["operations"])
    assert ops["replay.messages_sent"] == len(parked) + 4
    assert ops["settle.completes"] == len(parked) + 6
    assert ops["settle.dead_letters"] == 2
    assert ops["replay.probes"] == 4  # orders, sessions, events, paused
    assert "replay.pings" not in ops  # nothing sent to probe a destination
    # read once (the default): each message received under lock once, none peeked
    assert ops["snapshot.messages_peeked"] == 0
    assert ops["snapshot.messages_received"] == len(parked) + 10
    assert ops["replay.busy_retries"] == 0
    # a batch is one transfer: at least one per destination sent to, at most one a message
    assert 3 <= ops["replay.send_transfers"] <= ops["replay.messages_sent"]
    # the settle completed and dead-lettered by the read's locks, receiving nothing;
    # what it left (a paused destination's two) stayed held and was given back at the
    # end, one request, counted
    assert ops["settle.receives"] == 0
    assert ops["settle.abandons"] == 2
    assert ops["settle.requests"] >= 3  # the completions, the dead-letters, the give-back
    timings = dict(runs[-1]["timings"])
    assert all(timings[s] > 0 for s in ("snapshot", "reconcile", "audit", "replay", "settle"))
    # each is a span of this run: no stage took longer than the whole run did
    assert all(0 <= t <= took for t in timings.values()), (timings, took)
    assert 0 < timings["replay.probes"] + timings["replay.sends"] <= timings["replay"]
    assert 0 < timings["settle.passes"] <= timings["settle"]
    assert runs[-1]["credits_per_replayed_message"] == pytest.approx(
        ops["credits_estimated"] / (len(parked) + 4)
    )

    # the destination is back: the next run finishes the work
    primary.clear_faults()
    second = run_job(config, spark)
    assert second.status == "done", second
    assert second.exit_code == ExitCode.DONE
    assert sorted(str(m.message_id) for m in stored(pair, "paused")) == ["paused-1", "paused-2"]
    state = backlog_state(pair)
    assert not [i for path, ids in state.items() if "DeadLetter" not in path for i in ids]
    # and a run over the empty backlog starts no Spark session
    third = run_job(config, lambda: pytest.fail("an empty run must not start Spark"))
    assert third.status == "empty"
    assert third.exit_code == ExitCode.DONE


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
    result = run_job(config, spark)
    assert result.status == "partial", result
    assert result.exit_code == ExitCode.MISSING_DESTINATION
    assert result.fix == (
        "a destination does not exist: create gone on contoso-primary (messages left in "
        "the backlog for the next run), or correct the senders' entity names"
    )
    assert [str(m.message_id) for m in stored(pair, "orders")] == ["o1"]
    assert backlog_state(pair)[f"{PRIMARY}/x-servicebus-transfer/0"] == ["g1"]

    # once the destination exists, the next run sends what waited and exits 0
    pair.primary.broker.declare(QueueSpec("gone"))
    again = run_job(config, spark)
    assert (again.status, again.exit_code) == ("done", ExitCode.DONE)
    assert [str(m.message_id) for m in stored(pair, "gone")] == ["g1"]
    # while a run that only leaves work for later (a paused destination) exits 5
    pair.primary.make_unavailable("orders")
    send_raw(pair, 1, [to_backlog_message(ServiceBusMessage(b"c", message_id="o2"), "orders")])
    paused = run_job(config, spark)
    assert (paused.status, paused.exit_code, paused.fix) == ("partial", ExitCode.PARTIAL, None)


class TickingClock:
    """A stand-in for the ``time`` module whose monotonic clock advances 10 s a reading
    (from a large start, as a real one)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def monotonic(self) -> float:
        self.now += 10
        return self.now


@pytest.mark.parametrize("stop", ["after_replaying", "after_replay_commit"])
def test_a_stopped_run_resumes_sending_what_was_not_sent_and_nothing_twice(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: str
) -> None:
    """``syphon replay --run-id`` of a run that stopped before it sent anything, or once
    its sends were recorded: the resumed run peeks the backlog again (the plan's snapshot
    went with the first driver), sends what the first attempt did not record as sent,
    nothing twice, and settles the backlog."""
    ids = [f"s-{q}-{i}" for q in range(2) for i in range(2)]
    for q in range(2):
        mine = [m for m in ids if m.startswith(f"s-{q}-")]
        send_raw(
            pair,
            q,
            [
                to_backlog_message(ServiceBusMessage(m.encode(), message_id=m), "orders")
                for m in mine
            ],
        )
    config = job_config(pair, tmp_path, monkeypatch)
    stopped: list[str] = []

    def stop_once(name: str) -> None:
        if name == stop and not stopped:
            stopped.append(name)
            raise RuntimeError(f"the driver stopped at {name}")

    monkeypatch.setattr("syphon.obs.failpoints.check", stop_once)
    # the stages' clock ticks 10 s a reading: each timed part of a stage is the span
    # between its two readings, whatever the machine's speed
    monkeypatch.setattr("syphon.job.request.time", TickingClock())
    first = run_job(config, spark)
    assert (first.status, stopped) == ("failed", [stop]), first
    assert first.timings.discover == 10
    sent_first = ids if stop == "after_replay_commit" else []
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == sent_first
    assert sum(len(v) for v in backlog_state(pair).values()) == 4  # nothing settled

    # each stage's work is done when its outcomes are recorded (the sends and the
    # settlements happen in the stage, not when the audit first reads its results)
    from syphon.store.audit import TableStore

    record = TableStore.append_rows
    seen_at_record: dict[str, tuple[int, int]] = {}

    def recording(store: Any, rows: Any, run_id: str, stage: str, *args: Any) -> Any:
        seen_at_record[stage] = (
            len(stored(pair, "orders")),
            sum(len(v) for v in backlog_state(pair).values()),
        )
        return record(store, rows, run_id, stage, *args)

    monkeypatch.setattr(TableStore, "append_rows", recording)
    resumed = run_job(config, spark, first.run_id, resume=True)
    assert resumed.status == "done", resumed
    assert resumed.counts == {"replay": 4}
    assert seen_at_record["settle"] == (4, 0)
    if stop == "after_replaying":  # the resumed run sent them all
        assert seen_at_record["replay"] == (4, 4)
    spans = resumed.timings
    # the replay: its probes, its sends and the commit of their outcomes
    assert (spans.replay_probes, spans.replay_sends, spans.replay) == (10, 10, 30)
    assert (spans.settle_passes, spans.settle) == (10, 20)
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == ids  # each once
    assert sum(len(v) for v in backlog_state(pair).values()) == 0
    rows = [
        r
        for r in read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
        if r["run_id"] == first.run_id and r["stage"] == "replay"
    ]
    assert sorted(r["message_id"] for r in rows) == ids  # one replay row per message
    assert {r["outcome"] for r in rows} == {"sent"}


def test_a_run_resumed_after_its_settle_was_recorded_takes_up_nothing_it_settled(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a run settled is done: ``syphon replay --run-id`` of a run that stopped once
    its settle was recorded sends nothing and settles nothing again (a run of several
    waves takes up only the wave that was cut off)."""
    ids = park_orders(pair, "z", queues=2, per_queue=2)
    config = job_config(pair, tmp_path, monkeypatch)
    stopped: list[str] = []

    def stop_once(name: str) -> None:
        if name == "after_settle_commit" and not stopped:
            stopped.append(name)
            raise RuntimeError(f"the driver stopped at {name}")

    monkeypatch.setattr("syphon.obs.failpoints.check", stop_once)
    first = run_job(config, spark)
    assert (first.status, stopped) == ("failed", ["after_settle_commit"]), first
    assert sum(len(v) for v in backlog_state(pair).values()) == 0

    resumed = run_job(config, spark, first.run_id, resume=True)
    assert resumed.status == "done", resumed
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == sorted(ids)  # once
    rows = [
        r
        for r in read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
        if r["run_id"] == first.run_id
    ]
    assert sorted((r["stage"], r["outcome"]) for r in rows if r["stage"] != "plan") == sorted(
        [("replay", "sent")] * 4 + [("settle", "completed")] * 4
    )


#: The TTL of the message that expires between the plan and the replay: long enough for
#: the plan on a busy machine, short enough to wait out.
SHORT_TTL = timedelta(seconds=30)


def test_a_planned_run_is_replayed_later_and_what_changed_in_between_is_left(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``syphon plan`` now, ``syphon replay --run-id`` later: in between one planned
    message is taken from the backlog by someone else (``backlog_changed``), one's TTL
    runs out (``expired_before_send``), one is locked by another receiver during the
    settle (sent, then ``left`` / ``not_received``) and one arrives (not part of the
    plan). The next run finishes, sending nothing twice."""
    from syphon.app.text import format_status
    from syphon.job.plan.planning import plan
    from syphon.job.request import run_request
    from syphon.job.run.status import status
    from syphon.job.sources import run_source

    def park(queue: int, mid: str, **options: Any) -> None:
        send_raw(
            pair,
            queue,
            [
                to_backlog_message(
                    ServiceBusMessage(mid.encode(), message_id=mid, **options), "orders"
                )
            ],
        )

    for q in range(2):
        send_raw(
            pair,
            q,
            [
                to_backlog_message(
                    ServiceBusMessage(f"b{q}{i}".encode(), message_id=f"r-{q}-{i}"), "orders"
                )
                for i in range(3)
            ],
        )
    park(2, "gone")
    park(3, "held")
    park(3, "short", time_to_live=SHORT_TTL)
    expires = datetime.now(timezone.utc) + SHORT_TTL
    config = job_config(pair, tmp_path, monkeypatch)
    ctx = context(config, spark)
    planned = plan(ctx, run_request(ctx))
    assert not stored(pair, "orders")  # a plan sends nothing
    audit_path = Path(config.audit.path) / AUDIT_TABLE
    verdicts = {r["message_id"]: r["verdict"] for r in read_table(audit_path).to_pylist()}
    assert verdicts["short"] == "replay", "the plan took longer than the message's TTL"

    ctx = context(config, spark)
    report = status(ctx, run_source(ctx))
    depth = {q.path.rsplit("/", 1)[1]: q.message_count for q in report.queues}
    assert depth == {"0": 3, "1": 3, "2": 1, "3": 2}
    assert [(r.run_id, r.status) for r in report.runs] == [(planned.run_id, "planned")]

    # a message that arrives after the plan is not part of it: it stays for the next run
    park(0, "late")
    backlog = f"{PRIMARY}/x-servicebus-transfer"
    with QuickClient.from_connection_string(pair.secondary.connection_string) as sb:
        with sb.get_queue_receiver(f"{backlog}/2") as receiver:  # someone takes "gone"
            (gone,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(gone)
        wait = (expires - datetime.now(timezone.utc)).total_seconds()
        time.sleep(max(0.0, wait) + 0.5)  # "short" expires
        with sb.get_queue_receiver(f"{backlog}/3") as receiver:  # someone holds "held"
            (held,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            assert str(held.message_id) == "held"
            resumed = run_job(config, spark, planned.run_id, resume=True)
            receiver.abandon_message(held)
    assert resumed.status == "partial", resumed  # "held" is still in the backlog
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == sorted(
        [f"r-{q}-{i}" for q in range(2) for i in range(3)] + ["held"]
    )
    rows = [r for r in read_table(audit_path).to_pylist() if r["run_id"] == planned.run_id]
    outcomes = {(r["stage"], r["message_id"]): (r["outcome"], r["detail"]) for r in rows}
    assert outcomes[("replay", "gone")] == ("skipped", "backlog_changed")
    assert outcomes[("replay", "short")] == ("skipped", "expired_before_send")
    assert outcomes[("replay", "held")] == ("sent", None)
    assert outcomes[("settle", "held")] == ("left", "not_received")
    assert ("settle", "late") not in outcomes
    assert ("replay", "late") not in outcomes
    left = pair.secondary.broker.entity(f"{backlog}/0").messages
    assert [str(m.message_id) for m in left.values()] == ["late"]

    ctx = context(config, spark)
    report = status(ctx, run_source(ctx))
    assert report.runs[0].status == "partial"
    text = format_status(report)
    assert planned.run_id in text
    assert pair.secondary.connection_string not in text
    with pytest.raises(Exception, match="never planned"):
        run_job(config, spark, "no-such-run", resume=True)

    # the next run: "held" was delivered already (settled, not sent again), "short" has
    # expired (settled), "late" is sent
    final = run_job(config, spark)
    assert final.status == "done", final
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == sorted(
        [f"r-{q}-{i}" for q in range(2) for i in range(3)] + ["held", "late"]
    )
    assert not any(pair.secondary.broker.entity(f"{backlog}/{q}").messages for q in range(4))


def test_only_destination_unknown_rows_name_unknown_destinations() -> None:
    """The exit-8 list takes invalid rows whose reason is ``destination_unknown`` and no
    others, whatever their reasons sort like."""
    import pyarrow as pa

    from syphon.job.run.finish import unknown_destinations

    rows = [
        ("invalid", "destination_unknown", "p", "gone"),
        ("invalid", "message_malformed", "p", "a-first"),
        ("invalid", "too_large", "p", "z-last"),
        ("replay", None, "p", "orders"),
        ("invalid", "destination_unknown", "p", "gone"),
    ]
    columns = ("verdict", "reason", "primary", "destination")
    planned = pa.Table.from_pylist([dict(zip(columns, r, strict=True)) for r in rows])
    assert unknown_destinations(planned) == {("p", "gone")}


def test_the_session_is_told_how_many_messages_the_discovery_counted(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local session is fitted to the run's size (syphon.app.spark.QUICK_START_MESSAGES):
    the discovery's counts reach the factory before the session starts; and the run sizes
    the session's shuffles to what it read (syphon.job.context.fit_shuffle_partitions),
    starting from a local session's own two partitions."""
    from syphon.app import services
    from syphon.app.services import build_context, run_with_report
    from syphon.core.sessions import SessionFit

    for queue, n in ((0, 3), (1, 4)):
        send_raw(
            pair,
            queue,
            [
                to_backlog_message(
                    ServiceBusMessage(f"c{queue}-{i}".encode(), message_id=f"c{queue}-{i}"),
                    "orders",
                )
                for i in range(n)
            ],
        )
    admin = ServiceBusAdministrationClient.from_connection_string(
        pair.secondary.admin_connection_string, connection_verify=pair.secondary.ca_bundle
    )
    size = sum(q.size_in_bytes for q in admin.list_queues_runtime_properties())
    assert size > len("c0-0") * 7
    config = job_config(pair, tmp_path, monkeypatch)
    told: list[tuple[int | None, int | None, bool]] = []

    def build(_conf: Any, _dbutils_get: Any, fit: SessionFit) -> Any:
        """Stands for build_spark_session: records the fit, returns the test's session
        (one shared JVM per test worker)."""
        told.append((fit.expected_messages, fit.wave_bytes, fit.azure_ad))
        return spark

    monkeypatch.setattr(services, "build_spark_session", build)
    monkeypatch.setattr(services, "start_python_workers", lambda _session: None)
    from syphon.app.spark import LOCAL_CONF
    from syphon.job.context import FITTED_SHUFFLE_PARTITIONS

    shuffles = "spark.sql.shuffle.partitions"
    for key in (shuffles, FITTED_SHUFFLE_PARTITIONS):
        spark.conf.set(key, LOCAL_CONF[key])  # as a local session starts
    ctx = build_context(config)
    assert run_with_report(ctx).status == "done"
    # one wave: the backlog's bytes, as the namespace said; connection strings, no Azure AD
    assert told == [(7, size, False)]
    assert spark.conf.get(shuffles) == "1"
