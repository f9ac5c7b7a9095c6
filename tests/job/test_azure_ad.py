"""``syphon run`` with Azure AD instead of connection strings: a managed identity and
fully-qualified namespaces, through the real azure-identity and azure-servicebus code.

Azure AD itself cannot run here, so it is the one thing mocked: a local HTTP server plays
the App Service managed-identity endpoint (``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER``, the
protocol ManagedIdentityCredential speaks) and hands out an opaque token. The local
Service Bus accepts any token but counts how clients authenticated, so the test proves
that every client (the discovery's management calls, the snapshot and settle tasks on the
Spark workers, the replay senders) used the bearer token and none a SAS."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import PRIMARY, Pair, job_config, send_raw
from syphon.core.errors import ExitCode
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.store.audit import AUDIT_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(300)

IDENTITY_HEADER = "local-identity-header"
TOKEN = "eyJ0eXAiOiJKV1QifQ.local-managed-identity-token.sig"  # opaque to every party here


class _Identity(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]

    def do_GET(self) -> None:  # the App Service managed identity protocol (2019-08-01)
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        self.requests.append({"query": query, "header": self.headers.get("X-IDENTITY-HEADER")})
        if self.headers.get("X-IDENTITY-HEADER") != IDENTITY_HEADER:
            status = 401
            answer = {"statusCode": 401, "message": "the identity header does not match"}
        else:
            status = 200
            answer = {
                "access_token": TOKEN,
                "expires_on": str(int(time.time()) + 3600),
                "resource": query.get("resource"),
                "token_type": "Bearer",
            }
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@pytest.fixture
def identity_endpoint(spark: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict]]:
    """The local managed-identity endpoint, in this process's environment and in the
    environment of the Spark workers (Python workers started for these variables)."""
    handler = type("Identity", (_Identity,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {
        "IDENTITY_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}/msi/token",
        "IDENTITY_HEADER": IDENTITY_HEADER,
    }
    # a fresh per-process credential cache: a credential reads its environment once
    monkeypatch.setattr("syphon.servicebus.access._credentials", {})
    workers = spark.sparkContext.environment
    before = {k: workers.get(k) for k in env}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
        workers[key] = value
    try:
        yield handler.requests
    finally:
        for key, value in before.items():
            if value is None:
                workers.pop(key, None)
            else:
                workers[key] = value
        server.shutdown()
        server.server_close()


def test_a_run_with_a_managed_identity_uses_bearer_tokens_only(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    identity_endpoint: list[dict],
    caplog: pytest.LogCaptureFixture,
) -> None:
    send_raw(pair, 0, [to_backlog_message(ServiceBusMessage(b"a", message_id="m1"), "orders")])
    send_raw(pair, 2, [to_backlog_message(ServiceBusMessage(b"b", message_id="m2"), "orders")])
    config = job_config(pair, tmp_path, monkeypatch, azure_ad="{type: managed_identity}")
    assert config.secondary.connection_string is None
    assert config.secondary.credential is not None
    assert config.secondary.credential.type == "managed_identity"
    for emulator in (pair.primary, pair.secondary):
        emulator.broker.auth_seen.clear()
    from syphon.app import services
    from syphon.core.sessions import SessionFit

    fits: list[SessionFit] = []

    def build(_conf: Any, _dbutils_get: Any, fit: SessionFit) -> Any:
        """Stands for build_spark_session: records the fit, returns the tests' session."""
        fits.append(fit)
        return spark

    monkeypatch.setattr(services, "build_spark_session", build)
    monkeypatch.setattr(services, "start_python_workers", lambda _session: None)

    result = services.run_with_report(services.build_context(config))

    assert result.status == "done", result
    assert result.exit_code == ExitCode.DONE
    # the session is told: a run in waves would keep its Python workers (each fresh
    # worker would fetch a token of its own, syphon.app.spark.WAVE_WORKER_CONF)
    assert [f.azure_ad for f in fits] == [True]
    orders = pair.primary.broker.entity("orders")
    assert sorted(str(m.message_id) for m in orders.messages.values()) == ["m1", "m2"]
    assert not pair.secondary.broker.entity(f"{PRIMARY}/x-servicebus-transfer/0").messages
    rows = read_table(Path(config.audit.path) / AUDIT_TABLE).to_pylist()
    assert {(r["message_id"], r["stage"], r["outcome"]) for r in rows} >= {
        ("m1", "replay", "sent"),
        ("m1", "settle", "completed"),
        ("m2", "replay", "sent"),
        ("m2", "settle", "completed"),
    }

    # every client asked the identity endpoint for a Service Bus token, and every
    # connection and management call presented it: no SAS anywhere
    assert identity_endpoint
    resources = {r["query"]["resource"].rstrip("/") for r in identity_endpoint}
    assert resources == {"https://servicebus.azure.net"}
    assert all(r["header"] == IDENTITY_HEADER for r in identity_endpoint)
    primary, secondary = pair.primary.broker.auth_seen, pair.secondary.broker.auth_seen
    # primary: destination look-ups (HTTP) and replay senders; secondary: discovery
    # (HTTP), snapshot and settle
    assert set(primary) == {"amqp:jwt", "http:Bearer"}
    assert set(secondary) == {"amqp:jwt", "http:Bearer"}
    assert TOKEN not in caplog.text


def test_an_identity_azure_ad_refuses_names_the_fix_and_exits_3_before_spark(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    identity_endpoint: list[dict],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from syphon.app.cli import main

    job_config(pair, tmp_path, monkeypatch, azure_ad="{type: managed_identity}")
    monkeypatch.setenv("IDENTITY_HEADER", "not-the-header")  # the endpoint answers 401
    monkeypatch.setattr(
        "syphon.app.services.build_spark_session",
        lambda *_: pytest.fail("Spark started for a run that could not discover anything"),
    )
    pair.secondary.broker.auth_seen.clear()  # the pair's provisioning used a SAS
    code = main(["run", "--config", str(tmp_path / "syphon.yaml")])
    out, err = capsys.readouterr()
    assert code == ExitCode.DENIED, out + err
    assert identity_endpoint  # azure-identity asked, and was refused
    fix = [line for line in out.splitlines() if line.startswith("fix: ")]
    assert fix == [
        "fix: the secondary namespace contoso-secondary got no Azure AD token or refused it "
        "(secondary.credential type managed_identity): check that azure-identity finds the "
        "identity on this machine and that it holds the Azure Service Bus Data Owner role on "
        "the namespace"
    ]
    assert not pair.secondary.broker.auth_seen  # nothing reached the namespace


def test_a_service_principal_secret_is_read_from_its_reference_and_never_shown(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The service principal path up to azure-identity (Azure AD's token endpoint is not
    reachable here): the secret comes from its environment reference into a
    ClientSecretCredential, and no repr of the config or the access shows it."""
    from azure.identity import ClientSecretCredential

    from syphon.core.configfile import load_config
    from syphon.servicebus.access import azure_credential, resolve_access

    secret = "sp-secret-" + "x" * 20
    monkeypatch.setenv("SP_SECRET", secret)
    path = tmp_path / "c.yaml"
    path.write_text(
        """
secondary:
  namespace: contoso-secondary
  credential: {type: service_principal, client_id: app-1, tenant_id: tenant-1,
               client_secret: {env: SP_SECRET}}
primaries:
  - namespace: contoso-primary
    credential: {type: default}
""",
        encoding="utf-8",
    )
    config = load_config(path, environ={})
    access = resolve_access(config.secondary, "secondary")
    assert access.client_secret == secret
    assert access.host == "contoso-secondary.servicebus.windows.net"
    credential = azure_credential(access)
    assert isinstance(credential, ClientSecretCredential)
    again = resolve_access(config.secondary, "secondary")
    assert azure_credential(again) is credential  # one per process
    for text in (repr(config), repr(access), repr(config.secondary)):
        assert secret not in text
