"""``syphon --log-format json run``: every record a JSON line with the run id, and no
key, connection string or body in the logs, the printed summary, the ledger or the audit."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from servicebus_emulator.server import EMULATOR_KEY
from support.paired_env import Pair, job_config, send_raw
from syphon.app.cli import main
from syphon.core.errors import ExitCode
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(300)


def test_json_logs_carry_the_run_id_and_nothing_secret_is_written_anywhere(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bodies = [f"BODY-{uuid.uuid4().hex}".encode() for _ in range(6)]
    for i, body in enumerate(bodies):
        dest = "orders" if i < 5 else "nowhere"  # one invalid: its reason is logged too
        send_raw(
            pair, i % 3, [to_backlog_message(ServiceBusMessage(body, message_id=f"s{i}"), dest)]
        )
    job_config(pair, tmp_path, monkeypatch)

    code = main(
        [
            "--log-format",
            "json",
            "--log-level",
            "INFO",
            "run",
            "--config",
            str(tmp_path / "syphon.yaml"),
            "--run-id",
            "logged-run-1",
        ]
    )
    out, err = capsys.readouterr()
    assert code == ExitCode.MISSING_DESTINATION, err[-2000:]  # s5's destination does not exist

    records = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert records, "the run logged nothing"
    assert {r["run_id"] for r in records} == {"logged-run-1"}
    assert any(r["logger"].startswith("syphon.") for r in records)
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)

    runs = read_table(tmp_path / "delta" / RUNS_TABLE).to_pylist()
    assert "done" in {r["status"] for r in runs if r["run_id"] == "logged-run-1"}
    assert list((tmp_path / "delta" / "reports").glob("*.html")), "the scan must see the report"
    secrets = [EMULATOR_KEY, pair.secondary.connection_string, pair.primary.connection_string]
    for text in (out, err):
        for secret in secrets:
            assert secret not in text
        for body in bodies:
            assert body.decode() not in text
    for path in (tmp_path / "delta").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in secrets:
                assert secret.encode() not in data, path
            for body in bodies:
                assert body not in data, path
