"""Typed configuration, loaded once from a YAML file plus environment overrides.

Every value is checked when the config is built; an error names the file (or the
environment variable) and the key. Secrets never appear in a config: a connection
string is a *reference* to an environment variable or a Databricks secret, resolved
only at the moment a client is built (:func:`resolve_secret`).

Environment overrides: ``SYPHON__<SECTION>__<KEY>=<yaml value>``, with list items by
index, e.g. ``SYPHON__BACKLOG__QUEUE_COUNT=12`` or ``SYPHON__PRIMARIES__0__TIER=premium``.
Key segments are case-insensitive, except Spark settings under ``SYPHON__SPARK__CONF__``.
The file's path itself may come from ``SYPHON_CONFIG``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from syphon.core.errors import ConfigError, SecretError
from syphon.core.naming import is_namespace_name

ENV_PREFIX = "SYPHON__"
CONFIG_PATH_ENV = "SYPHON_CONFIG"
TIERS = ("standard", "premium")
DISCOVERY_MODES = ("management", "probe")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Text that only a literal secret would contain.
_LITERAL_SECRET = re.compile(
    r"SharedAccessKey\s*=|SharedAccessSignature|Endpoint\s*=\s*sb://", re.I
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENDPOINT = re.compile(r"^[A-Za-z0-9.\-]+:\d{1,5}$")
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}$")
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$")

T = TypeVar("T")


@dataclass(frozen=True)
class SecretRef:
    """Where a secret lives: an environment variable, or a Databricks secret scope/key.

    Exactly one of ``env`` or (``scope``, ``key``) is set. The value is never stored.
    """

    env: str | None = None
    scope: str | None = None
    key: str | None = None

    def describe(self) -> str:
        """Where the secret comes from, for messages (never the value)."""
        if self.env is not None:
            return f"environment variable {self.env}"
        return f"Databricks secret {self.scope}/{self.key}"


#: How the audit and the run ledger are written (see :class:`AuditConfig`).
AUDIT_ENGINES = ("delta-rs", "spark")

#: Azure AD credential types (azure-identity): ``default`` is DefaultAzureCredential
#: (environment, workload identity, managed identity, Azure CLI, …), ``managed_identity``
#: ManagedIdentityCredential, ``service_principal`` ClientSecretCredential.
CREDENTIAL_TYPES = ("default", "managed_identity", "service_principal")


@dataclass(frozen=True)
class CredentialConfig:
    """An Azure AD identity for a namespace.

    Attributes:
        type: one of :data:`CREDENTIAL_TYPES`.
        client_id: a user-assigned managed identity's client id (``default``,
            ``managed_identity``; None: the system-assigned one), or the service
            principal's application id (required for ``service_principal``).
        tenant_id: the service principal's tenant (required for ``service_principal``).
        client_secret: reference to the service principal's secret (required for
            ``service_principal``).
    """

    type: str = "default"
    client_id: str | None = None
    tenant_id: str | None = None
    client_secret: SecretRef | None = None


@dataclass(frozen=True)
class NamespaceConfig:
    """One Service Bus namespace syphon talks to, with a connection string or an Azure AD
    credential (exactly one of the two).

    Attributes:
        namespace: the namespace's name, as it appears in backlog queue paths.
        connection_string: reference to the namespace's connection string.
        credential: the Azure AD identity to use instead of a connection string.
        fully_qualified_namespace: ``host`` or ``host:port`` of the namespace for Azure AD
            (default ``<namespace>.servicebus.windows.net``).
        tier: ``standard`` (256 KB batches) or ``premium`` (1 MB batches).
        management_endpoint: ``host:port`` of the HTTPS management API; None means the
            namespace's host on port 443, as on Azure. The local Service Bus serves it on
            a port of its own.
        ca_bundle: a PEM file of CAs to trust for the management API (the local
            Service Bus's generated CA); None trusts the system's CAs.
    """

    namespace: str
    connection_string: SecretRef | None = None
    tier: str = "standard"
    management_endpoint: str | None = None
    ca_bundle: str | None = None
    credential: CredentialConfig | None = None
    fully_qualified_namespace: str | None = None

    @property
    def host(self) -> str:
        """The fully-qualified namespace Azure AD clients connect to."""
        return self.fully_qualified_namespace or f"{self.namespace}.servicebus.windows.net"


@dataclass(frozen=True)
class BacklogConfig:
    """How backlog queues are found.

    Attributes:
        queue_count: how many backlog queues the senders use (the seed's default 10).
        discovery: ``management`` lists queues by prefix through the management API;
            ``probe`` tries indices 0 to ``probe_limit - 1`` over AMQP.
        probe_limit: the highest index probed, plus one; at least ``queue_count``.
        split_messages: a queue known to hold more messages than this is peeked as
            several Spark input partitions (sequence-number ranges of this size).
    """

    queue_count: int = 10
    discovery: str = "management"
    probe_limit: int = 64
    split_messages: int = 50_000


@dataclass(frozen=True)
class SparkConfig:
    """How the Spark session is built.

    Attributes:
        master: e.g. ``local[2]``; None uses the session the platform provides
            (Databricks, spark-submit's ``--master``).
        app_name: the application's name in the Spark UI.
        conf: extra Spark settings, applied last.
    """

    master: str | None = "local[2]"
    app_name: str = "syphon"
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditConfig:
    """Where the audit and the run ledger (Delta tables) are kept.

    Attributes:
        path: a directory (local path or URI delta-rs can write); relative paths are
            taken from the working directory. The audit and ledger tables live here with
            engine ``delta-rs``; the lease table and the run reports always do.
        engine: ``delta-rs`` (tables at ``path``, written by Spark's executors as Parquet
            and committed by delta-rs) or ``spark`` (catalog tables written through
            Spark's own table format, e.g. Delta on Databricks).
        table: with engine ``spark``, the audit table's name (``[catalog.]schema.name``);
            the run ledger is ``<table>_runs``.
        format: with engine ``spark``, the format Spark writes the tables in.
    """

    path: str = ".syphon/delta"
    engine: str = "delta-rs"
    table: str | None = None
    format: str = "delta"

    @property
    def where(self) -> str:
        """Where the audit is, for messages: a folder, or a catalog table."""
        return f"table {self.table}" if self.engine == "spark" else self.path


@dataclass(frozen=True)
class RunConfig:
    """How runs coordinate.

    Attributes:
        lease_seconds: how long a run's lease holds without a renewal (the run renews it
            every third of this); a crashed run blocks others for at most this long.
    """

    lease_seconds: int = 3600


@dataclass(frozen=True)
class LoggingConfig:
    """Logging of the entry points.

    Attributes:
        level: DEBUG, INFO, WARNING or ERROR.
        format: ``text`` or ``json`` (one JSON object per line); the command's
            ``--log-level`` and ``--log-format`` win.
    """

    level: str = "INFO"
    format: str = "text"


@dataclass(frozen=True)
class SyphonConfig:
    """The whole configuration of one syphon deployment.

    Attributes:
        source: the file it was loaded from (for messages).
        secondary: the namespace that holds the backlog queues.
        primaries: the primary namespaces whose backlogs are drained.
    """

    source: str
    secondary: NamespaceConfig
    primaries: tuple[NamespaceConfig, ...]
    backlog: BacklogConfig = field(default_factory=BacklogConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    run: RunConfig = field(default_factory=RunConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def primary(self, namespace: str) -> NamespaceConfig:
        """The primary namespace of that name.

        Raises:
            ConfigError: no primary of that name is configured.
        """
        for p in self.primaries:
            if p.namespace == namespace:
                return p
        raise ConfigError(f"{self.source}: no primary namespace {namespace!r} in primaries")

    def as_dict(self) -> dict[str, Any]:
        """The config as plain data; secret references only, never values."""
        plain: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return plain


def default_config_path() -> Path:
    """The embedded default, ``conf/local.yaml`` (shipped inside the wheel as well)."""
    packaged = resources.files("syphon").joinpath("conf/local.yaml")
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "conf" / "local.yaml"


def load_config(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> SyphonConfig:
    """Loads, overrides and validates a config.

    Args:
        path: a YAML file; None takes ``SYPHON_CONFIG`` or else the embedded default.
        environ: the environment to read overrides from (``os.environ`` by default).

    Raises:
        ConfigError: the file is missing or malformed, or a key is unknown or invalid.
    """
    env = os.environ if environ is None else environ
    chosen = Path(path) if path is not None else None
    if chosen is None and env.get(CONFIG_PATH_ENV):
        chosen = Path(env[CONFIG_PATH_ENV])
    chosen = chosen or default_config_path()
    try:
        text = chosen.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{chosen}: cannot read the config file ({exc.strerror})") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{chosen}: not valid YAML: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{chosen}: the top level must be a mapping of sections")
    origins: dict[str, str] = {}
    _apply_env_overrides(raw, env, origins, str(chosen))
    return _Builder(str(chosen), origins).config(raw)


def _apply_env_overrides(
    raw: dict[str, Any], env: Mapping[str, str], origins: dict[str, str], source: str
) -> None:
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        segments = name[len(ENV_PREFIX) :].split("__")
        parts = [p.lower() for p in segments]
        if parts[:2] == ["spark", "conf"]:  # Spark settings are case-sensitive
            parts[2:] = segments[2:]
        if not all(parts):
            raise ConfigError(f"environment variable {name}: empty key segment")
        try:
            value = yaml.safe_load(env[name])
        except yaml.YAMLError as exc:
            raise ConfigError(f"environment variable {name}: not a YAML value: {exc}") from exc
        node: Any = raw
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            dotted = ".".join(parts[: i + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError(
                        f"environment variable {name}: {dotted}: no such list item in {source}"
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
            else:
                raise ConfigError(f"environment variable {name}: {dotted} is not a section")
        origins[".".join(parts)] = f"environment variable {name}"


class _Builder:
    """Turns the raw mapping into dataclasses, naming file/variable and key on error."""

    def __init__(self, source: str, origins: Mapping[str, str]) -> None:
        self.source = source
        self.origins = origins

    def fail(self, key: str, message: str) -> ConfigError:
        where = self.origins.get(key, self.source)
        if where != self.source:
            where = f"{self.source} ({where})"
        return ConfigError(f"{where}: {key}: {message}")

    def section(self, raw: Any, key: str, known: tuple[str, ...]) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(key, "must be a mapping")
        for name in raw:
            if name not in known:
                raise self.fail(
                    f"{key}.{name}" if key else str(name),
                    f"unknown key (known: {', '.join(known)})",
                )
        return raw

    def typed(self, raw: dict[str, Any], key: str, name: str, kind: type[T], default: T) -> T:
        value = raw.get(name, default)
        dotted = f"{key}.{name}"
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.fail(dotted, f"must be an integer (got {value!r})")
        if kind is str and not isinstance(value, str):
            raise self.fail(dotted, f"must be a string (got {value!r})")
        if isinstance(value, str) and _LITERAL_SECRET.search(value):
            raise self.fail(
                dotted, "looks like a literal secret; reference it instead ({env: NAME})"
            )
        return value  # type: ignore[no-any-return]

    def choice(
        self, raw: dict[str, Any], key: str, name: str, choices: tuple[str, ...], default: str
    ) -> str:
        value = self.typed(raw, key, name, str, default)
        if value not in choices:
            raise self.fail(f"{key}.{name}", f"must be one of {', '.join(choices)} (got {value!r})")
        return value

    def required(self, raw: dict[str, Any], key: str, name: str) -> Any:
        if raw.get(name) is None:
            raise self.fail(f"{key}.{name}", "is required")
        return raw[name]

    def secret(self, raw: Any, key: str) -> SecretRef:
        if isinstance(raw, str):
            raise self.fail(
                key,
                "secrets are references, not values: write {env: VARIABLE} or "
                "{scope: SCOPE, key: KEY}",
            )
        ref = self.section(raw, key, ("env", "scope", "key"))
        env, scope, skey = ref.get("env"), ref.get("scope"), ref.get("key")
        if env is not None and (scope is not None or skey is not None):
            raise self.fail(key, "give either env or scope/key, not both")
        if env is not None:
            if not isinstance(env, str) or not _ENV_NAME.match(env):
                raise self.fail(f"{key}.env", f"must be an environment variable name (got {env!r})")
            return SecretRef(env=env)
        if not (isinstance(scope, str) and scope and isinstance(skey, str) and skey):
            raise self.fail(key, "needs env, or both scope and key")
        return SecretRef(scope=scope, key=skey)

    def namespace(self, raw: Any, key: str) -> NamespaceConfig:
        ns = self.section(
            raw,
            key,
            ("namespace", "connection_string", "credential", "fully_qualified_namespace",
             "tier", "management_endpoint", "ca_bundle"),
        )  # fmt: skip
        name = self.required(ns, key, "namespace")
        if not isinstance(name, str) or not is_namespace_name(name):
            raise self.fail(
                f"{key}.namespace",
                f"{name!r} is not a namespace name (6-50 letters, digits or hyphens, "
                "starting with a letter, ending with a letter or digit)",
            )
        has_string = ns.get("connection_string") is not None
        has_credential = ns.get("credential") is not None
        if has_string == has_credential:
            raise self.fail(key, "give a connection_string or an Azure AD credential (exactly one)")
        fqns = self.optional_str(ns, key, "fully_qualified_namespace")
        if fqns is not None and not _HOST.match(fqns):
            raise self.fail(f"{key}.fully_qualified_namespace",
                            f"must be host or host:port, no scheme (got {fqns!r})")  # fmt: skip
        if fqns is not None and has_string:
            raise self.fail(
                f"{key}.fully_qualified_namespace",
                "is for Azure AD; a connection string names its own endpoint",
            )
        return NamespaceConfig(
            namespace=name,
            connection_string=(
                self.secret(ns["connection_string"], f"{key}.connection_string")
                if has_string else None
            ),
            tier=self.choice(ns, key, "tier", TIERS, "standard"),
            management_endpoint=self.endpoint(ns, key),
            ca_bundle=self.optional_str(ns, key, "ca_bundle"),
            credential=self.credential(ns["credential"], f"{key}.credential")
            if has_credential else None,
            fully_qualified_namespace=fqns,
        )  # fmt: skip

    def credential(self, raw: Any, key: str) -> CredentialConfig:
        c = self.section(raw, key, ("type", "client_id", "tenant_id", "client_secret"))
        kind = self.choice(c, key, "type", CREDENTIAL_TYPES, "default")
        client_id = self.optional_str(c, key, "client_id")
        tenant_id = self.optional_str(c, key, "tenant_id")
        secret = c.get("client_secret")
        if kind == "service_principal":
            for name in ("client_id", "tenant_id", "client_secret"):
                self.required(c, key, name)
            return CredentialConfig(kind, client_id, tenant_id,
                                    self.secret(secret, f"{key}.client_secret"))  # fmt: skip
        for name in ("tenant_id", "client_secret"):
            if c.get(name) is not None:
                raise self.fail(f"{key}.{name}", "is for type service_principal only")
        return CredentialConfig(kind, client_id)

    def optional_str(self, raw: dict[str, Any], key: str, name: str) -> str | None:
        if raw.get(name) is None:
            return None
        value = self.typed(raw, key, name, str, "")
        if not value:
            raise self.fail(f"{key}.{name}", "must not be empty")
        return value

    def endpoint(self, raw: dict[str, Any], key: str) -> str | None:
        value = self.optional_str(raw, key, "management_endpoint")
        if value is not None and not _ENDPOINT.match(value):
            raise self.fail(
                f"{key}.management_endpoint", f"must be host:port, no scheme (got {value!r})"
            )
        return value

    def config(self, raw: dict[str, Any]) -> SyphonConfig:
        top = self.section(
            raw, "", ("secondary", "primaries", "backlog", "spark", "audit", "run", "logging")
        )
        secondary = self.namespace(self.required(top, "", "secondary"), "secondary")
        primaries_raw = self.required(top, "", "primaries")
        if not isinstance(primaries_raw, list) or not primaries_raw:
            raise self.fail("primaries", "must be a non-empty list")
        primaries = tuple(self.namespace(p, f"primaries.{i}") for i, p in enumerate(primaries_raw))
        names = [p.namespace for p in primaries]
        if len(set(names)) != len(names):
            raise self.fail("primaries", "a namespace is listed twice")
        if secondary.namespace in names:
            raise self.fail("secondary.namespace", "must differ from every primary namespace")
        return SyphonConfig(
            source=self.source,
            secondary=secondary,
            primaries=primaries,
            backlog=self.backlog(top.get("backlog")),
            spark=self.spark(top.get("spark")),
            audit=self.audit(top.get("audit")),
            run=self.run(top.get("run")),
            logging=self.logging(top.get("logging")),
        )

    def backlog(self, raw: Any) -> BacklogConfig:
        b = self.section(
            raw, "backlog", ("queue_count", "discovery", "probe_limit", "split_messages")
        )
        count = self.typed(b, "backlog", "queue_count", int, 10)
        if not 1 <= count <= 1000:
            raise self.fail("backlog.queue_count", f"must be between 1 and 1000 (got {count})")
        limit = self.typed(b, "backlog", "probe_limit", int, max(64, count))
        if limit < count:
            raise self.fail("backlog.probe_limit", f"must be at least queue_count ({count})")
        split = self.typed(b, "backlog", "split_messages", int, 50_000)
        if split < 100:
            raise self.fail("backlog.split_messages", f"must be at least 100 (got {split})")
        return BacklogConfig(
            queue_count=count,
            discovery=self.choice(b, "backlog", "discovery", DISCOVERY_MODES, "management"),
            probe_limit=limit,
            split_messages=split,
        )

    def spark(self, raw: Any) -> SparkConfig:
        s = self.section(raw, "spark", ("master", "app_name", "conf"))
        master = s.get("master", "local[2]")
        if master is not None and not isinstance(master, str):
            raise self.fail("spark.master", f"must be a string or null (got {master!r})")
        conf = s.get("conf") or {}
        if not isinstance(conf, dict):
            raise self.fail("spark.conf", "must be a mapping of Spark settings")
        for k, v in conf.items():
            if isinstance(v, (dict, list)) or v is None:
                raise self.fail(f"spark.conf.{k}", "must be a scalar")
        return SparkConfig(
            master=master,
            app_name=self.typed(s, "spark", "app_name", str, "syphon"),
            conf={str(k): _spark_value(v) for k, v in conf.items()},
        )

    def audit(self, raw: Any) -> AuditConfig:
        a = self.section(raw, "audit", ("path", "engine", "table", "format"))
        path = self.typed(a, "audit", "path", str, ".syphon/delta")
        if not path.strip():
            raise self.fail("audit.path", "must not be empty")
        engine = self.choice(a, "audit", "engine", AUDIT_ENGINES, "delta-rs")
        table = self.optional_str(a, "audit", "table")
        fmt = self.typed(a, "audit", "format", str, "delta")
        if engine == "spark":
            if table is None:
                raise self.fail("audit.table", "is required with engine spark")
            if not _TABLE_NAME.match(table):
                raise self.fail("audit.table", f"must be [catalog.]schema.name (got {table!r})")
        elif table is not None:
            raise self.fail("audit.table", "is for engine spark (delta-rs uses audit.path)")
        return AuditConfig(path=path, engine=engine, table=table, format=fmt)

    def run(self, raw: Any) -> RunConfig:
        r = self.section(raw, "run", ("lease_seconds",))
        lease = self.typed(r, "run", "lease_seconds", int, 3600)
        if lease < 1:
            raise self.fail("run.lease_seconds", f"must be at least 1 (got {lease})")
        return RunConfig(lease_seconds=lease)

    def logging(self, raw: Any) -> LoggingConfig:
        lg = self.section(raw, "logging", ("level", "format"))
        level = self.typed(lg, "logging", "level", str, "INFO").upper()
        if level not in LOG_LEVELS:
            raise self.fail("logging.level", f"must be one of {', '.join(LOG_LEVELS)}")
        fmt = self.typed(lg, "logging", "format", str, "text").lower()
        if fmt not in ("text", "json"):
            raise self.fail("logging.format", "must be text or json")
        return LoggingConfig(level=level, format=fmt)


def _spark_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve_secret(
    ref: SecretRef,
    environ: Mapping[str, str] | None = None,
    dbutils_get: Callable[[str, str], str] | None = None,
) -> str:
    """Reads the secret a reference points to. Call it right before building a client.

    Args:
        ref: the reference.
        environ: where environment references are read (``os.environ`` by default).
        dbutils_get: ``dbutils.secrets.get`` on Databricks, for scope/key references.

    Raises:
        SecretError: the variable is unset or empty, or no secret reader is available.
    """
    if ref.env is not None:
        value = (os.environ if environ is None else environ).get(ref.env)
        if not value:
            raise SecretError(f"{ref.describe()} is not set")
        return value
    if dbutils_get is None:
        raise SecretError(f"{ref.describe()} can only be read on Databricks (no dbutils here)")
    return dbutils_get(str(ref.scope), str(ref.key))
