import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from syphon.app.cli import main
from syphon.core.errors import ExitCode, action_of

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
    assert result.stderr.strip().splitlines() == [
        f"syphon config: {bad}: extra: unknown key "
        "(known: secondary, primaries, backlog, spark, audit, run, replay, logging, sources)",
        f"fix: {action_of(ExitCode.CONFIG)}",  # every exit but 0 names a fix
    ]


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
    monkeypatch.setenv(
        "SECONDARY_CS_FOR_THIS_TEST", "Endpoint=sb://x/;SharedAccessKeyName=n;SharedAccessKey=k"
    )
    monkeypatch.delenv("SP_SECRET_FOR_THIS_TEST", raising=False)
    assert main(["run", "--config", str(conf)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"syphon run: {conf}: primaries.0.credential.client_secret: "
        "environment variable SP_SECRET_FOR_THIS_TEST is not set",
        f"fix: {action_of(ExitCode.CONFIG)}",
    ]


BARE = """
secondary:
  namespace: contoso-secondary
  connection_string: {env: CLI_TEST_SECONDARY}
primaries:
  - namespace: contoso
    connection_string: {env: CLI_TEST_SECONDARY}
"""


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not a connection string", "an item is not key=value"),
        ("SharedAccessKeyName=n;SharedAccessKey=k", "it has no Endpoint"),
        ("Endpoint=https://x/;SharedAccessKeyName=n;SharedAccessKey=k", "not sb://<host>/"),
        ("Endpoint=sb://x/;SharedAccessKeyName=n", "neither SharedAccessKeyName and"),
    ],
)
def test_a_malformed_connection_string_is_a_config_error_naming_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
    problem: str,
) -> None:
    conf = tmp_path / "bad.yaml"
    conf.write_text(BARE, encoding="utf-8")
    monkeypatch.setenv("CLI_TEST_SECONDARY", value)
    assert main(["run", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"syphon run: {conf}: secondary.connection_string: environment variable "
        "CLI_TEST_SECONDARY does not hold a Service Bus connection string: "
    )
    assert problem in err
    assert value not in err


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("fs.azure.account.key.acct.dfs.core.windows.net", "c2VjcmV0LWtleQ=="),
        ("fs.azure.account.oauth2.client.secret", "s3cr3t"),
        ("spark.hadoop.javax.jdo.option.ConnectionPassword", "hunter2"),
        ("spark.some.setting", "DefaultEndpointsProtocol=https;AccountKey=abc"),
        ("spark.other.setting", "https://a.blob.core.windows.net/c?sv=2024-01-01&sig=abc"),
    ],
)
def test_a_literal_secret_in_spark_conf_is_refused_and_never_printed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setting: str,
    value: str,
) -> None:
    conf = tmp_path / "spark.yaml"
    conf.write_text(BARE + f'spark:\n  conf:\n    {setting}: "{value}"\n', encoding="utf-8")
    monkeypatch.setenv(
        "CLI_TEST_SECONDARY", "Endpoint=sb://x/;SharedAccessKeyName=n;SharedAccessKey=k"
    )
    for command in ("config", "run"):
        assert main([command, "--config", str(conf)]) == 2
        out, err = capsys.readouterr()
        assert f"spark.conf.{setting}: looks like a literal secret" in err
        assert value not in out + err


def test_a_spark_setting_can_reference_its_secret(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from syphon.app.spark import spark_settings
    from syphon.core.configfile import load_config

    conf = tmp_path / "ref.yaml"
    setting = "fs.azure.account.key.acct.dfs.core.windows.net"
    conf.write_text(
        BARE + f"spark:\n  conf:\n    {setting}: {{env: STORAGE_KEY}}\n"
        "    spark.sql.shuffle.partitions: 8\n",
        encoding="utf-8",
    )
    assert main(["config", "--config", str(conf)]) == 0
    assert "STORAGE_KEY" in capsys.readouterr().out
    config = load_config(conf, environ={})
    with pytest.raises(Exception, match=f"spark.conf.{setting}: environment variable"):
        spark_settings(config.spark, environ={})
    settings = spark_settings(config.spark, environ={"STORAGE_KEY": "k3y"})
    assert settings[setting] == "k3y"
    assert settings["spark.sql.shuffle.partitions"] == "8"


def test_the_readme_and_the_help_show_the_one_exit_code_table() -> None:
    from syphon.core.errors import EXIT_CODES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| ") and line[2].isdigit()]
    table = [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in rows]
    assert table == [(str(d.code.value), d.meaning, d.action) for d in EXIT_CODES]
    help_text = run("run", "--help").stdout
    for doc in EXIT_CODES:
        assert f"{doc.code.value} {doc.code.name.lower().replace('_', ' ')}" in " ".join(
            help_text.split()
        )


def test_wave_bounds_are_read_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--until is an ISO 8601 time (no zone: UTC) or a duration from now; a malformed one
    and --max-waves below 1 exit 2 before the config is read."""
    from datetime import datetime, timedelta, timezone

    from syphon.app.cliargs import until as _until

    now = datetime(2026, 11, 26, 8, 0, tzinfo=timezone.utc)
    assert _until(None, now) is None
    assert _until("+90m", now) == now + timedelta(minutes=90)
    assert _until("+2h", now) == now + timedelta(hours=2)
    assert _until("+45s", now) == now + timedelta(seconds=45)
    assert _until("2026-11-26T18:00", now) == datetime(2026, 11, 26, 18, tzinfo=timezone.utc)
    for args, named in ((["--until", "tonight"], "--until"), (["--max-waves", "0"], "--max-waves")):
        code = main(["run", "--config", "/nonexistent/syphon.yaml", *args])
        assert code == 2
        assert named in capsys.readouterr().err
