"""Discarding, end to end through the command against the local Service Bus: copies of a
message in a dead-letter queue, and a poison message an operator drops. A discarded
message is completed without being sent, once its plan row is in the audit, and its
rows say ``discarded``, by which run and with the operator's reason; ``syphon plan`` with
the same discard is the dry run. Dead letters that wait for the operator make the run
that first leaves them ``partial``; a later run that finds them still there (the
operator let them stay) is ``done`` and says how many wait."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import PRIMARY, Pair, command_config, dead_letter, dead_letters, stored
from syphon.app.cli import main
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

SOURCES = f"""
sources:
  - name: dlq
    kind: dead_letter
    namespace: {PRIMARY}
    entities: [orders]
"""


def rows(tmp_path: Path, run_id: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    """A run's audit rows by (stage, MessageId, sequence number)."""
    return {
        (r["stage"], r["message_id"], r["sequence_number"]): r
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["run_id"] == run_id
    }


def received(pair: Pair) -> list[str]:
    return [str(m.message_id) for m in stored(pair, "orders")]


def test_copies_of_a_delivered_message_are_kept_then_discarded_with_a_record(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the dead-letter queue holds m-1 twice (same MessageId and body) and m-2 once
    dead_letter(
        pair,
        "orders",
        [
            ServiceBusMessage(b"one", message_id="m-1"),
            ServiceBusMessage(b"one", message_id="m-1"),
            ServiceBusMessage(b"two", message_id="m-2"),
        ],
    )
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    run = ["run", "--config", conf, "--source", "dlq", "--run-id"]

    # one copy is sent, the other waits for the operator: the run is partial
    assert main([*run, "first"]) == 5
    assert received(pair) == ["m-1", "m-2"]
    assert dead_letters(pair, "orders") == ["m-1"]
    out = capsys.readouterr().out
    assert "partial (1 dead letters wait for the operator (0 of them since an earlier run)" in out
    first = rows(tmp_path, "first")
    (copy,) = [k for k in first if k[0] == "settle" and first[k]["outcome"] == "left"]
    assert first[copy]["detail"] == "duplicate_in_snapshot"

    # the next run finds it still there: the operator let it stay, the run is done
    assert main([*run, "second"]) == 0
    assert received(pair) == ["m-1", "m-2"]  # nothing more sent
    assert dead_letters(pair, "orders") == ["m-1"]
    out = capsys.readouterr().out
    assert "run second: done (1 dead letters wait for the operator (1 of them since" in out
    assert rows(tmp_path, "second")[("plan", "m-1", copy[2])]["reason"] == "already_replayed"

    # the dry run: the copy would be discarded, nothing is removed
    dry_run = ["plan", "--config", conf, "--source", "dlq", "--run-id", "dry"]
    assert main([*dry_run, "--discard-duplicates", "--reason", "copies of delivered orders"]) == 0
    out = capsys.readouterr().out
    assert "discard duplicates (reason: copies of delivered orders)" in out
    dry = rows(tmp_path, "dry")
    assert {k[0] for k in dry} == {"plan"}
    assert (dry[("plan", "m-1", copy[2])]["verdict"], dry[("plan", "m-1", copy[2])]["detail"]) == (
        "discarded",
        "copies of delivered orders",
    )
    assert dead_letters(pair, "orders") == ["m-1"]

    # the discard: completed without being sent, its rows say so, with the reason
    assert (
        main([*run, "third", "--discard-duplicates", "--reason", "copies of delivered orders"]) == 0
    )
    assert dead_letters(pair, "orders") == []
    assert received(pair) == ["m-1", "m-2"]  # not sent again
    third = rows(tmp_path, "third")
    plan, settle = third[("plan", "m-1", copy[2])], third[("settle", "m-1", copy[2])]
    assert (plan["verdict"], plan["reason"], plan["detail"]) == (
        "discarded",
        "already_replayed",
        "copies of delivered orders",
    )
    assert (settle["outcome"], settle["detail"], settle["run_id"]) == (
        "discarded",
        "copies of delivered orders",
        "third",
    )
    assert ("replay", "m-1", copy[2]) not in third
    assert "run third: done" in capsys.readouterr().out


def test_a_poison_message_is_discarded_by_selection_and_its_dry_run_removes_nothing(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead_letter(
        pair,
        "orders",
        [
            ServiceBusMessage(b"bad", message_id="p-1", application_properties={"schema": "v0"}),
            ServiceBusMessage(b"good", message_id="g-1", application_properties={"schema": "v2"}),
        ],
    )
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    where = ["--where", "properties['schema'] = 'v0'"]
    reason = ["--reason", "INC-4711: schema v0 is no longer read"]

    assert (
        main(
            [
                "plan",
                "--config",
                conf,
                "--source",
                "dlq",
                "--run-id",
                "dry",
                "--discard",
                *where,
                *reason,
            ]
        )
        == 0
    )
    dry = rows(tmp_path, "dry")
    verdicts = {k[1]: (r["verdict"], r["reason"]) for k, r in dry.items()}
    assert verdicts == {
        "p-1": ("discarded", "operator_selected"),
        "g-1": ("unselected", "not_selected"),
    }
    assert sorted(dead_letters(pair, "orders")) == ["g-1", "p-1"]

    assert (
        main(["discard", "--config", conf, "--source", "dlq", "--run-id", "drop", *where, *reason])
        == 0
    )
    assert dead_letters(pair, "orders") == ["g-1"]  # the rest stays
    assert received(pair) == []  # nothing was sent
    drop = rows(tmp_path, "drop")
    (settled,) = [r for k, r in drop.items() if k[:2] == ("settle", "p-1")]
    assert (settled["outcome"], settled["detail"]) == (
        "discarded",
        "INC-4711: schema v0 is no longer read",
    )
    assert not [k for k in drop if k[0] == "replay"]
    out = capsys.readouterr().out
    assert "run drop: done" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["discard", "--reason", "x"], "a discard needs a selection"),
        (["discard", "--where", "true", "--reason", " "], "--reason is empty"),
        (
            ["discard", "--where", "true", "--reason", "key SharedAccessKey=abc"],
            "--reason looks like it holds a secret",
        ),
        (["plan", "--discard", "--where", "true"], "--discard needs --reason"),
        (["run", "--reason", "because"], "--reason goes with --discard-duplicates"),
    ],
)
def test_a_malformed_discard_exits_2_before_anything_is_read(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "never-read.yaml")  # the config is not even read
    assert main([argv[0], "--config", missing, *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "SharedAccessKey=abc" not in err
