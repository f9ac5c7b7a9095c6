"""Errors a user can act on: one line naming the fix, and an exit code of its own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from syphon.app.cli import main
from syphon.job.run import EXIT_UNREACHABLE

pytestmark = pytest.mark.timeout(120)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_secondary_names_the_fix_and_exits_7_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    key = "k3y-that-must-not-show"
    monkeypatch.setenv("GONE_CS", f"Endpoint=sb://127.0.0.1:{port}/;"
                       f"SharedAccessKeyName=root;SharedAccessKey={key}")  # fmt: skip
    conf = tmp_path / "gone.yaml"
    conf.write_text(
        f"""
secondary:
  namespace: gone-secondary
  connection_string: {{env: GONE_CS}}
  management_endpoint: "127.0.0.1:{port}"
primaries:
  - namespace: gone-primary
    connection_string: {{env: GONE_CS}}
audit:
  path: "{tmp_path / "delta"}"
""",
        encoding="utf-8",
    )
    monkeypatch.setattr(
        "syphon.app.spark.build_spark_session",
        lambda *_: pytest.fail("Spark started for a run that could not discover anything"),
    )
    code = main(["run", "--config", str(conf)])
    out, err = capsys.readouterr()
    assert code == EXIT_UNREACHABLE, out + err
    assert ": failed (ServiceRequestError)" in out
    fix = [line for line in out.splitlines() if line.startswith("fix: ")]
    assert fix == [
        "fix: the secondary namespace gone-secondary cannot be reached: check the Endpoint "
        "of its connection string (or management_endpoint), DNS, the network and the firewall"
    ]
    assert key not in out + err
