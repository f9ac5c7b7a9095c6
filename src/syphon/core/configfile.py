"""Reading a config: a YAML file plus environment overrides, checked once.

Every value is checked when the config is built; an error names the file (or the
environment variable) and the key. A literal secret anywhere (a connection string, a
storage key, a SAS, a secret-named Spark setting) is refused: secrets are references.

Environment overrides: ``SYPHON__<SECTION>__<KEY>=<yaml value>``, with list items by
index, e.g. ``SYPHON__BACKLOG__QUEUE_COUNT=12`` or ``SYPHON__PRIMARIES__0__TIER=premium``.
Key segments are case-insensitive, except Spark settings under ``SYPHON__SPARK__CONF__``.
The file's path itself may come from ``SYPHON_CONFIG``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from syphon.core.config import (
    AUDIT_ENGINES,
    CONFIG_PATH_ENV,
    DISCOVERY_MODES,
    ENV_PREFIX,
    LEASE_SECONDS_DEFAULT,
    LEASE_SECONDS_MIN,
    LOG_LEVELS,
    MESSAGES_PER_TASK_DEFAULT,
    READ_DEFAULT,
    READ_MODES,
    SERVICE_IO_DEFAULT,
    SERVICE_IO_MODES,
    WAVE_MESSAGES_DEFAULT,
    AuditConfig,
    BacklogConfig,
    LoggingConfig,
    ReplayConfig,
    RunConfig,
    SparkConfig,
    StorageConfig,
    SyphonConfig,
    default_config_path,
)
from syphon.core.confignamespaces import NamespaceReader
from syphon.core.configreader import SECRET_OPTION, SECRET_SETTING
from syphon.core.errors import ConfigError
from syphon.core.storage_uri import StorageUri, StorageUriError, parse_storage_path

_URL = re.compile(r"^https?://[^/\s]+(/\S*)?$")
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}$")


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


class _Builder(NamespaceReader):
    """Turns the raw mapping into dataclasses, naming file/variable and key on error."""

    def config(self, raw: dict[str, Any]) -> SyphonConfig:
        top = self.section(
            raw,
            "",
            (
                "secondary",
                "primaries",
                "backlog",
                "spark",
                "audit",
                "run",
                "replay",
                "logging",
                "sources",
            ),
        )
        raw_secondary = top.get("secondary")
        secondary = None if raw_secondary is None else self.namespace(raw_secondary, "secondary")
        primaries_raw = self.required(top, "", "primaries")
        if not isinstance(primaries_raw, list) or not primaries_raw:
            raise self.fail("primaries", "must be a non-empty list")
        primaries = tuple(self.namespace(p, f"primaries.{i}") for i, p in enumerate(primaries_raw))
        names = [p.namespace for p in primaries]
        if len(set(names)) != len(names):
            raise self.fail("primaries", "a namespace is listed twice")
        if secondary is not None and secondary.namespace in names:
            raise self.fail("secondary.namespace", "must differ from every primary namespace")
        sources = self.sources(top.get("sources"), names)
        if secondary is None and any(s.kind == "backlog" for s in sources):
            raise self.fail(
                "secondary",
                "is required by a backlog source (the default when "
                "sources is not given): the namespace that holds "
                "the backlog queues",
            )
        drained = [s.from_namespace.namespace for s in sources if s.from_namespace]
        clash = [n for n in drained if n in names or (secondary and n == secondary.namespace)]
        if clash:
            raise self.fail(
                "sources",
                f"{clash[0]!r} is drained by a namespace source: it "
                "cannot also be the secondary or a primary",
            )
        return SyphonConfig(
            source=self.source,
            secondary=secondary,
            primaries=primaries,
            backlog=self.backlog(top.get("backlog")),
            spark=self.spark(top.get("spark")),
            audit=self.audit(top.get("audit")),
            run=self.run(top.get("run")),
            replay=self.replay(top.get("replay"), names),
            logging=self.logging(top.get("logging")),
            sources=sources,
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
        return SparkConfig(
            master=master,
            app_name=self.typed(s, "spark", "app_name", str, "syphon"),
            conf=self.settings(s.get("conf"), "spark.conf", "Spark settings", SECRET_SETTING),
        )

    def audit(self, raw: Any) -> AuditConfig:
        a = self.section(raw, "audit", ("path", "engine", "table", "format", "storage"))
        path = self.typed(a, "audit", "path", str, ".syphon/delta")
        if not path.strip():
            raise self.fail("audit.path", "must not be empty")
        try:
            where = parse_storage_path(path)
        except StorageUriError as exc:
            raise self.fail("audit.path", str(exc)) from None
        storage: StorageConfig | None = self.storage(a.get("storage"), where)
        if storage == StorageConfig():
            storage = None  # nothing set (the example's nulls)
        engine = self.choice(a, "audit", "engine", AUDIT_ENGINES, "delta-rs")
        table = self.optional_str(a, "audit", "table")
        fmt = self.typed(a, "audit", "format", str, "delta")
        if fmt != "delta":  # the key stays: older configs name it
            raise self.fail(
                "audit.format",
                f"must be delta: the lease, the commits' names and the audit's history are "
                f"Delta's (got {fmt!r})",
            )
        if engine == "spark":
            if table is None:
                raise self.fail("audit.table", "is required with engine spark")
            if not _TABLE_NAME.match(table):
                raise self.fail("audit.table", f"must be [catalog.]schema.name (got {table!r})")
        elif table is not None:
            raise self.fail("audit.table", "is for engine spark (delta-rs uses audit.path)")
        return AuditConfig(path=path, engine=engine, table=table, format=fmt, storage=storage)

    def storage(self, raw: Any, where: StorageUri) -> StorageConfig:
        key = "audit.storage"
        s = self.section(
            raw, key, ("account_key", "sas_token", "credential", "account", "endpoint", "options")
        )
        if where.local and any(v not in (None, {}) for v in s.values()):
            raise self.fail(key, "is for an audit.path on object storage")
        given = [n for n in ("account_key", "sas_token", "credential") if s.get(n) is not None]
        if len(given) > 1:
            raise self.fail(key, f"give one of account_key, sas_token or credential (got {given})")
        if given and not where.azure:
            raise self.fail(f"{key}.{given[0]}", "is for Azure storage; other stores take options")
        endpoint = self.optional_str(s, key, "endpoint")
        if endpoint is not None and not _URL.match(endpoint):
            raise self.fail(f"{key}.endpoint", f"must be an http(s):// URL (got {endpoint!r})")
        options = self.settings(
            s.get("options"), f"{key}.options", "storage options", SECRET_OPTION
        )
        return StorageConfig(
            account_key=self.secret(s["account_key"], f"{key}.account_key")
            if s.get("account_key") is not None
            else None,
            sas_token=self.secret(s["sas_token"], f"{key}.sas_token")
            if s.get("sas_token") is not None
            else None,
            credential=self.credential(s["credential"], f"{key}.credential")
            if s.get("credential") is not None
            else None,
            account=self.optional_str(s, key, "account"),
            endpoint=endpoint,
            options=options,
        )

    def run(self, raw: Any) -> RunConfig:
        r = self.section(
            raw,
            "run",
            ("lease_seconds", "wave_messages", "messages_per_task", "read", "service_io"),
        )
        lease = self.typed(r, "run", "lease_seconds", int, LEASE_SECONDS_DEFAULT)
        if "wave_messages" in r and r["wave_messages"] is None:
            waves = 0  # none: one wave, as 0
        else:
            waves = self.typed(r, "run", "wave_messages", int, WAVE_MESSAGES_DEFAULT)
        if waves < 0:
            raise self.fail("run.wave_messages", f"must be 0 (one wave) or more (got {waves})")
        if lease < LEASE_SECONDS_MIN:
            raise self.fail(
                "run.lease_seconds",
                f"must be at least {LEASE_SECONDS_MIN} (got {lease}): a crashed run's "
                "executors may still be sending for a moment after its driver died",
            )
        per_task = self.typed(r, "run", "messages_per_task", int, MESSAGES_PER_TASK_DEFAULT)
        if per_task < 1:
            raise self.fail("run.messages_per_task", f"must be at least 1 (got {per_task})")
        read = self.typed(r, "run", "read", str, READ_DEFAULT)
        if read not in READ_MODES:
            raise self.fail("run.read", f"must be one of {', '.join(READ_MODES)} (got {read!r})")
        io = self.typed(r, "run", "service_io", str, SERVICE_IO_DEFAULT)
        if io not in SERVICE_IO_MODES:
            modes = ", ".join(SERVICE_IO_MODES)
            raise self.fail("run.service_io", f"must be one of {modes} (got {io!r})")
        return RunConfig(
            lease_seconds=lease,
            wave_messages=waves,
            messages_per_task=per_task,
            read=read,
            service_io=io,
        )

    def replay(self, raw: Any, primaries: list[str]) -> ReplayConfig:
        """``credits_per_second``: a number (every primary) or a mapping from primary
        namespace to a number."""
        r = self.section(raw, "replay", ("credits_per_second",))
        value = r.get("credits_per_second")
        if value is None:
            return ReplayConfig()
        key = "replay.credits_per_second"
        budgets = dict.fromkeys(primaries, value) if not isinstance(value, dict) else value
        out: dict[str, float] = {}
        for name, budget in budgets.items():
            where = key if not isinstance(value, dict) else f"{key}.{name}"
            if name not in primaries:
                raise self.fail(
                    where, f"is not a configured primary (one of {', '.join(primaries)})"
                )
            if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
                raise self.fail(where, f"must be a positive number (got {budget!r})")
            out[name] = float(budget)
        return ReplayConfig(credits_per_second=out)

    def logging(self, raw: Any) -> LoggingConfig:
        lg = self.section(raw, "logging", ("level", "format", "sdk_level"))
        level = self.typed(lg, "logging", "level", str, "INFO").upper()
        if level not in LOG_LEVELS:
            raise self.fail("logging.level", f"must be one of {', '.join(LOG_LEVELS)}")
        fmt = self.typed(lg, "logging", "format", str, "text").lower()
        if fmt not in ("text", "json"):
            raise self.fail("logging.format", "must be text or json")
        sdk_level = self.typed(lg, "logging", "sdk_level", str, "WARNING").upper()
        if sdk_level not in LOG_LEVELS:
            raise self.fail("logging.sdk_level", f"must be one of {', '.join(LOG_LEVELS)}")
        return LoggingConfig(level=level, format=fmt, sdk_level=sdk_level)
