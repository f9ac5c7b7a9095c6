"""How syphon reaches its namespaces, resolved once at the entry point.

:func:`resolve_namespaces` reads every secret the config refers to (connection strings,
a service principal's secret), checks that each connection string is one, and returns a
:class:`Namespaces`: one :class:`Access` per namespace, handed to the stages and pickled
into Spark tasks. An :class:`Access` builds the SDK clients; its repr shows no secret,
and nothing here logs, prints or stores one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from syphon.core.config import CredentialConfig, NamespaceConfig, SyphonConfig
from syphon.core.errors import ConfigError, SecretError
from syphon.servicebus.secrets import (
    DbutilsGet,
    connection_string_problem,
    endpoint_host,
    resolve_secret,
    with_endpoint,
)

#: Hosts on which the AMQP port has no TLS (the local Service Bus), as the SDK's own
#: ``UseDevelopmentEmulator=true`` assumes for connection strings.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")

#: The largest message (and batch) a tier takes.
TIER_LIMITS = {"standard": 256 * 1024, "premium": 1024 * 1024}


@dataclass(frozen=True)
class Access:
    """How to reach one namespace: a connection string, or a host and an Azure AD
    credential recipe, plus where its management API is. Built on the driver, pickled
    into tasks; its repr shows no secret.

    Attributes:
        namespace: the namespace's name.
        key: its config key (``secondary``, ``primaries.0``), for messages.
        host: where it is: the connection string's endpoint host, or the Azure AD
            fully-qualified namespace.
    """

    namespace: str
    key: str
    host: str
    connection_string: str | None = field(default=None, repr=False)
    credential: CredentialConfig | None = None
    client_secret: str | None = field(default=None, repr=False)
    tier: str = "standard"
    management_endpoint: str | None = None
    ca_bundle: str | None = None

    @property
    def max_message_bytes(self) -> int:
        """The tier's message and batch limit."""
        return TIER_LIMITS[self.tier]

    @property
    def uses_azure_ad(self) -> bool:
        return self.connection_string is None

    def client(self, **kwargs: Any) -> Any:
        """A ``ServiceBusClient`` (data plane)."""
        from azure.servicebus import ServiceBusClient

        if self.connection_string is not None:
            return ServiceBusClient.from_connection_string(self.connection_string, **kwargs)
        kwargs.setdefault("use_tls", not is_loopback(self.host))
        return ServiceBusClient(self.host, azure_credential(self), **kwargs)

    def admin_client(self, **kwargs: Any) -> Any:
        """A ``ServiceBusAdministrationClient`` for the management API, at
        ``management_endpoint`` when set, trusting ``ca_bundle`` when set."""
        from azure.servicebus.management import ServiceBusAdministrationClient

        if self.ca_bundle is not None:
            kwargs.setdefault("connection_verify", self.ca_bundle)
        if self.connection_string is None:
            host = self.management_endpoint or self.host
            return ServiceBusAdministrationClient(host, azure_credential(self), **kwargs)
        secret = self.connection_string
        if self.management_endpoint is not None:
            secret = with_endpoint(secret, self.management_endpoint)
        return ServiceBusAdministrationClient.from_connection_string(secret, **kwargs)


@dataclass(frozen=True)
class Namespaces:
    """Every namespace of a config, resolved: the secondary (None: not configured), the
    primaries by name, and each namespace source's drained namespace by source name (or
    the error its secret gave, raised when that source is run: a source for the day of a
    failover must not stop the scheduled runs while its secret is not set)."""

    secondary: Access | None
    primaries: Mapping[str, Access]
    drained: Mapping[str, Access | SecretError] = field(default_factory=dict)

    def drained_by(self, source: str) -> Access:
        """The namespace the namespace source ``source`` drains.

        Raises:
            SecretError: its secret is unset or malformed.
            ConfigError: no namespace source of that name.
        """
        got = self.drained.get(source)
        if got is None:
            raise ConfigError(f"no namespace source {source!r} in sources")
        if isinstance(got, SecretError):
            raise got
        return got

    def backlog_namespace(self) -> Access:
        """The secondary, which holds the backlog queues.

        Raises:
            ConfigError: the config has none.
        """
        if self.secondary is None:
            raise ConfigError(
                "no secondary namespace is configured: give secondary to drain backlog queues"
            )
        return self.secondary

    def primary(self, name: str) -> Access:
        """The primary of that name.

        Raises:
            ConfigError: no primary of that name is configured.
        """
        try:
            return self.primaries[name]
        except KeyError:
            raise ConfigError(f"no primary namespace {name!r} in primaries") from None


def is_loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return name in LOOPBACK_HOSTS


def resolve_access(
    namespace: NamespaceConfig,
    key: str,
    source: str = "",
    *,
    dbutils_get: DbutilsGet | None = None,
    environ: Mapping[str, str] | None = None,
) -> Access:
    """Reads one namespace's secret and checks it.

    Raises:
        SecretError: the secret is unset, or the connection string is malformed (the
            message names ``source``, the config key and the variable, never the value).
    """
    where = f"{source}: " if source else ""
    common: dict[str, Any] = {
        "namespace": namespace.namespace,
        "key": key,
        "tier": namespace.tier,
        "management_endpoint": namespace.management_endpoint,
        "ca_bundle": namespace.ca_bundle,
    }
    if namespace.credential is None:
        ref = namespace.connection_string
        assert ref is not None  # the config holds exactly one of the two
        name = f"{key}.connection_string"
        try:
            secret = resolve_secret(ref, environ, dbutils_get)
        except SecretError as exc:
            raise SecretError(f"{where}{name}: {exc}") from None
        problem = connection_string_problem(secret)
        if problem is not None:
            raise SecretError(
                f"{where}{name}: {ref.describe()} does not hold a Service Bus connection "
                f"string: {problem}"
            )
        return Access(host=endpoint_host(secret), connection_string=secret, **common)
    client_secret = None
    if namespace.credential.client_secret is not None:
        name = f"{key}.credential.client_secret"
        try:
            client_secret = resolve_secret(namespace.credential.client_secret, environ, dbutils_get)
        except SecretError as exc:
            raise SecretError(f"{where}{name}: {exc}") from None
    return Access(
        host=namespace.host, credential=namespace.credential, client_secret=client_secret, **common
    )


def resolve_namespaces(
    config: SyphonConfig,
    dbutils_get: DbutilsGet | None = None,
    environ: Mapping[str, str] | None = None,
) -> Namespaces:
    """Every namespace of ``config``, its secrets read and checked once.

    Raises:
        SecretError: a secret is unset or malformed (exit code 2, before anything starts).
    """
    secondary = None
    if config.secondary is not None:
        secondary = resolve_access(
            config.secondary, "secondary", config.source, dbutils_get=dbutils_get, environ=environ
        )
    primaries = {
        p.namespace: resolve_access(
            p, f"primaries.{i}", config.source, dbutils_get=dbutils_get, environ=environ
        )
        for i, p in enumerate(config.primaries)
    }
    drained: dict[str, Access | SecretError] = {}
    for i, s in enumerate(config.sources):
        if s.from_namespace is None:
            continue
        try:
            drained[s.name] = resolve_access(
                s.from_namespace,
                f"sources.{i}.from_namespace",
                config.source,
                dbutils_get=dbutils_get,
                environ=environ,
            )
        except SecretError as exc:
            drained[s.name] = exc
    return Namespaces(secondary, primaries, drained)


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
            _credentials[key] = new_credential(spec, access.client_secret)
        return _credentials[key]


def new_credential(spec: CredentialConfig, client_secret: str | None) -> Any:
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
