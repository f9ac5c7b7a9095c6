"""Repair on re-drive (``--set`` / ``--unset``), end to end through the command against the
local Service Bus: the dry run (``plan --set``) counts what each change alters and sends
nothing; the run sends the selected dead letters with the two properties set (one with
the type it names) and one removed, every other section and property as it was, each
key's order kept; the audit names what was changed, the ledger keeps the expressions. A
bad expression exits 2 before anything is peeked; the session id cannot be changed; a
planned run resumed with `syphon replay` sends with the repair its plan recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import (
    Pair,
    application_properties,
    command_config,
    dead_letter,
    dead_letters,
    redrive_sources,
    stored,
)
from syphon.app.cli import main
from syphon.core import amqp_bytes as ab
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

SOURCES = redrive_sources("orders")

REPAIR = [
    "--where",
    "properties['tenant'] = 'contoso'",
    "--set",
    "retries:long=0",
    "--set",
    "tenant=upper(properties['tenant'])",
    "--unset",
    "legacy",
]


def sections(stored_message: Any) -> dict[int, bytes]:
    return {s.code: s.raw for s in ab.sections(stored_message.parsed.bare)}


def message(mid: str, key: str, tenant: str, n: int = 7) -> ServiceBusMessage:
    return ServiceBusMessage(
        f"body of {mid}".encode(),
        message_id=mid,
        partition_key=key,
        subject="order-created",
        correlation_id=f"c-{mid}",
        content_type="application/json",
        application_properties={"tenant": tenant, "n": n, "legacy": True},
    )


def test_a_repair_is_counted_by_its_dry_run_then_sends_only_what_it_names(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sent = [
        message("a-1", "k1", "contoso"),
        message("b-1", "k2", "contoso"),
        message("a-2", "k1", "contoso"),
        message("x-1", "k3", "fabrikam"),  # not selected: stays as it is
        message("a-3", "k1", "contoso"),
        message("b-2", "k2", "contoso"),
    ]
    dead_letter(pair, "orders", sent)
    before = {
        str(m.message_id): m for m in pair.primary.broker.entity("orders").dlq.messages.values()
    }
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    capsys.readouterr()

    # the dry run: what each change alters, per destination; nothing sent, nothing removed
    dry = ["plan", "--config", conf, "--source", "redrive", "--run-id", "dry", *REPAIR]
    assert main(dry) == 0
    out = capsys.readouterr().out
    assert "repair: set retries:long=0; set tenant=upper(properties['tenant']); unset legacy" in out
    assert "repaired: set retries 5, set tenant 5, unset legacy 5" in out
    assert stored(pair, "orders") == []
    assert len(dead_letters(pair, "orders")) == 6

    assert main(["run", "--config", conf, "--source", "redrive", "--run-id", "fix", *REPAIR]) == 0
    got = stored(pair, "orders")
    # each key's order kept
    ids = [str(m.message_id) for m in got]
    assert sorted(ids) == ["a-1", "a-2", "a-3", "b-1", "b-2"]
    assert [i for i in ids if i.startswith("a")] == ["a-1", "a-2", "a-3"]
    assert [i for i in ids if i.startswith("b")] == ["b-1", "b-2"]
    for m in got:
        # the two set with their types, the one removed gone, the others as they were
        assert application_properties(m) == {
            "tenant": ("string", "CONTOSO"),
            "n": ("int", 7),
            "retries": ("long", 0),
        }
        # every other section byte for byte as the dead-lettered message's own
        original = sections(before[str(m.message_id)])
        for code in (ab.PROPERTIES, ab.DATA):
            assert sections(m)[code] == original[code]
        key = {str(k): v for k, v in m.parsed.annotations.items()}["x-opt-partition-key"]
        assert key == ("k1" if str(m.message_id).startswith("a") else "k2")
    assert dead_letters(pair, "orders") == ["x-1"]
    left = pair.primary.broker.entity("orders").dlq.messages.values()
    assert [application_properties(m)["legacy"] for m in left] == [("boolean", True)]

    audit = read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
    planned = {r["message_id"]: r["repaired"] for r in audit if r["run_id"] == "fix"}
    assert planned == {
        **{i: "set retries; set tenant; unset legacy" for i in ids},
        "x-1": None,  # unselected: nothing changed
    }
    report = (tmp_path / "delta" / "reports" / "fix.html").read_text(encoding="utf-8")
    said = "set retries:long=0; set tenant=upper(properties[&#39;tenant&#39;]); unset legacy"
    assert said in report
    runs = read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
    recorded = {tuple(json.loads(r["repair"])) for r in runs if r["run_id"] == "fix"}
    assert recorded == {
        ("set retries:long=0", "set tenant=upper(properties['tenant'])", "unset legacy")
    }


def test_a_value_that_cannot_be_sent_makes_its_message_invalid_and_a_resumed_run_repairs_too(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dead_letter(
        pair, "orders", [message("v-1", "k1", "contoso", n=7), message("v-2", "k2", "c", n=1)]
    )
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    # a byte holds 100, not 700
    repair = ["--set", "weight:byte=typed_properties['n'].int * 100"]
    # planned, then resumed: the replay sends with the repair its plan recorded
    argv = ["plan", "--config", conf, "--source", "redrive", "--run-id", "typed", *repair]
    assert main(argv) == 0
    assert main(["replay", "--config", conf, "--source", "redrive", "--run-id", "typed"]) == 5
    assert [
        (str(m.message_id), application_properties(m)["weight"]) for m in stored(pair, "orders")
    ] == [("v-2", ("byte", 100))]
    assert dead_letters(pair, "orders") == ["v-1"]
    rows = {
        r["message_id"]: (r["verdict"], r["reason"], r["detail"])
        for r in read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
        if r["stage"] == "plan"
    }
    assert rows["v-1"] == (
        "invalid",
        "repair_invalid",
        "--set weight: the value is outside byte's range",
    )


def test_a_bad_expression_or_a_session_id_change_exits_2_before_anything_is_peeked(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dead_letter(pair, "orders", [message("p-1", "k1", "contoso")])
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)

    def peeked(*_: Any, **__: Any) -> Any:
        raise AssertionError("the source was read")

    # found (its queues' counts), never peeked
    monkeypatch.setattr("syphon.job.plan.planning.read_snapshot", peeked)
    monkeypatch.setattr("syphon.job.read.snapshot.read_snapshot", peeked)
    monkeypatch.setattr("syphon.job.read.waves.read_wave", peeked)
    monkeypatch.setattr("syphon.job.run.loop.WaveReader", peeked)
    base = ["--config", conf, "--source", "redrive"]
    assert main(["run", *base, "--set", "tenant=upper(no_such_column)"]) == 2
    said = capsys.readouterr()
    assert "--set tenant=upper(no_such_column)" in said.out + said.err
    assert "no_such_column" in said.out + said.err
    assert main(["plan", *base, "--set", "n=upper("]) == 2
    assert "--set n=upper(" in capsys.readouterr().err
    assert main(["run", *base, "--set", "SessionId='s-2'"]) == 2
    said = capsys.readouterr()
    assert "not changeable (the session id decides the order" in said.err
    assert "fix:" in said.err
    assert dead_letters(pair, "orders") == ["p-1"]


def test_an_empty_run_with_a_repair_starts_no_spark_session(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The repair's expressions are judged once the source is found to hold messages
    (before any is peeked): a run that finds nothing starts no session for them."""
    from support.paired_env import job_config

    job_config(pair, tmp_path, monkeypatch, extra=SOURCES)

    def no_session(*_: Any) -> Any:
        pytest.fail("an empty run started a Spark session")

    monkeypatch.setattr("syphon.app.services.build_spark_session", no_session)
    conf = str(tmp_path / "syphon.yaml")
    repair = ["--set", "weight:long=typed_properties['n'].int * 100"]
    assert main(["run", "--config", conf, "--source", "redrive", *repair]) == 0
    assert ": empty" in capsys.readouterr().out


def test_a_repair_that_makes_a_dead_letter_invalid_ends_the_run_that_first_leaves_it_partial(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dead letter an earlier run left only because its send failed was never reported
    as waiting: the run whose repair makes it invalid is the first to leave it for the
    operator, and ends partial (exit 5) with a fix line; the next such run keeps it."""
    dead_letter(
        pair, "orders", [message("b-1", "k1", "contoso", n=7), message("b-2", "k2", "c", n=1)]
    )
    conf = command_config(pair, spark, tmp_path, monkeypatch, extra=SOURCES)
    base = ["run", "--config", conf, "--source", "redrive"]
    pair.primary.broker.set_fault("orders", sends_left=0)  # probes answer, sends fail
    assert main([*base, "--run-id", "failing"]) == 5
    assert dead_letters(pair, "orders") == ["b-1", "b-2"]
    pair.primary.broker.clear_faults()
    capsys.readouterr()
    # a byte holds 100, not 700: b-1 is invalid and newly waits for the operator
    repair = ["--set", "weight:byte=typed_properties['n'].int * 100"]
    assert main([*base, "--run-id", "first", *repair]) == 5
    out = capsys.readouterr().out
    assert "1 dead letters wait for the operator (0 of them since an earlier run)" in out
    assert "\nfix: " in out
    assert dead_letters(pair, "orders") == ["b-1"]
    # the same repair again: told once, kept by the operator
    assert main([*base, "--run-id", "again", *repair]) == 0
    assert dead_letters(pair, "orders") == ["b-1"]
