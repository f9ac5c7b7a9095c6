"""Service Bus clients built from the configuration.

A namespace is reached with a connection string or with an Azure AD credential
(azure-identity). Secrets are resolved from their references only here, into an
:class:`Access` that Spark tasks receive pickled, and are never logged, printed or stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from syphon.core.config import CredentialConfig, NamespaceConfig, resolve_secret
from syphon.core.errors import ConfigError

DbutilsGet = Callable[[str, str], str]

#: Hosts on which the AMQP port has no TLS (the local Service Bus), as the SDK's own
#: ``UseDevelopmentEmulator=true`` assumes for connection strings.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


@dataclass(frozen=True)
class Access:
    """How to reach one namespace: a connection string, or a host and an Azure AD
    credential recipe. Built on the driver, pickled into tasks; its repr shows no secret."""

    namespace: str
    connection_string: str | None = field(default=None, repr=False)
    host: str | None = None
    credential: CredentialConfig | None = None
    client_secret: str | None = field(default=None, repr=False)

    def client(self, **kwargs: Any) -> Any:
        """A ``ServiceBusClient`` (data plane)."""
        from azure.servicebus import ServiceBusClient

        if self.connection_string is not None:
            return ServiceBusClient.from_connection_string(self.connection_string, **kwargs)
        assert self.host is not None
        kwargs.setdefault("use_tls", not is_loopback(self.host))
        return ServiceBusClient(self.host, azure_credential(self), **kwargs)


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in LOOPBACK_HOSTS


def resolve_access(namespace: NamespaceConfig, dbutils_get: DbutilsGet | None = None) -> Access:
    """Reads the namespace's secret (connection string, or service principal secret)."""
    if namespace.credential is None:
        assert namespace.connection_string is not None
        secret = resolve_secret(namespace.connection_string, dbutils_get=dbutils_get)
        return Access(namespace.namespace, connection_string=secret)
    client_secret = None
    if namespace.credential.client_secret is not None:
        client_secret = resolve_secret(namespace.credential.client_secret, dbutils_get=dbutils_get)
    return Access(namespace.namespace, host=namespace.host, credential=namespace.credential,
                  client_secret=client_secret)  # fmt: skip


_credentials: dict[tuple[Any, ...], Any] = {}
_credentials_lock = threading.Lock()


def azure_credential(access: Access) -> Any:
    """The azure-identity credential of an :class:`Access`, one per process and recipe (so
    that the tasks of a worker share its token cache)."""
    spec = access.credential
    assert spec is not None
    key = (spec.type, spec.client_id, spec.tenant_id, access.client_secret)
    with _credentials_lock:
        if key not in _credentials:
            _credentials[key] = _new_credential(spec, access.client_secret)
        return _credentials[key]


def _new_credential(spec: CredentialConfig, client_secret: str | None) -> Any:
    from azure import identity

    if spec.type == "service_principal":
        return identity.ClientSecretCredential(
            str(spec.tenant_id), str(spec.client_id), str(client_secret)
        )
    if spec.type == "managed_identity":
        return identity.ManagedIdentityCredential(client_id=spec.client_id)
    if spec.client_id:
        return identity.DefaultAzureCredential(managed_identity_client_id=spec.client_id)
    return identity.DefaultAzureCredential()


def _parts(connection_string: str) -> list[tuple[str, str]]:
    out = []
    for item in connection_string.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError("a connection string item is not key=value")
        out.append((key.strip(), value.strip()))
    return out


def with_endpoint(connection_string: str, endpoint: str) -> str:
    """The same connection string pointed at ``endpoint`` (``host:port``)."""
    parts = _parts(connection_string)
    if not any(k.lower() == "endpoint" for k, _ in parts):
        raise ConfigError("the connection string has no Endpoint")
    items = [(k, f"sb://{endpoint}/" if k.lower() == "endpoint" else v) for k, v in parts]
    return "".join(f"{k}={v};" for k, v in items)


def servicebus_client(
    namespace: NamespaceConfig, dbutils_get: DbutilsGet | None = None, **kwargs: Any
) -> Any:
    """A ``ServiceBusClient`` for the namespace (data plane)."""
    return resolve_access(namespace, dbutils_get).client(**kwargs)


def admin_client(
    namespace: NamespaceConfig, dbutils_get: DbutilsGet | None = None, **kwargs: Any
) -> Any:
    """A ``ServiceBusAdministrationClient`` for the namespace's management API, at
    ``management_endpoint`` when set, trusting ``ca_bundle`` when set."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    if namespace.ca_bundle is not None:
        kwargs.setdefault("connection_verify", namespace.ca_bundle)
    access = resolve_access(namespace, dbutils_get)
    if access.connection_string is None:
        host = namespace.management_endpoint or namespace.host
        return ServiceBusAdministrationClient(host, azure_credential(access), **kwargs)
    secret = access.connection_string
    if namespace.management_endpoint is not None:
        secret = with_endpoint(secret, namespace.management_endpoint)
    return ServiceBusAdministrationClient.from_connection_string(secret, **kwargs)
