"""A credit budget for the primaries end to end: the run's sends to a primary stay within
``replay.credits_per_second`` across its replay tasks, and the ledger records the budget
and the rate reached."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import PRIMARY, Pair, job_config, run_job, send_raw, stored
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.deltars import DeltaRsStore

pytestmark = pytest.mark.timeout(300)

#: Messages, each in a session of its own: a batch each, so a task can run ahead of its
#: share by one message at most.
MESSAGES = 30
BUDGET = 10


def test_the_sends_to_a_primary_stay_within_its_budget_and_the_ledger_says_so(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"b-{i:02d}" for i in range(MESSAGES)]
    send_raw(
        pair,
        0,
        [
            to_backlog_message(
                ServiceBusMessage(m.encode(), message_id=m, session_id=m), "sessions"
            )
            for m in ids
        ],
    )
    budget = f"replay:\n  credits_per_second: {{{PRIMARY}: {BUDGET}}}\n"
    config = job_config(pair, tmp_path, monkeypatch, extra=budget)
    assert config.replay.credits_per_second == {PRIMARY: BUDGET}

    result = run_job(config, spark)
    assert result.status == "done", result
    assert sorted(str(m.message_id) for m in stored(pair, "sessions")) == ids

    last = DeltaRsStore(config.audit.path, lambda: None).runs()[-1]  # type: ignore[arg-type,return-value]
    ops = last.operations.as_map()
    assert ops[f"replay.credit_budget.{PRIMARY}"] == BUDGET
    rate = ops[f"replay.credit_rate.{PRIMARY}"]
    # each task spends its share and may run one batch (here one message) ahead of it,
    # whatever the machine's speed: slower only lowers the rate
    assert 0 < rate <= math.ceil(BUDGET * MESSAGES / (MESSAGES - 2))
    assert last.timings.replay_sends is not None
    assert last.timings.replay_sends >= (MESSAGES - 2) / BUDGET
