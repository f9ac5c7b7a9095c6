"""``audit.path`` with its storage settings, secrets read once at the entry point."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from syphon.core.config import AuditConfig, CredentialConfig, SecretRef, StorageConfig
from syphon.core.errors import SecretError
from syphon.core.storage_uri import parse_storage_path
from syphon.servicebus.access import new_credential
from syphon.servicebus.secrets import DbutilsGet, resolve_secret
from syphon.store.location import STORAGE_SCOPE, CachedToken, Location, account_option

#: Makes an azure-identity credential from its config and client secret (the namespaces'
#: :func:`~syphon.servicebus.access.new_credential`; tests stand in for Azure AD).
CredentialFactory = Callable[[CredentialConfig, "str | None"], Any]


def resolve_location(
    audit: AuditConfig,
    dbutils_get: DbutilsGet | None = None,
    environ: Mapping[str, str] | None = None,
    credential_factory: CredentialFactory = new_credential,
) -> Location:
    """``audit.path`` as a :class:`~syphon.store.location.Location` with its storage
    options: the account key or SAS read from their references, or, with an Azure AD
    credential, a token for storage asked for when needed (and again near its expiry).

    Raises:
        SecretError: a storage secret is unset (the message names the config key and
            where it was looked for, never a value).
    """
    parsed = parse_storage_path(audit.path)
    shown = parsed.uri if parsed.local else audit.path.strip().rstrip("/")
    options = account_option(parsed)
    storage = audit.storage
    if storage is None:
        return Location(parsed.uri, shown, options)

    def secret(ref: SecretRef, name: str) -> str:
        try:
            return resolve_secret(ref, environ, dbutils_get)
        except SecretError as exc:
            raise SecretError(f"audit.storage.{name}: {exc}") from None

    options.update(_options(storage, secret))
    token = None
    spec = storage.credential
    if spec is not None:
        client_secret = None
        if spec.client_secret is not None:
            client_secret = secret(spec.client_secret, "credential.client_secret")
        credential = credential_factory(spec, client_secret)
        token = CachedToken(lambda: credential.get_token(STORAGE_SCOPE))
    return Location(parsed.uri, shown, options, token)


def _options(storage: StorageConfig, secret: Callable[[SecretRef, str], str]) -> dict[str, str]:
    """delta-rs / object_store storage options (their ``azure_storage_*`` names)."""
    options: dict[str, str] = {}
    for key, value in storage.options.items():
        options[key] = value if isinstance(value, str) else secret(value, f"options.{key}")
    if storage.account is not None:
        options["azure_storage_account_name"] = storage.account
    if storage.account_key is not None:
        options["azure_storage_account_key"] = secret(storage.account_key, "account_key")
    if storage.sas_token is not None:
        options["azure_storage_sas_key"] = secret(storage.sas_token, "sas_token").lstrip("?")
    if storage.endpoint is not None:
        options["azure_storage_endpoint"] = storage.endpoint.rstrip("/")
        if storage.endpoint.startswith("http://"):
            options["allow_http"] = "true"
    return options
