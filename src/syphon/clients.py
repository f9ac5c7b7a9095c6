"""Service Bus clients built from the configuration.

Connection strings are resolved from their references only here, at the moment a
client is built, and never logged, printed or stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from syphon.config import NamespaceConfig, resolve_secret
from syphon.errors import ConfigError

DbutilsGet = Callable[[str, str], str]


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
    from azure.servicebus import ServiceBusClient

    secret = resolve_secret(namespace.connection_string, dbutils_get=dbutils_get)
    return ServiceBusClient.from_connection_string(secret, **kwargs)


def admin_client(
    namespace: NamespaceConfig, dbutils_get: DbutilsGet | None = None, **kwargs: Any
) -> Any:
    """A ``ServiceBusAdministrationClient`` for the namespace's management API, at
    ``management_endpoint`` when set, trusting ``ca_bundle`` when set."""
    from azure.servicebus.management import ServiceBusAdministrationClient

    secret = resolve_secret(namespace.connection_string, dbutils_get=dbutils_get)
    if namespace.management_endpoint is not None:
        secret = with_endpoint(secret, namespace.management_endpoint)
    if namespace.ca_bundle is not None:
        kwargs.setdefault("connection_verify", namespace.ca_bundle)
    return ServiceBusAdministrationClient.from_connection_string(secret, **kwargs)
