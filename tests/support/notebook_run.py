"""The rerun-after-outage notebook run headless (papermill, a real Python kernel) against
the local Service Bus, and what its cells must show: status, plan, verdicts, spread
groups, replay, and one message followed through the audit. Run on a classic local
session (tests/job/test_notebook.py) and as a Spark Connect client
(tests/job/test_connect_runs.py)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator.server import EMULATOR_KEY
from support.notebook_sync import IPYNB
from support.paired_env import PRIMARY, Pair, job_config, send_raw
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE, RUNS_TABLE
from syphon.store.delta import read_table


def outputs(cell: Any) -> str:
    """A cell's printed text and the plain-text form of its value."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stdout":
            parts.append(out["text"])
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def check_the_notebook(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remote: str | None = None
) -> None:
    """Runs the notebook and checks every cell's output and what it left in the audit;
    with ``remote`` (a Spark Connect server's address) its kernel is that server's client,
    as a serverless notebook is."""
    import papermill

    session = "classic" if remote is None else "connect"
    if remote is not None:
        monkeypatch.setenv("SPARK_REMOTE", remote)
        monkeypatch.setenv("SYPHON__SPARK__MASTER", "null")

    bodies = [f"BODY-{uuid.uuid4().hex}".encode() for _ in range(4)]

    def msg(i: int, dest: str, mid: str, **keys: Any) -> Any:
        return to_backlog_message(ServiceBusMessage(bodies[i], message_id=mid, **keys), dest)

    send_raw(pair, 0, [msg(0, "orders", "o1", partition_key="k1")])
    send_raw(
        pair,
        1,
        [msg(1, "orders", "o2", partition_key="k1"), msg(2, "sessions", "s1", session_id="a")],
    )
    send_raw(pair, 2, [msg(3, "nowhere", "n1")])
    job_config(pair, tmp_path, monkeypatch)
    out = tmp_path / "ran.ipynb"

    papermill.execute_notebook(
        str(IPYNB),
        str(out),
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
        parameters={
            "config": str(tmp_path / "syphon.yaml"),
            "message_id": "o1",
            "destinations": f"{PRIMARY}/orders",
            "replay": "yes",
        },
    )

    import nbformat

    ran = nbformat.read(out, as_version=4)
    code = [c for c in ran.cells if c.cell_type == "code"]
    status, plan, verdicts, spread, replay, audit = (outputs(c) for c in code[-6:])
    said = "".join(
        o.get("text", "") for c in code for o in c.get("outputs", []) if o.get("name") == "stderr"
    )
    assert ("session ready (master platform)" in said) == (session == "connect"), said
    assert f"{PRIMARY}/x-servicebus-transfer/0" in status
    assert "(no runs recorded)" in status
    assert "4 messages in 3 of" in plan
    assert "replay" in verdicts
    assert "orders" in verdicts
    assert "sessions" not in verdicts  # the destinations parameter narrows what is shown
    assert "k1" in spread
    assert "orders" in spread
    assert ": done" in replay
    for stage in ("plan", "replay", "settle"):
        assert stage in audit
    # the pandas table of the audit cell: o1's three rows (plan, replay, settle)
    table = code[-1]["outputs"][-1]["data"]["text/html"]
    assert table.count("<td>o1</td>") == 3

    runs = read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
    # one run, planned by the plan cell and carried to done by the replay cell
    runs.sort(key=lambda r: r["recorded_at"])
    assert len({r["run_id"] for r in runs}) == 1
    assert [r["status"] for r in runs] == ["planned", "replaying", "replayed", "done"]
    rows = read_table(tmp_path / "delta" / AUDIT_TABLE).to_pylist()
    o1 = {(r["stage"], r["outcome"]) for r in rows if r["message_id"] == "o1"}
    assert o1 == {("plan", "planned"), ("replay", "sent"), ("settle", "completed")}
    text = out.read_text(encoding="utf-8")
    for secret in (EMULATOR_KEY, pair.secondary.connection_string, pair.primary.connection_string):
        assert secret not in text
    for body in bodies:
        assert body.decode() not in text
