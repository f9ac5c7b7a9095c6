"""What a run says after a crash and beside other receivers is what happened, end to end
against the local Service Bus: a run that takes over once a killed run's locks lapse in
the middle of its read plans everything it read and finishes (it used to fail on its own
count); an explorer that gives its messages back during a run causes no lapse warning; a
competitor that completes messages during a run leaves it ``done``, with the count said.

Order is checked on the primaries, by the order in which each key's messages were stored
there."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from servicebus_emulator import Emulator, ManualClock
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.crash_scenario import free_the_killed_runs_lease, kill_with_sigkill
from support.paired_env import Pair, backlog_state, context, job_config, make_pair, run_job
from support.quick_client import QuickClient
from support.waves import QUEUES, arrived, park_spread, queue
from syphon.core.schema import Status

pytestmark = pytest.mark.timeout(420)

MESSAGES = 12


def _lock_for(pair: Pair, seconds: float) -> None:
    for q in range(QUEUES):
        entity = pair.secondary.broker.entity(queue(q))
        pair.secondary.broker.update_queue(
            replace(entity.spec, lock_duration=timedelta(seconds=seconds))
        )


def _locked(secondary: Emulator, q: int | None = None) -> int:
    """How many backlog messages (of queue ``q``; None: of every queue) are locked now,
    by the local Service Bus's clock."""
    now = secondary.broker.clock.now_ms()
    queues = range(QUEUES) if q is None else [q]
    return sum(
        1
        for i in queues
        for m in secondary.broker.entity(queue(i)).messages.values()
        if m.lock_token is not None and (m.locked_until_ms or 0) > now
    )


def _when(condition: Callable[[], bool], then: Callable[[], object]) -> threading.Thread:
    """Calls ``then`` in a thread of its own once ``condition()`` holds (30 s at most)."""

    def watch() -> None:
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        then()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _merged(*parts: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for keys in parts:
        for key, ids in keys.items():
            out.setdefault(key, []).extend(ids)
    return out


def test_a_takeover_whose_read_sees_a_killed_runs_locks_lapse_plans_what_it_read(
    servicebus_emulator: EmulatorFactory,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``syphon run`` is killed with SIGKILL once its plan is in the audit, every message
    locked. New messages arrive. The next run receives those first; the killed run's
    locks lapse while it waits for the rest (the secondary's clock moves then), and their
    messages come next, lower numbers after higher ones. The run plans all it read, sends
    every key in order and ends ``done``; nothing is lost or sent twice."""
    clock = ManualClock()
    pair = make_pair(servicebus_emulator, secondary_clock=clock)
    _lock_for(pair, 30)
    first = park_spread(pair, "a", MESSAGES)
    config = job_config(pair, tmp_path, monkeypatch, extra="run:\n  lease_seconds: 10\n")
    kill_with_sigkill(tmp_path, "after_plan")
    assert _locked(pair.secondary) == MESSAGES
    free_the_killed_runs_lease(tmp_path / "delta")  # as once its short lease expired
    later = park_spread(pair, "b", MESSAGES)
    clock.advance(20)  # the killed run's locks end 10 s from now, the takeover's later
    monkeypatch.setattr("syphon.job.read.once._SHORT_PAGE_WAITS", (1.0, 1.0, 1.0))
    lapse = _when(lambda: _locked(pair.secondary) >= 2 * MESSAGES, lambda: clock.advance(11))

    takeover = run_job(config, spark, "takeover")
    lapse.join()
    assert takeover.status == Status.DONE, takeover
    assert arrived(pair) == _merged(first, later)  # every key in order, each message once
    assert not any(backlog_state(pair).values())
    plan = context(config, spark).store.run_rows("takeover", "plan")
    assert plan is not None
    assert plan.count() == 2 * MESSAGES  # its audit's rows are what it read


def test_an_explorer_that_gives_its_messages_back_during_a_run_causes_no_lapse_warning(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = park_spread(pair, "e", MESSAGES)
    config = job_config(pair, tmp_path, monkeypatch)
    monkeypatch.setattr("syphon.job.read.once._SHORT_PAGE_WAITS", (1.0, 1.0, 1.0))
    explorer = QuickClient.from_connection_string(pair.secondary.connection_string)
    receiver = explorer.get_queue_receiver(queue(0))
    held = receiver.receive_messages(max_message_count=2, max_wait_time=5)
    assert len(held) == 2

    def give_back() -> None:
        for m in held:
            receiver.abandon_message(m)

    # the explorer gives its two back once the run holds the rest of their queue
    per_queue = MESSAGES // QUEUES
    back = _when(lambda: _locked(pair.secondary, 0) >= per_queue, give_back)
    try:
        with caplog.at_level(logging.INFO):
            result = run_job(config, spark, "beside-an-explorer")
        back.join()
    finally:
        receiver.close()
        explorer.close()
    assert "lapsed" not in caplog.text
    assert result.status == Status.DONE, result
    assert arrived(pair) == keys


def test_a_competitor_that_completes_messages_during_a_run_leaves_it_done_saying_so(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run counted its queues; a competitor then receives and completes two messages
    of each before the run reads them. The gap check finds their places empty: they are
    gone, not unseen, and the run that brought everything else home is ``done``."""
    from syphon.obs import failpoints

    keys = park_spread(pair, "c", MESSAGES)
    config = job_config(pair, tmp_path, monkeypatch)
    monkeypatch.setattr("syphon.job.read.once._SHORT_PAGE_WAITS", (0.3,))
    taken: list[str] = []

    def compete(name: str) -> None:
        if name != "after_lease":
            return
        with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
            for q in range(QUEUES):
                with client.get_queue_receiver(queue(q)) as receiver:
                    for m in receiver.receive_messages(max_message_count=2, max_wait_time=5):
                        receiver.complete_message(m)
                        taken.append(str(m.message_id))

    monkeypatch.setattr(failpoints, "check", compete)
    result = run_job(config, spark, "beside-a-competitor")
    assert len(taken) == 2 * QUEUES
    assert result.status == Status.DONE, result
    assert f"{len(taken)} messages counted when the run started were gone" in (result.detail or "")
    assert arrived(pair) == {
        k: [m for m in ids if m not in taken] for k, ids in keys.items() if set(ids) - set(taken)
    }
    assert not any(backlog_state(pair).values())
