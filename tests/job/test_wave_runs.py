"""Runs drained in waves against the local Service Bus (``run.wave_messages`` small, so
that a few dozen messages take several waves): a key's messages spread over backlog
queues and over waves arrive in order, each once; a destination that fails in the first
wave is held back by the later ones and finished by the next run, in order; a run
bounded by ``--max-waves`` stops at a wave's end as ``partial``; a source that cannot be
cut by time takes one wave."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import (
    PRIMARY,
    Pair,
    backlog_state,
    context,
    run_job,
    secondary_access,
)
from support.quick_client import QuickClient
from support.report_html import parse_report, table_dict
from support.waves import QUEUES, arrived, park_spread, queue, waves_config
from syphon.app.services import run_with_report
from syphon.core.schema import Status
from syphon.job.plan import planning as plan
from syphon.job.request import Asked, run_request
from syphon.servicebus.backlog_messages import to_backlog_message

pytestmark = pytest.mark.timeout(400)


def planned_waves(ctx: Any, run_id: str) -> list[Any]:
    return [r for r in ctx.store.runs() if r.run_id == run_id and r.status == Status.PLANNED]


#: Three waves of six (two messages a queue and wave) at least: a first, a middle and a
#: last wave.
MESSAGES = 18


def test_a_backlog_drained_in_waves_keeps_each_keys_order_and_sends_each_message_once(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = park_spread(pair, "w", MESSAGES)
    # peeked (read once: tests/job/test_read_once_runs.py); 2 messages a queue and wave
    config = waves_config(pair, tmp_path, monkeypatch, read="peek")
    fitted: list[bool] = []  # each wave's plan: interpreted or compiled (the tests' session
    # plans everything interpreted: tests/spark/test_session.py checks the setting itself)
    monkeypatch.setattr(
        plan, "fit_code_generation", lambda spark, first, conf: fitted.append(first) or False
    )
    with caplog.at_level(logging.INFO, logger="syphon.job.run.runner"):
        result = run_job(config, spark, "waves")
    assert result.status == Status.DONE, result
    assert arrived(pair) == keys  # every key in order, every message once
    assert not any(backlog_state(pair).values())
    # each wave's settle received its own messages only: one settle row per message,
    # none of them left, each message received once
    settled = context(config, spark).store.run_rows("waves", "settle")
    assert settled is not None
    assert {r["outcome"]: r["count"] for r in settled.groupBy("outcome").count().collect()} == {
        "completed": MESSAGES
    }
    assert "settle_left" not in result.outcomes
    assert result.operations.settle_receives == MESSAGES
    # every message the secondary's peeks handed out is counted (credits), those read
    # beyond a wave's watermark and read again by the next wave included
    peeked = sum(pair.secondary.broker.messages_peeked[queue(q).lower()] for q in range(QUEUES))
    assert result.operations.snapshot_messages_peeked == peeked
    assert peeked == MESSAGES  # what a wave read beyond its watermark was not read again
    # the ledger: several waves, each named, their cuts moving forward
    waves = planned_waves(context(config, spark), "waves")
    assert len(waves) >= 3
    assert [w.wave for w in waves] == list(range(1, len(waves) + 1))
    marks = [w.watermark for w in waves]
    assert None not in marks
    assert marks == sorted(marks)
    assert sum(sum(w.counts.values()) for w in waves) == MESSAGES
    assert all(sum(w.counts.values()) <= 6 for w in waves)
    assert fitted == [True] + [False] * (len(waves) - 1)  # the small first wave only
    # every destination probed once, not once per wave
    assert result.operations.replay_probes == 2
    # the report's waves: one row each, messages home growing to every message
    assert result.report is not None
    page = parse_report(Path(result.report).read_text(encoding="utf-8"))
    table = table_dict(page.sections["waves"][0])
    assert list(table) == [str(w.wave) for w in waves]
    home = [int(row["home so far"]) for row in table.values()]
    assert home == sorted(home)
    assert home[-1] == MESSAGES
    # one log record per wave, with its figures (the JSON log's fields)
    figures = [r.fields["wave"] for r in caplog.records if hasattr(r, "fields")]
    assert [f["number"] for f in figures] == [w.wave for w in waves]
    assert [f["home"] for f in figures] == home
    assert figures[-1]["planned"] == MESSAGES
    assert figures[-1]["left_estimate"] == 0


def test_a_destination_failing_in_the_first_wave_is_held_back_then_finished_in_order(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = park_spread(pair, "f", MESSAGES)  # three waves of six
    # peeked: the settle receives (read once: tests/job/test_read_once_runs.py)
    config = waves_config(pair, tmp_path, monkeypatch, read="peek")
    pair.primary.broker.set_fault("orders", sends_left=0)  # probes answer, sends fail
    first = run_job(config, spark, "failing")
    assert first.status == Status.PARTIAL, first
    # the later waves' settles gave back the left keys' messages at the queues' heads:
    # received, counted in the operations, no message's outcome
    assert "settle_given_back" not in first.outcomes
    assert (first.operations.settle_receives or 0) > first.outcomes["settle_completed"]
    assert first.detail is not None
    assert "held back in the later waves" in first.detail
    ctx = context(config, spark)
    assert len(planned_waves(ctx, "failing")) >= 3
    replayed = ctx.store.run_rows("failing", "replay")
    assert replayed is not None
    orders = replayed.where("destination = 'orders'").groupBy("outcome").count().collect()
    by_outcome = {r["outcome"]: r["count"] for r in orders}
    # the first wave tried orders (at most 3 of its messages); every later wave skipped
    # it without a send
    assert by_outcome.get("sent", 0) == 0
    assert 0 < by_outcome.get("failed", 0) <= 3
    assert by_outcome["failed"] + by_outcome["skipped"] == MESSAGES // 2
    sessions = arrived(pair)
    assert {k: v for k, v in sessions.items() if k.startswith("s")} == {
        k: v for k, v in keys.items() if k.startswith("s")
    }

    pair.primary.broker.clear_faults()
    second = run_job(config, spark, "finishing")
    assert second.status == Status.DONE, second
    assert arrived(pair) == keys
    assert not any(backlog_state(pair).values())


def test_max_waves_stops_a_run_at_a_waves_end_and_the_next_run_takes_the_rest(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = park_spread(pair, "m", MESSAGES)
    config = waves_config(pair, tmp_path, monkeypatch)
    ctx = context(config, spark)
    bounded = run_with_report(ctx, run_request(ctx, "bounded", asked=Asked(max_waves=1)))
    assert bounded.status == Status.PARTIAL, bounded
    assert bounded.detail is not None
    assert "--max-waves" in bounded.detail
    (wave,) = planned_waves(ctx, "bounded")
    taken = sum(wave.counts.values())
    assert 0 < taken <= 6
    assert sum(len(v) for v in arrived(pair).values()) == taken
    assert sum(len(v) for v in backlog_state(pair).values()) == MESSAGES - taken

    rest = run_job(config, spark, "rest")
    assert rest.status == Status.DONE, rest
    assert arrived(pair) == keys


def test_a_source_that_holds_no_more_than_a_wave_takes_one_unnamed_wave(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = park_spread(pair, "o", 6)
    config = waves_config(pair, tmp_path, monkeypatch, wave_messages=100)
    assert run_job(config, spark, "small").status == Status.DONE
    (wave,) = planned_waves(context(config, spark), "small")
    assert (wave.wave, wave.watermark) == (None, None)
    assert arrived(pair) == keys


def test_partitioned_and_dead_letter_sources_take_one_wave_and_say_why(pair: Pair) -> None:
    """A partitioned backlog queue numbers each partition's messages on its own (a
    sequence number does not follow enqueue order), and a dead letter keeps its original
    enqueue time: neither can be cut by time, so the run takes one wave (no Spark here:
    the decision is made before the session starts)."""
    from servicebus_emulator import QueueSpec
    from syphon.job.read.wave_sizes import one_wave
    from syphon.servicebus.discovery import DiscoveredQueue

    partitioned = f"{PRIMARY}/x-servicebus-transfer/9"
    pair.secondary.broker.declare(QueueSpec(partitioned, enable_partitioning=True))
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_sender(partitioned) as sender:
            for i in range(40):  # keys over many partitions: some beyond the first
                message = ServiceBusMessage(b"x", message_id=f"p-{i}", partition_key=f"k{i}")
                sender.send_messages(to_backlog_message(message, "orders"))
    access = secondary_access(pair.secondary)
    found = [DiscoveredQueue(PRIMARY, 9, partitioned, 40, True)]
    why = one_wave(10, "backlog", found, access)
    assert why is not None
    assert "partitioned" in why
    plain = [DiscoveredQueue(PRIMARY, 0, queue(0), 40, False)]
    assert one_wave(10, "backlog", plain, access) is None  # a plain backlog: waves
    assert one_wave(0, "backlog", plain, access) == "run.wave_messages is 0"
    assert one_wave(100, "backlog", plain, access) == "the source holds no more than one wave"
    dead = [DiscoveredQueue(PRIMARY, 0, "orders/$DeadLetterQueue", 40, False)]
    assert "dead-letter" in (one_wave(10, "dead_letter", dead, access) or "")
    assert "namespace" in (one_wave(10, "namespace", plain, access) or "")
