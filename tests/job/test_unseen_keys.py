"""Order is never traded: a message a run cannot see holds back its key.

A read once under lock receives what no one else holds; a message another receiver holds
locked (a killed run's locks until they lapse, an explorer in peek-lock mode, a stray
consumer) is never handed out. The run's gap check peeks what it could not receive, and
holds back the keys of what it finds there for the rest of the run: none of their
messages reaches a primary before the one it could not see. The run ends ``partial``
saying which keys wait and why, and a later run brings them home in order.

Order is checked on the primaries, by the order in which each key's messages were
stored there (their sequence numbers): the first arrival of each message, key by key,
is the order they were parked in."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from support.crash_scenario import free_the_killed_runs_lease, kill_with_sigkill, locked
from support.paired_env import Pair, backlog_state, context, job_config, run_job
from support.quick_client import QuickClient
from support.waiting import wait_until
from support.waves import QUEUES, arrived, park_spread, queue
from syphon.core.errors import ExitCode
from syphon.core.schema import Detail, Status

pytestmark = pytest.mark.timeout(500)

#: Waves of six over three queues: four waves at least.
MESSAGES = 24


def first_arrivals(pair: Pair) -> dict[str, list[str]]:
    """Each key's MessageIds on the primary in the order they first arrived (a resend of
    a message in doubt is a later copy)."""
    return {k: list(dict.fromkeys(v)) for k, v in arrived(pair).items()}


def lock_for(pair: Pair, seconds: float) -> None:
    """Gives the backlog queues a lock duration of ``seconds``."""
    for q in range(QUEUES):
        entity = pair.secondary.broker.entity(queue(q))
        pair.secondary.broker.update_queue(
            replace(entity.spec, lock_duration=timedelta(seconds=seconds))
        )


def once_in_waves(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A config that reads once in waves of six; a receive that comes back empty waits
    once more, briefly (not 2 + 4 + 8 s)."""
    monkeypatch.setattr("syphon.job.read.once._SHORT_PAGE_WAITS", (0.3,))
    return job_config(pair, tmp_path, monkeypatch, extra="run:\n  wave_messages: 6\n  read: once\n")


def skipped_unseen(config: Any, spark: Any, run_id: str) -> set[str]:
    """The MessageIds the run skipped because a message of their key was unseen."""
    return skipped_for(config, spark, run_id, Detail.EARLIER_MESSAGE_UNSEEN)


def skipped_for(config: Any, spark: Any, run_id: str, detail: str) -> set[str]:
    """The MessageIds the run skipped with ``detail``."""
    store = context(config, spark).store
    rows, plan = store.run_rows(run_id, "replay"), store.run_rows(run_id, "plan")
    assert rows is not None
    assert plan is not None
    places = rows.where(f"detail = '{detail}'").select("backlog_queue", "sequence_number")
    found = plan.join(places, ["backlog_queue", "sequence_number"]).collect()
    return {r["message_id"] for r in found}


def test_keys_whose_messages_another_receiver_holds_wait_and_a_later_run_sends_them_in_order(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An explorer in peek-lock mode holds two messages of the middle of the backlog
    while ``syphon run`` drains it in waves: their keys (and only theirs) are held back,
    every other key arrives whole and in order, and the run says which keys wait and
    why; once the explorer lets go, the next run brings the rest home in order."""
    keys = park_spread(pair, "x", MESSAGES)
    lock_for(pair, 120)  # the explorer's locks outlast the run
    config = once_in_waves(pair, tmp_path, monkeypatch)
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_receiver(queue(1)) as explorer:
            skipped = explorer.receive_messages(max_message_count=3, max_wait_time=5)
            taken = [str(m.message_id) for m in skipped]
            # the second and third messages of queue 1: not the head of the backlog
            explorer.abandon_message(skipped[0])
            held = skipped[1:]
            assert [str(m.message_id) for m in held] == ["x-4", "x-7"]
            first = run_job(config, spark, "beside-an-explorer")
            for m in held:
                explorer.abandon_message(m)
    assert taken[0] == "x-1"
    assert first.status == Status.PARTIAL, first
    waiting = {k for k, ids in keys.items() if {"x-4", "x-7"} & set(ids)}
    assert waiting == {"p2", "s0"}
    now = first_arrivals(pair)
    for key, ids in keys.items():
        got = now.get(key, [])
        if key in waiting:  # nothing after the unseen message, and what came is in order
            unseen = min(ids.index(m) for m in ("x-4", "x-7") if m in ids)
            assert got == ids[: len(got)], (key, got)
            assert len(got) <= unseen, (key, got)
        else:
            assert got == ids, (key, got)
    assert "2 keys held back: 2 messages are locked by another receiver" in (first.detail or "")
    assert first.fix is not None
    assert "lets its messages go" in first.fix, first.fix
    assert first.exit_code == ExitCode.PARTIAL
    later = {m for k in waiting for m in keys[k]} - {"x-4", "x-7"}
    assert skipped_unseen(config, spark, "beside-an-explorer") <= later
    assert skipped_unseen(config, spark, "beside-an-explorer")

    second = run_job(config, spark, "after-the-explorer")
    assert second.status == Status.DONE, second
    assert first_arrivals(pair) == keys
    assert arrived(pair) == keys  # and nothing twice
    assert not any(backlog_state(pair).values())


def test_a_run_that_takes_over_while_a_killed_runs_locks_still_hold_keeps_every_key_in_order(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``syphon run`` drains in waves and is killed with SIGKILL in its second wave's
    replay, holding that wave and the read of the next locked. Its lease is short; the
    next run takes over at once, while the killed run's locks still hold messages: it
    sends only keys it saw whole, and ends partial. A further run, once the locks have
    lapsed, finishes: every key arrived in order, nothing lost, every extra copy
    marked."""
    keys = park_spread(pair, "k", MESSAGES)
    lock_for(pair, 25)
    extra = "run:\n  lease_seconds: 10\n  wave_messages: 6\n  read: once\n"
    config = job_config(pair, tmp_path, monkeypatch, extra=extra)
    kill_with_sigkill(tmp_path, "mid_replay:1@2")
    assert locked(pair) > 0
    free_the_killed_runs_lease(Path(config.audit.path))  # as once the short lease expired

    assert locked(pair) > 0  # the next run starts while the killed run's locks hold
    takeover = run_job(config, spark, "takeover")
    now = first_arrivals(pair)
    for key, ids in keys.items():  # what came of each key is its beginning, in order
        got = now.get(key, [])
        assert got == ids[: len(got)], (key, got)
    assert takeover.status == Status.PARTIAL, takeover
    assert "held back" in (takeover.detail or ""), takeover.detail

    wait_until(lambda: locked(pair) == 0, timeout=60, what="the killed run's locks lapse")
    last = run_job(config, spark, "after-the-lapse")
    assert last.status == Status.DONE, last
    assert first_arrivals(pair) == keys  # every key in order
    assert not any(backlog_state(pair).values())  # nothing lost
    # every second copy is a resend the audit marks
    store = context(config, spark).store
    marked = set()
    for run_id in ("takeover", "after-the-lapse"):
        rows = store.run_rows(run_id, "replay")
        plan = store.run_rows(run_id, "plan")
        if rows is None or plan is None:
            continue
        resent = rows.where(f"detail = '{Detail.RESENT_IN_DOUBT}'").select(
            "backlog_queue", "sequence_number"
        )
        marked |= {
            r["message_id"]
            for r in plan.join(resent, ["backlog_queue", "sequence_number"]).collect()
        }
    for key, ids in arrived(pair).items():
        twice = {m for m in ids if ids.count(m) > 1}
        assert twice <= marked, (key, twice - marked)


def test_deferred_messages_are_named_deferred_and_taken_in_order_when_the_operator_asks(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer deferred two backlog messages: only a receive by sequence number takes
    them. The run holds back their keys and says they are deferred (not locked), with a
    fix that works: with ``--take-deferred`` the next run receives them by their
    sequence numbers and brings every key home in order."""
    from syphon.app.services import run_with_report
    from syphon.job.request import Asked, run_request

    keys = park_spread(pair, "d", MESSAGES)
    config = once_in_waves(pair, tmp_path, monkeypatch)
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_receiver(queue(1)) as consumer:
            got = consumer.receive_messages(max_message_count=3, max_wait_time=5)
            consumer.abandon_message(got[0])
            for m in got[1:]:
                consumer.defer_message(m)
    put_off = {str(m.message_id) for m in got[1:]}
    assert put_off == {"d-4", "d-7"}
    first = run_job(config, spark, "beside-deferred")
    assert first.status == Status.PARTIAL, first
    assert "2 keys held back: 2 messages are deferred by a consumer" in (first.detail or "")
    assert "locked" not in (first.detail or "")
    assert "--take-deferred" in (first.fix or ""), first.fix
    assert "other receiver" not in (first.fix or "")
    waiting = {k for k, ids in keys.items() if put_off & set(ids)}
    later = {m for k in waiting for m in keys[k]} - put_off
    skipped = skipped_for(config, spark, "beside-deferred", Detail.EARLIER_MESSAGE_DEFERRED)
    assert skipped
    assert skipped <= later
    assert not skipped_unseen(config, spark, "beside-deferred")

    ctx = context(config, spark)
    asked = Asked(take_deferred=True)
    second = run_with_report(ctx, run_request(ctx, "take-deferred", asked=asked))
    assert second.status == Status.DONE, second
    assert second.operations.snapshot_deferred_received == 2
    assert first_arrivals(pair) == keys  # every key in order
    assert arrived(pair) == keys  # and nothing twice
    assert not any(backlog_state(pair).values())
