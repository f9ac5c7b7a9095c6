"""Every command's failure is one line that says what failed and where, then a line
naming the fix, and an exit code of its own: never a bare error class, never a
traceback. The audit of these tests is a Delta table whose log is not JSON (what a
tool other than syphon writing into ``audit.path`` leaves)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paired_env import Pair, job_config
from syphon.app.cli import main
from syphon.core.errors import ExitCode

pytestmark = pytest.mark.timeout(180)

#: Each command that reads or writes the audit, with what it needs besides the config.
COMMANDS = {
    "status": [],
    "plan": [],
    "run": [],
    "replay": ["--run-id", "20261126T000000Z-00000000"],
    "discard": ["--where", "true", "--reason", "tests"],
}


def broken_audit(pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config whose audit's ledger table has a log that is not JSON; its path."""
    config = job_config(pair, tmp_path, monkeypatch)
    log = Path(config.audit.path) / "runs" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{not json", encoding="utf-8")
    return Path(config.audit.path)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_that_cannot_read_its_audit_says_where_why_and_the_fix(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    audit = broken_audit(pair, tmp_path, monkeypatch)
    code = main([command, "--config", str(tmp_path / "syphon.yaml"), *COMMANDS[command]])
    out, err = capsys.readouterr()
    assert code == ExitCode.AUDIT_UNAVAILABLE, out + err
    said = [
        line
        for line in (out + err).splitlines()
        if line.startswith((f"syphon {command}: ", "run "))
    ]
    assert len(said) == 1, out + err
    # where (the audit's path) and why (the cause's class), not only syphon's error class
    assert str(audit) in said[0], said[0]
    assert "DeltaError" in said[0], said[0]
    fixes = [line for line in (out + err).splitlines() if line.startswith("fix: ")]
    assert fixes == [
        f"fix: audit.path ({audit}) holds a Delta table delta-rs cannot read: check that "
        "only syphon writes there and that its _delta_log is whole, or point audit.path "
        "at a new folder"
    ]
    assert "Traceback" not in out + err


def test_config_that_does_not_parse_says_where_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "syphon.yaml"
    bad.write_text("primaries: [\n", encoding="utf-8")
    code = main(["config", "--config", str(bad)])
    out, err = capsys.readouterr()
    assert code == ExitCode.CONFIG
    (line,) = [x for x in err.splitlines() if x.startswith("syphon config: ")]
    assert str(bad) in line
    assert "Traceback" not in out + err
