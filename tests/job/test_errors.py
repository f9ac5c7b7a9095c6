"""Errors a user can act on: one line naming the fix, and an exit code of its own."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from support.azurite import KEY_ENV, BlobAudit
from support.paired_env import PRIMARY, Pair, job_config, send_raw
from syphon.app.cli import main
from syphon.core.errors import ExitCode
from syphon.servicebus.backlog_messages import to_backlog_message

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
    monkeypatch.setenv(
        "GONE_CS", f"Endpoint=sb://127.0.0.1:{port}/;SharedAccessKeyName=root;SharedAccessKey={key}"
    )
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
    code, out, err = run_without_spark(
        conf, monkeypatch, capsys, "that could not discover anything"
    )
    assert code == ExitCode.UNREACHABLE, out + err
    # the error's own words say what failed and where, not only its class
    assert ": failed (ServiceRequestError: " in out
    assert f"port={port}" in out or f"127.0.0.1:{port}" in out
    assert fix_lines(out) == [
        f"fix: the secondary namespace gone-secondary cannot be reached at 127.0.0.1:{port}: "
        "check the Endpoint of secondary.connection_string or secondary.management_endpoint "
        f"(127.0.0.1:{port}), DNS, the network and the firewall"
    ]
    assert key not in out + err


def park_one(pair: Pair) -> None:
    send_raw(pair, 0, [to_backlog_message(ServiceBusMessage(b"x", message_id="m1"), "orders")])


def fix_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("fix: ")]


def run_without_spark(
    conf: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], why: str
) -> tuple[int, str, str]:
    """``syphon run`` on ``conf`` with Spark forbidden (the test fails if the run starts it,
    ``why`` saying what should have stopped it first); (exit code, stdout, stderr)."""
    monkeypatch.setattr(
        "syphon.app.services.build_spark_session",
        lambda *_: pytest.fail(f"Spark started for a run {why}"),
    )
    code = main(["run", "--config", str(conf)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("where", ["under_a_file", "under_proc"])
def test_an_audit_path_that_cannot_be_written_exits_9_with_a_fix_naming_it(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    park_one(pair)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    path = str(blocker / "delta") if where == "under_a_file" else "/proc/syphon-audit"
    config = job_config(pair, tmp_path, monkeypatch)
    text = (tmp_path / "syphon.yaml").read_text(encoding="utf-8")
    (tmp_path / "syphon.yaml").write_text(text.replace(config.audit.path, path), "utf-8")
    code, out, err = run_without_spark(
        tmp_path / "syphon.yaml", monkeypatch, capsys, "that cannot keep its audit"
    )
    assert code == ExitCode.AUDIT_UNAVAILABLE, out + err
    assert f": failed (AuditStoreError: the audit at {path} cannot " in out  # what and where
    assert fix_lines(out) == [
        f"fix: audit.path ({path}) cannot be written: point it at a folder or URI this "
        "machine and every executor can write, or fix its permissions"
    ]
    assert "Traceback" not in out + err
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").messages) == 1


def test_a_wrong_storage_key_exits_9_with_a_fix_before_spark_and_never_shows_a_key(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    blob_audit: BlobAudit,
) -> None:
    """The audit on Blob storage (Azurite) refuses a key that is not the account's."""
    park_one(pair)
    job_config(pair, tmp_path, monkeypatch, audit=blob_audit.audit_yaml("abfss"))
    wrong = "d3Jvbmcta2V5LW11c3Qtbm90LXNob3c="
    monkeypatch.setenv(KEY_ENV, wrong)
    code, out, err = run_without_spark(
        tmp_path / "syphon.yaml", monkeypatch, capsys, "that cannot keep its audit"
    )
    assert code == ExitCode.AUDIT_UNAVAILABLE, out + err
    uri = blob_audit.uri("abfss")
    assert fix_lines(out) == [
        f"fix: audit.path ({uri}) cannot be reached: check that its container or bucket "
        "exists and that audit.storage's account key, SAS or Azure AD identity may read, "
        "write and list it (and audit.storage.endpoint, if set)"
    ]
    assert wrong not in out + err
    assert blob_audit.azurite.key not in out + err
    assert "Traceback" not in out + err
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").messages) == 1


def test_without_java_a_run_exits_4_and_says_how_to_install_it(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    park_one(pair)
    job_config(pair, tmp_path, monkeypatch)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    code = main(["run", "--config", str(tmp_path / "syphon.yaml")])
    out, err = capsys.readouterr()
    assert code == ExitCode.NO_SPARK, out + err
    assert ": failed (SparkSetupError: Java is not installed)" in out
    assert fix_lines(out) == [
        "fix: install a JRE 17 (Debian: apt-get install -y default-jre-headless) or set JAVA_HOME"
    ]


def test_namespaces_that_refuse_connections_exit_7_naming_the_secondary_and_its_host(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    park_one(pair)
    job_config(pair, tmp_path, monkeypatch)
    pair.primary.make_namespace_unavailable()
    pair.secondary.make_namespace_unavailable()  # the management APIs still answer
    code = main(["run", "--config", str(tmp_path / "syphon.yaml")])
    out, err = capsys.readouterr()
    assert code == ExitCode.UNREACHABLE, out + err
    host = f"{pair.secondary.host}:{pair.secondary.port}"
    assert fix_lines(out) == [
        f"fix: the secondary namespace contoso-secondary cannot be reached at {host}: check "
        "the Endpoint of secondary.connection_string or secondary.management_endpoint "
        f"({pair.secondary.admin_endpoint}), DNS, the network and the firewall"
    ]
    assert "PythonException" not in out
    assert pair.secondary.connection_string not in out + err


def test_a_wrong_key_for_the_secondary_exits_3_with_a_fix_before_spark(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The local Service Bus checks SAS signatures: a key that is not the namespace's is
    refused as the service refuses it, and the run says which key to check."""
    park_one(pair)
    job_config(pair, tmp_path, monkeypatch)
    wrong = "d3Jvbmcta2V5LW11c3Qtbm90LXNob3c="
    name = "RootManageSharedAccessKey"
    monkeypatch.setenv("PAIR_TEST_SECONDARY", pair.secondary.connection_string_for(name, wrong))
    code, out, err = run_without_spark(
        tmp_path / "syphon.yaml", monkeypatch, capsys, "whose secondary refused it"
    )
    assert code == ExitCode.DENIED, out + err
    assert fix_lines(out) == [
        "fix: the secondary namespace contoso-secondary refused the credentials: check the "
        "key name and key of secondary.connection_string (Manage and Listen rights)"
    ]
    assert wrong not in out + err
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").messages) == 1


WRONG_KEY = "d3Jvbmcta2V5LW11c3Qtbm90LXNob3c="


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (("listen-only", None), "whose primary holds no Send right"),
        (("RootManageSharedAccessKey", WRONG_KEY), "whose primary refused its key"),
    ],
)
def test_a_primary_that_refuses_the_credentials_exits_3_naming_it_before_spark(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    key: tuple[str, str | None],
    why: str,
) -> None:
    """A key without Send rights, or a wrong key: found at once, as the secondary's, not
    after Spark started and the whole backlog was peeked (with the management API's
    refusal as a warning on the way)."""
    park_one(pair)
    job_config(pair, tmp_path, monkeypatch)
    name, secret = key
    connection = (
        pair.primary.connection_string_for(name)
        if secret is None
        else pair.primary.connection_string_for(name, secret)
    )
    monkeypatch.setenv("PAIR_TEST_PRIMARY", connection)
    code, out, err = run_without_spark(tmp_path / "syphon.yaml", monkeypatch, capsys, why)
    assert code == ExitCode.DENIED, out + err
    assert fix_lines(out) == [
        f"fix: the primary namespace {PRIMARY} refused the credentials: check the key name "
        "and key of primaries.0.connection_string (Send rights, and Manage to read the "
        "destinations' settings)"
    ]
    assert "did not answer" not in caplog.text  # no management listing was tried
    assert WRONG_KEY not in out + err + caplog.text
    assert pair.primary.broker.entity("orders").messages == {}
    assert len(pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").messages) == 1
