"""audit.path as a URI and audit.storage: what a config may say, what syphon makes of it,
and that secrets stay references until the entry point reads them.

Azure AD cannot run here: its credential is the one thing stood in for (a fake with the
azure-identity ``get_token`` signature), to show which token syphon asks for and when."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from syphon.app.storage import resolve_location
from syphon.core.config import AuditConfig, CredentialConfig, SecretRef, StorageConfig
from syphon.core.configfile import load_config
from syphon.core.errors import ConfigError, SecretError
from syphon.core.storage_uri import StorageUriError, parse_storage_path
from syphon.store.location import STORAGE_SCOPE, as_location

MINIMAL = """
secondary:
  namespace: contoso-secondary
  connection_string: {env: SECONDARY_CS}
primaries:
  - namespace: contoso
    connection_string: {env: PRIMARY_CS}
audit:
"""


def audit(tmp_path: Path, lines: str) -> AuditConfig:
    path = tmp_path / "syphon.yaml"
    path.write_text(MINIMAL + lines)
    return load_config(path, environ={}).audit


@pytest.mark.parametrize(
    ("path", "uri", "account"),
    [
        (
            "abfss://audit@contoso.dfs.core.windows.net/syphon/",
            "abfss://audit@contoso.dfs.core.windows.net/syphon",
            "contoso",
        ),
        (
            "abfs://audit@contoso.dfs.core.windows.net",
            "abfs://audit@contoso.dfs.core.windows.net",
            "contoso",
        ),
        ("wasbs://audit@contoso.blob.core.windows.net/a/b", "az://audit/a/b", "contoso"),
        ("wasb://audit@contoso.blob.core.windows.net/a", "az://audit/a", "contoso"),
        ("az://audit/syphon", "az://audit/syphon", None),
        ("s3://bucket/syphon", "s3://bucket/syphon", None),
        ("gs://bucket/syphon", "gs://bucket/syphon", None),
    ],
)
def test_object_store_uris(path: str, uri: str, account: str | None) -> None:
    parsed = parse_storage_path(path)
    assert (parsed.uri, parsed.account, parsed.local) == (uri, account, False)
    assert parsed.azure == path.startswith(("abfs", "wasb", "az"))


def test_local_paths_and_file_uris_are_absolute_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_storage_path(".syphon/delta").uri == str(tmp_path / ".syphon" / "delta")
    assert parse_storage_path(f"file://{tmp_path}/a%20b").uri == str(tmp_path / "a b")
    assert parse_storage_path("file:///srv/audit/").local


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("hdfs://nn/audit", "scheme hdfs:// is not one syphon writes to"),
        ("abfss://contoso.dfs.core.windows.net/a", "needs a container and an account"),
        ("wasbs://audit@contoso.dfs.core.windows.net/a", "needs a container and an account"),
        ("az://audit/a?sv=2021&sig=x", "SAS token goes in audit.storage.sas_token"),
        ("az:///a", "az:// needs a container"),
        ("s3:///a", "s3:// needs a bucket"),
        ("file://otherhost/a", "names another host"),
    ],
)
def test_paths_syphon_cannot_use_are_refused_with_the_reason(path: str, reason: str) -> None:
    with pytest.raises(StorageUriError, match=reason.replace("?", r"\?")):
        parse_storage_path(path)


def test_the_storage_section_reads_references(tmp_path: Path) -> None:
    config = audit(
        tmp_path,
        """  path: abfss://audit@contoso.dfs.core.windows.net/syphon
  storage:
    account_key: {env: STORAGE_KEY}
    endpoint: http://127.0.0.1:10000/contoso
    options: {timeout: 30s, azure_storage_client_secret: {scope: s, key: k}}
""",
    )
    assert config.storage == StorageConfig(
        account_key=SecretRef(env="STORAGE_KEY"),
        endpoint="http://127.0.0.1:10000/contoso",
        options={"timeout": "30s", "azure_storage_client_secret": SecretRef(scope="s", key="k")},
    )
    managed = audit(
        tmp_path,
        """  path: az://audit/x
  storage: {credential: {type: managed_identity, client_id: abc}, account: contoso}
""",
    )
    assert managed.storage == StorageConfig(
        credential=CredentialConfig("managed_identity", "abc"), account="contoso"
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("  path: hdfs://x/y\n", "audit.path: scheme hdfs://"),
        (
            "  path: az://c/p\n  storage: {account_key: abc123==}\n",
            "audit.storage.account_key: secrets are references",
        ),
        (
            "  path: az://c/p\n  storage: {account_key: {env: K}, sas_token: {env: S}}\n",
            "give one of account_key, sas_token or credential",
        ),
        (
            "  path: s3://b/p\n  storage: {account_key: {env: K}}\n",
            "audit.storage.account_key: is for Azure storage",
        ),
        (
            "  path: .syphon/delta\n  storage: {account_key: {env: K}}\n",
            "audit.storage: is for an audit.path on object storage",
        ),
        (
            "  path: az://c/p\n  storage: {endpoint: 127.0.0.1:10000}\n",
            "audit.storage.endpoint: must be an http(s):// URL",
        ),
        (
            "  path: s3://b/p\n  storage: {options: {aws_secret_access_key: abc}}\n",
            "audit.storage.options.aws_secret_access_key: looks like a literal secret",
        ),
        (
            "  path: az://c/p\n  storage: {options: {x: 'sv=2021-08-06&ss=b&sig=abc'}}\n",
            "audit.storage.options.x: looks like a literal secret",
        ),
        ("  path: az://c/p\n  storage: {bucket: b}\n", "audit.storage.bucket: unknown key"),
    ],
)
def test_storage_settings_syphon_cannot_use_are_refused(
    tmp_path: Path, lines: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        audit(tmp_path, lines)


def test_the_example_nulls_on_a_local_path_are_no_storage(tmp_path: Path) -> None:
    config = audit(tmp_path, "  path: x\n  storage: {account_key: null, options: {}}\n")
    assert config.storage is None


def test_secrets_are_read_at_the_entry_point_and_never_shown() -> None:
    config = AuditConfig(
        path="wasbs://audit@contoso.blob.core.windows.net/syphon",
        storage=StorageConfig(
            sas_token=SecretRef(env="SAS"),
            endpoint="http://127.0.0.1:1/contoso",
            options={"azure_storage_client_secret": SecretRef(env="OTHER"), "timeout": "9s"},
        ),
    )
    environ = {"SAS": "?sv=2021-08-06&sig=c2VjcmV0", "OTHER": "other-secret"}
    location = resolve_location(config, environ=environ)
    assert location.uri == "az://audit/syphon"
    assert location.shown == "wasbs://audit@contoso.blob.core.windows.net/syphon"
    assert location.storage_options() == {
        "azure_storage_account_name": "contoso",
        "azure_storage_sas_key": "sv=2021-08-06&sig=c2VjcmV0",
        "azure_storage_endpoint": "http://127.0.0.1:1/contoso",
        "allow_http": "true",
        "azure_storage_client_secret": "other-secret",
        "timeout": "9s",
    }
    shown = repr(location) + repr(location.child("reports")) + repr(location.for_tasks())
    assert "c2VjcmV0" not in shown
    assert "other-secret" not in shown
    with pytest.raises(SecretError, match=r"audit.storage.sas_token: environment variable SAS"):
        resolve_location(config, environ={"OTHER": "x"})


class FakeCredential:
    """Stands in for an azure-identity credential (Azure AD cannot run here)."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.scopes: list[str] = []

    def get_token(self, scope: str) -> Any:
        import time

        self.scopes.append(scope)
        return SimpleNamespace(
            token=f"token-{len(self.scopes)}", expires_on=int(time.time() + self.lifetime)
        )


@pytest.mark.parametrize(
    ("lifetime", "tokens"), [(3600, ["token-1"] * 3), (60, ["token-1", "token-2", "token-3"])]
)
def test_azure_ad_asks_the_credential_for_a_storage_token_again_near_its_expiry(
    lifetime: float, tokens: list[str]
) -> None:
    fake = FakeCredential(lifetime)
    made: list[tuple[Any, Any]] = []

    def factory(spec: CredentialConfig, secret: str | None) -> FakeCredential:
        made.append((spec, secret))
        return fake

    spec = CredentialConfig("service_principal", "app", "tenant", SecretRef(env="CLIENT_SECRET"))
    config = AuditConfig(
        path="abfss://a@contoso.dfs.core.windows.net/s", storage=StorageConfig(credential=spec)
    )
    location = resolve_location(config, environ={"CLIENT_SECRET": "cs"}, credential_factory=factory)
    assert made == [(spec, "cs")]
    seen = [location.storage_options()["bearer_token"] for _ in range(2)]
    task_side = location.for_tasks()
    seen.append(task_side.storage_options()["bearer_token"])
    assert seen == tokens
    assert set(fake.scopes) == {STORAGE_SCOPE}
    assert "azure_storage_account_key" not in location.storage_options()
    assert pickle.loads(pickle.dumps(task_side)).options == task_side.options  # shipped to tasks
    assert "token-" not in repr(location) + repr(task_side)


def test_a_plain_path_given_as_text_becomes_a_location(tmp_path: Path) -> None:
    local = as_location(tmp_path / "audit")
    assert (local.uri, local.shown, local.local) == ((str(tmp_path / "audit"),) * 2 + (True,))
    assert local.child("reports", "r.html").uri == os.path.join(
        str(tmp_path), "audit", "reports", "r.html"
    )
    blob = as_location("wasbs://c@acct.blob.core.windows.net/x")
    assert (blob.uri, blob.shown) == ("az://c/x", "wasbs://c@acct.blob.core.windows.net/x")
    assert blob.child("leases").shown == "wasbs://c@acct.blob.core.windows.net/x/leases"
    assert blob.options == {"azure_storage_account_name": "acct"}
