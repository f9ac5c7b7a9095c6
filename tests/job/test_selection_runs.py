"""Selections end to end, through the ``syphon`` command against the local Service Bus:
``plan`` with a selection is the dry run (nothing sent, nothing removed, every message's
verdict recorded), ``run`` with the same one sends and settles only what it takes and
leaves the rest where it was, unlocked, for a later run; a bad selection exits 2 before
anything is read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import PRIMARY, Pair, backlog_state, command_config, send_raw, stored
from syphon.app.cli import main
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)


def park(pair: Pair) -> None:
    send_raw(
        pair,
        0,
        [
            to_backlog_message(
                ServiceBusMessage(
                    b"1", message_id="o-1", application_properties={"tenant": "contoso"}
                ),
                "orders",
            ),
            to_backlog_message(
                ServiceBusMessage(
                    b"2", message_id="o-2", application_properties={"tenant": "fabrikam"}
                ),
                "orders",
            ),
            to_backlog_message(
                ServiceBusMessage(b"3", message_id="s-1", session_id="s"), "sessions"
            ),
        ],
    )
    send_raw(
        pair,
        1,
        [
            to_backlog_message(
                ServiceBusMessage(
                    b"4", message_id="o-3", application_properties={"tenant": "contoso"}
                ),
                "orders",
            ),
        ],
    )


def audit_rows(tmp_path: Path, run_id: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    rows = read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
    return {
        (r["stage"], r["message_id"]): (r["verdict"], r["reason"], r["outcome"], r["detail"])
        for r in rows
        if r["run_id"] == run_id
    }


def last_run(tmp_path: Path) -> dict[str, Any]:
    runs = read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
    return max(runs, key=lambda r: r["recorded_at"])


def test_plan_is_the_dry_run_and_run_takes_only_the_selection(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    park(pair)
    conf = command_config(pair, spark, tmp_path, monkeypatch)
    selection = ["--destination", "orders", "--where", "properties['tenant'] = 'contoso'"]
    before = backlog_state(pair)

    assert main(["plan", "--config", conf, "--run-id", "dry", *selection]) == 0
    assert backlog_state(pair) == before
    assert stored(pair, "orders") == []
    planned = audit_rows(tmp_path, "dry")
    assert planned == {
        ("plan", "o-1"): ("replay", None, "planned", None),
        ("plan", "o-3"): ("replay", None, "planned", None),
        ("plan", "o-2"): ("unselected", "not_selected", "planned", None),
        ("plan", "s-1"): ("unselected", "not_selected", "planned", None),
    }
    out = capsys.readouterr().out
    assert "selection: destination orders; where properties['tenant'] = 'contoso'" in out

    assert main(["run", "--config", conf, "--run-id", "taken", *selection]) == 0
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == ["o-1", "o-3"]
    assert stored(pair, "sessions") == []
    assert last_run(tmp_path)["status"] == "done"  # what was left out is not left over
    rows = audit_rows(tmp_path, "taken")
    assert rows[("settle", "o-2")] == ("unselected", "not_selected", "left", "not_selected")
    assert rows[("settle", "s-1")] == ("unselected", "not_selected", "left", "not_selected")
    assert rows[("settle", "o-1")][2] == "completed"
    # the rest waits in the backlog, unlocked, and the next run takes it
    queue0 = pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0")
    assert sorted((str(m.message_id), m.lock_token) for m in queue0.messages.values()) == [
        ("o-2", None),
        ("s-1", None),
    ]
    assert main(["run", "--config", conf, "--run-id", "rest"]) == 0
    assert sorted(str(m.message_id) for m in stored(pair, "orders")) == ["o-1", "o-2", "o-3"]
    assert [str(m.message_id) for m in stored(pair, "sessions")] == ["s-1"]
    assert sum(len(v) for v in backlog_state(pair).values()) == 0


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--enqueued-from", "yesterday"], "not an ISO 8601 time"),
        (["--enqueued-from", "2026-11-02", "--enqueued-until", "2026-11-01"], "window is empty"),
        (["--message-ids-file", "/nonexistent/ids.txt"], "--message-ids-file"),
    ],
)
def test_a_malformed_selection_exits_2_before_anything_is_read(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: list[str],
    said: str,
) -> None:
    def refuse(*_: Any) -> None:
        pytest.fail("the config was read for a malformed selection")

    monkeypatch.setattr("syphon.app.cli.load_config", refuse)
    assert main(["run", *option]) == 2
    assert said in capsys.readouterr().err


def test_a_predicate_that_does_not_apply_fails_the_run_with_exit_2_and_sends_nothing(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    park(pair)
    conf = command_config(pair, spark, tmp_path, monkeypatch)
    before = backlog_state(pair)
    code = main(["run", "--config", conf, "--where", "no_such_column = 1"])
    assert code == 2
    # the run's own line says why (Spark's logger may say it too, depending on what
    # logging the worker's earlier tests set up: not what is tested)
    assert "failed (SelectionError: --where 'no_such_column = 1'" in capsys.readouterr().out
    assert backlog_state(pair) == before
    assert stored(pair, "orders") == []
    audit = tmp_path / "delta" / AUDIT_TABLE
    assert not audit.exists() or read_table(audit).num_rows == 0  # refused before the peek
    assert last_run(tmp_path)["status"] == "failed"
