import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from syphon.app.cli import main

ROOT = Path(__file__).resolve().parents[2]
SYPHON = Path(sys.executable).parent / "syphon"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SYPHON), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_help_lists_every_command() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ["config", "plan", "run", "replay", "status", "provision"]:
        assert command in result.stdout


def test_replay_needs_a_run_id_before_anything_else(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["replay"])
    assert info.value.code == 2
    assert "--run-id" in capsys.readouterr().err
    monkeypatch.delenv("SYPHON_SECONDARY_CONNECTION_STRING", raising=False)
    assert main(["replay", "--run-id", "r1"]) == 2  # then the secrets, before Spark
    assert "SYPHON_SECONDARY_CONNECTION_STRING" in capsys.readouterr().err


def test_config_prints_references_and_never_the_secret() -> None:
    secret = "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=SAS_KEY_VALUE"
    result = run(
        "config",
        "--config",
        str(ROOT / "conf" / "example.yaml"),
        env={"SYPHON_SECONDARY_CONNECTION_STRING": secret},
    )
    assert result.returncode == 0, result.stderr
    printed = yaml.safe_load(result.stdout)
    assert printed["secondary"]["connection_string"] == {
        "env": "SYPHON_SECONDARY_CONNECTION_STRING",
        "scope": None,
        "key": None,
    }
    assert "SAS_KEY_VALUE" not in result.stdout + result.stderr


def test_a_bad_config_is_one_line_naming_the_key_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "conf" / "example.yaml").read_text() + "\nextra: 1\n")
    result = run("config", "--config", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == f"syphon config: {bad}: extra: unknown key " + (
        "(known: secondary, primaries, backlog, spark, audit, run, logging)"
    )


def test_the_spark_submit_entry_is_the_same_command() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SYPHON_SECONDARY_CONNECTION_STRING"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "syphon_submit.py"), "run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("syphon run: ")
    assert "SYPHON_SECONDARY_CONNECTION_STRING" in result.stderr


def test_plan_checks_its_secrets_before_starting_spark(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SYPHON_SECONDARY_CONNECTION_STRING", raising=False)
    for command in (["plan"], ["run"]):
        assert main(command) == 2
        assert "SYPHON_SECONDARY_CONNECTION_STRING" in capsys.readouterr().err


def test_an_unset_secret_is_named_by_its_key_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "aad.yaml"
    conf.write_text(
        """
secondary:
  namespace: contoso-secondary
  connection_string: {env: SECONDARY_CS_FOR_THIS_TEST}
primaries:
  - namespace: contoso
    credential: {type: service_principal, client_id: app, tenant_id: t,
                 client_secret: {env: SP_SECRET_FOR_THIS_TEST}}
""",
        encoding="utf-8",
    )
    monkeypatch.setenv("SECONDARY_CS_FOR_THIS_TEST", "Endpoint=sb://x/;SharedAccessKey=k")
    monkeypatch.delenv("SP_SECRET_FOR_THIS_TEST", raising=False)
    assert main(["run", "--config", str(conf)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"syphon run: {conf}: primaries.0.credential.client_secret: "
        "environment variable SP_SECRET_FOR_THIS_TEST is not set"
    )
