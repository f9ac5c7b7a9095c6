"""What a syphon configuration is: frozen dataclasses, one per section.

A config is read and checked once by :func:`syphon.core.configfile.load_config`; every
stage receives these objects, never raw mappings. Secrets never appear in a config: a
connection string (or a service principal's or a Spark setting's secret) is a
:class:`SecretRef` to an environment variable or a Databricks secret, read only at the
entry point (:mod:`syphon.servicebus.secrets`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from syphon.core.errors import ConfigError

ENV_PREFIX = "SYPHON__"
CONFIG_PATH_ENV = "SYPHON_CONFIG"
TIERS = ("standard", "premium")
DISCOVERY_MODES = ("management", "probe")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


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
        queue_count: how many backlog queues the senders use (paired namespaces: 10).
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


#: The kinds of source a run drains.
SOURCE_KINDS = ("backlog", "dead_letter", "namespace")
#: The name of the source a config without a ``sources`` section has.
DEFAULT_SOURCE = "backlog"


@dataclass(frozen=True)
class SourceConfig:
    """Where a run's messages wait to go home (``syphon run --source NAME``).

    Attributes:
        name: how commands name it (letters, digits, ``-``, ``_``).
        kind: ``backlog`` (the paired-namespace backlog queues of the secondary, as
            ``backlog`` configures them), ``dead_letter`` (the dead-letter sub-queues
            of ``entities`` in the primary ``namespace``, re-driven into it) or
            ``namespace`` (the queues of ``from_namespace``, drained into the same
            names in the primary ``namespace``).
        namespace: the configured primary the messages go to (``dead_letter``: whose
            entities' dead letters are re-driven).
        entities: the entities read (queues, and subscriptions as
            ``<topic>/Subscriptions/<name>``, each of which needs a target); empty:
            every queue of the namespace read (found by a management listing), and
            the subscriptions named in ``targets``.
        targets: entity -> where its messages go in ``namespace`` (default: the entity
            of the same name; a subscription has no default: a message cannot be sent
            to one subscription of a topic).
        from_namespace: ``namespace``: the namespace drained (a failed-over primary),
            with its own access.
        dead_letters: ``namespace``: also drain each entity's dead-letter sub-queue.
        transfer_dead_letters: ``dead_letter``: also read each entity's transfer
            dead-letter queue (``<entity>/$Transfer/$DeadLetterQueue``: what the service
            could not forward from it), re-driven like its dead letters (default: on).
    """

    name: str
    kind: str
    namespace: str | None = None
    entities: tuple[str, ...] = ()
    targets: Mapping[str, str] = field(default_factory=dict)
    from_namespace: NamespaceConfig | None = None
    dead_letters: bool = False
    transfer_dead_letters: bool = True

    def target(self, entity: str) -> str:
        """Where ``entity``'s messages are sent."""
        return self.targets.get(entity, entity)


@dataclass(frozen=True)
class SparkConfig:
    """How the Spark session is built.

    Attributes:
        master: e.g. ``local[2]``; None uses the session the platform provides
            (Databricks, spark-submit's ``--master``).
        app_name: the application's name in the Spark UI.
        conf: extra Spark settings, applied last. A setting whose value is a secret (a
            storage account key, a SAS, an OAuth client secret) is a :class:`SecretRef`,
            read when the session is built.
    """

    master: str | None = "local[2]"
    app_name: str = "syphon"
    conf: Mapping[str, str | SecretRef] = field(default_factory=dict)


@dataclass(frozen=True)
class StorageConfig:
    """How ``audit.path`` is reached when it is on object storage (Azure Blob or ADLS;
    other stores through ``options``). Secrets are references, never values.

    Attributes:
        account_key: reference to the storage account's key.
        sas_token: reference to a SAS token (account or container SAS).
        credential: an Azure AD identity (the namespaces' credential types; the token is
            asked for storage, ``https://storage.azure.com/.default``).
        account: the storage account, for ``az://container/path`` URIs (``abfss://`` and
            ``wasbs://`` URIs name their own).
        endpoint: the Blob endpoint to use instead of ``https://<account>.blob.core.
            windows.net`` (a sovereign cloud, a private endpoint, or a storage emulator:
            ``http://127.0.0.1:10000/<account>``).
        options: further delta-rs / object_store storage options (e.g. for ``s3://``); a
            value that is a secret is a :class:`SecretRef`.
    """

    account_key: SecretRef | None = None
    sas_token: SecretRef | None = None
    credential: CredentialConfig | None = None
    account: str | None = None
    endpoint: str | None = None
    options: Mapping[str, str | SecretRef] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditConfig:
    """Where the audit and the run ledger (Delta tables) are kept.

    Attributes:
        path: a folder: a local path (relative ones are taken from the working
            directory), ``file://``, or an object-store URI: ``abfss://container@account.
            dfs.core.windows.net/path`` (ADLS), ``wasbs://container@account.blob.core.
            windows.net/path`` or ``az://container/path`` (Blob storage), ``s3://``,
            ``gs://``. The audit, ledger and lease tables live here with engine
            ``delta-rs``; the run reports and the replay's journal always do (with
            engine ``spark`` on Databricks: a volume, ``/Volumes/<catalog>/<schema>/<v>/…``).
        storage: how an object-store ``path`` is reached (credentials, endpoint); None:
            the store's own defaults (environment variables, a managed identity).
        engine: ``delta-rs`` (tables at ``path``, written as Parquet, a wave's rows from
            the driver, and committed by delta-rs) or ``spark`` (catalog tables written through
            Spark's own table format, e.g. Delta on Databricks).
        table: with engine ``spark``, the audit table's name (``[catalog.]schema.name``);
            the run ledger is ``<table>_runs`` and the lease ``<table>_leases``.
        format: ``delta``, the only format (the key is kept for older configs).
    """

    path: str = ".syphon/delta"
    engine: str = "delta-rs"
    table: str | None = None
    format: str = "delta"
    storage: StorageConfig | None = None


@dataclass(frozen=True)
class ReplayConfig:
    """How fast the replay may send.

    Attributes:
        credits_per_second: per primary namespace, the most credits (messages sent) per
            second the whole run may spend there, split evenly among its replay tasks; a
            namespace not named has no budget. A Standard namespace is throttled at
            about 1,000 credits per second for all of its clients: a budget below that
            leaves room for its live traffic.
    """

    credits_per_second: Mapping[str, float] = field(default_factory=dict)


#: A run's lease by default: a crashed run's lease expires within two minutes of its last
#: renewal, so the next scheduled run starts that soon after a crash (a live run renews
#: it every 40 s).
LEASE_SECONDS_DEFAULT = 120

#: The shortest lease a config may set. After a driver dies on a cluster its executors go
#: on sending for about a second (their tasks are killed when the cluster notices); a
#: lease that expired within that tail would let a new run send beside them. At 10 s the
#: lease outlives the last renewal by at least two thirds of that (6.7 s).
LEASE_SECONDS_MIN = 10
#: Messages a wave of a run takes at most (``run.wave_messages``): a run's memory and
#: the work a crash leaves in doubt are bounded by a wave, not by the backlog; each wave
#: costs seconds of its own (the README's "Waves" has the figures).
WAVE_MESSAGES_DEFAULT = 40_000

#: Messages per Spark task of the stages that talk to Service Bus (``run.messages_per_task``:
#: the snapshot's peeks, the replay's sends, the settle's receives), at most one task per
#: core. Each task opens its own connections and links, and each costs Spark and a Python
#: worker a round of their own, while a task already peeks and settles its queues side by
#: side: a run of a few hundred messages gains nothing from a second task and pays for it.
#: Sends are the exception: a task sends its batches one after another, so a large
#: backlog far from its primaries wants every core.
MESSAGES_PER_TASK_DEFAULT = 1_000


#: ``run.read``'s values, and its default.
READ_MODES = ("peek", "once")
READ_DEFAULT = "once"
#: ``run.service_io``'s values (see :mod:`syphon.job.where`), and its default.
SERVICE_IO_MODES = ("auto", "driver", "tasks")
SERVICE_IO_DEFAULT = "auto"


@dataclass(frozen=True)
class RunConfig:
    """How runs coordinate.

    Attributes:
        lease_seconds: how long a run's lease holds without a renewal (the run renews it
            every third of this); a crashed run blocks others for at most this long.
            At least :data:`LEASE_SECONDS_MIN`.
        wave_messages: how many messages a wave takes at most (about: the limit is
            shared among the source's queues, rounded up); 0: the whole source in one
            wave. Default :data:`WAVE_MESSAGES_DEFAULT`.
        messages_per_task: a Spark task of the snapshot, the replay and the settle per
            this many messages, at most one per core; at least 1. Default
            :data:`MESSAGES_PER_TASK_DEFAULT`.
        read: how a run reads its source (:data:`READ_MODES`): ``once`` (the driver
            receives each wave under lock, settled by those locks; a namespace source
            and a resumed run peek) or ``peek`` (Spark tasks peek, the settle receives).
        service_io: where the sends, peeks and settles run (:data:`SERVICE_IO_MODES`):
            in Spark's tasks, in the driver, or ``auto`` (:mod:`syphon.job.where`).
    """

    lease_seconds: int = LEASE_SECONDS_DEFAULT
    wave_messages: int = WAVE_MESSAGES_DEFAULT
    messages_per_task: int = MESSAGES_PER_TASK_DEFAULT
    read: str = READ_DEFAULT
    service_io: str = SERVICE_IO_DEFAULT


@dataclass(frozen=True)
class LoggingConfig:
    """Logging of the entry points.

    Attributes:
        level: DEBUG, INFO, WARNING or ERROR.
        format: ``text`` or ``json`` (one JSON object per line); the command's
            ``--log-level`` and ``--log-format`` win.
        sdk_level: the level of the libraries' own loggers (the Service Bus SDK, its
            AMQP layer, azure-core's HTTP logging, py4j, the local Service Bus). Their
            INFO lines narrate every link and request, so WARNING by default;
            ``--log-level DEBUG`` also brings them to DEBUG.
    """

    level: str = "INFO"
    format: str = "text"
    sdk_level: str = "WARNING"


@dataclass(frozen=True)
class SyphonConfig:
    """The whole configuration of one syphon deployment.

    Attributes:
        source: the file it was loaded from (for messages).
        secondary: the namespace that holds the backlog queues (None: no backlog
            source is configured).
        primaries: the primary namespaces whose backlogs are drained.
    """

    source: str
    secondary: NamespaceConfig | None
    primaries: tuple[NamespaceConfig, ...]
    backlog: BacklogConfig = field(default_factory=BacklogConfig)
    spark: SparkConfig = field(default_factory=SparkConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    run: RunConfig = field(default_factory=RunConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    sources: tuple[SourceConfig, ...] = (SourceConfig(DEFAULT_SOURCE, "backlog"),)

    def source_named(self, name: str | None) -> SourceConfig:
        """The source ``name`` (None: ``backlog`` when configured, else the only one).

        Raises:
            ConfigError: no source of that name, or several and none named.
        """
        names = [s.name for s in self.sources]
        if name is None:
            if DEFAULT_SOURCE in names:
                name = DEFAULT_SOURCE
            elif len(names) == 1:
                name = names[0]
            else:
                raise ConfigError(
                    f"{self.source}: several sources ({', '.join(names)}): name one with --source"
                )
        for s in self.sources:
            if s.name == name:
                return s
        raise ConfigError(
            f"{self.source}: no source {name!r} in sources (configured: {', '.join(names)})"
        )

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

    def fingerprint(self) -> str:
        """A short hash of the configuration (references only: no secret is in it)."""
        text = json.dumps(self.as_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_config_path() -> Path:
    """The embedded default, ``conf/local.yaml`` (shipped inside the wheel as well)."""
    packaged = resources.files("syphon").joinpath("conf/local.yaml")
    if packaged.is_file():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "conf" / "local.yaml"
