"""Entity declarations: what a queue is before any message reaches it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from servicebus_emulator.filters import (
    CorrelationFilter,
    RuleFilter,
    RuleSpec,
    SqlAction,
    SqlFilter,
    TrueFilter,
)

STANDARD_MAX_MESSAGE_KB = 256
#: The service's limit on one batch, whatever the entity's message size.
MAX_BATCH_BYTES = 1024 * 1024
PREMIUM_MAX_MESSAGE_KB = 1024


class EntityConfigError(ValueError):
    """An entity declaration is malformed."""


@dataclass(frozen=True)
class QueueSpec:
    """A queue's properties, with the service's defaults.

    Durations are timedeltas; ``default_message_time_to_live`` None means infinite.
    ``max_message_size_in_kilobytes`` 256 is the standard tier; 1024 gives premium-style
    1 MB messages and batches.
    """

    name: str
    lock_duration: timedelta = timedelta(minutes=1)
    max_delivery_count: int = 10
    default_message_time_to_live: timedelta | None = None
    dead_lettering_on_message_expiration: bool = False
    requires_session: bool = False
    requires_duplicate_detection: bool = False
    duplicate_detection_history_window: timedelta = timedelta(minutes=10)
    max_size_in_megabytes: int = 1024
    max_message_size_in_kilobytes: int = STANDARD_MAX_MESSAGE_KB
    enable_partitioning: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    auto_delete_on_idle: timedelta | None = None
    enable_batched_operations: bool = True
    enable_express: bool = False
    status: str = "Active"
    user_metadata: str | None = None

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_size_in_kilobytes * 1024

    @property
    def max_batch_bytes(self) -> int:
        """A batch's limit: the message size, at most 1 MB (premium entities take larger
        messages, one at a time)."""
        return min(self.max_message_bytes, MAX_BATCH_BYTES)


@dataclass(frozen=True)
class SubscriptionSpec:
    """A subscription's properties; ``rules`` empty means the default true-filter rule."""

    name: str
    lock_duration: timedelta = timedelta(minutes=1)
    requires_session: bool = False
    default_message_time_to_live: timedelta | None = None
    dead_lettering_on_message_expiration: bool = False
    dead_lettering_on_filter_evaluation_exceptions: bool = True
    max_delivery_count: int = 10
    enable_batched_operations: bool = True
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    auto_delete_on_idle: timedelta | None = None
    status: str = "Active"
    user_metadata: str | None = None
    rules: tuple[RuleSpec, ...] = ()


@dataclass(frozen=True)
class TopicSpec:
    """A topic's properties and its subscriptions (declared with it)."""

    name: str
    default_message_time_to_live: timedelta | None = None
    max_size_in_megabytes: int = 1024
    requires_duplicate_detection: bool = False
    duplicate_detection_history_window: timedelta = timedelta(minutes=10)
    enable_batched_operations: bool = True
    auto_delete_on_idle: timedelta | None = None
    enable_partitioning: bool = False
    support_ordering: bool = True
    enable_express: bool = False
    status: str = "Active"
    user_metadata: str | None = None
    max_message_size_in_kilobytes: int = STANDARD_MAX_MESSAGE_KB
    subscriptions: tuple[SubscriptionSpec, ...] = ()

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_size_in_kilobytes * 1024

    @property
    def max_batch_bytes(self) -> int:
        """A batch's limit: the message size, at most 1 MB (premium entities take larger
        messages, one at a time)."""
        return min(self.max_message_bytes, MAX_BATCH_BYTES)


_DURATIONS = {
    "lock_duration",
    "default_message_time_to_live",
    "duplicate_detection_history_window",
    "auto_delete_on_idle",
}


def _values(kind: str, cls: type, raw: Any, nested: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise EntityConfigError(f"every {kind} must be a mapping")
    known = {f.name for f in fields(cls)} - set(nested)
    unknown = set(raw) - known - set(nested)
    if unknown:
        raise EntityConfigError(f"unknown {kind} properties: {sorted(unknown)}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise EntityConfigError(f"every {kind} needs a name")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in nested:
            continue
        if key in _DURATIONS and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise EntityConfigError(f"{raw['name']}: {key} must be seconds (a number)")
            value = timedelta(seconds=value)
        values[key] = value
    return values


def spec_from_mapping(raw: dict[str, Any]) -> QueueSpec:
    """A QueueSpec from YAML-style data; durations in seconds (numbers).

    Raises:
        EntityConfigError: unknown keys or wrong types.
    """
    return QueueSpec(**_values("queue", QueueSpec, raw))


def _rule_from_mapping(raw: Any) -> RuleSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise EntityConfigError("every rule needs a name")
    unknown = set(raw) - {"name", "sql", "correlation", "action", "parameters"}
    if unknown:
        raise EntityConfigError(f"unknown rule properties: {sorted(unknown)}")
    params = raw.get("parameters") or {}
    rule_filter: RuleFilter = TrueFilter()
    if "sql" in raw:
        rule_filter = SqlFilter(str(raw["sql"]), params)
    elif "correlation" in raw:
        corr = dict(raw["correlation"] or {})
        props = corr.pop("properties", {}) or {}
        try:
            rule_filter = CorrelationFilter(**corr, properties=props)
        except TypeError as exc:
            raise EntityConfigError(f"rule {raw['name']}: {exc}") from None
    action = SqlAction(str(raw["action"]), params) if raw.get("action") else None
    return RuleSpec(name=raw["name"], filter=rule_filter, action=action)


def topic_from_mapping(raw: dict[str, Any]) -> TopicSpec:
    """A TopicSpec (with ``subscriptions``, each with optional ``rules``) from YAML data.

    A rule is ``{name, sql: "Color = 'Red'"}``, ``{name, correlation: {subject: …,
    properties: {…}}}`` or just ``{name}`` (true filter), with optional ``action``.

    Raises:
        EntityConfigError: unknown keys or wrong types.
    """
    values = _values("topic", TopicSpec, raw, nested=("subscriptions",))
    subs = []
    for sub in raw.get("subscriptions") or []:
        sub_values = _values("subscription", SubscriptionSpec, sub, nested=("rules",))
        rules = tuple(_rule_from_mapping(r) for r in sub.get("rules") or [])
        subs.append(SubscriptionSpec(**sub_values, rules=rules))
    return TopicSpec(**values, subscriptions=tuple(subs))


@dataclass
class NamespaceSpec:
    """Everything declared up front, as loaded from YAML."""

    queues: list[QueueSpec] = field(default_factory=list)
    topics: list[TopicSpec] = field(default_factory=list)


def load_entities(path: str | Path) -> NamespaceSpec:
    """Reads ``queues: [{name: …, …}]`` and ``topics: [{name: …, subscriptions: […]}]``.

    Raises:
        EntityConfigError: the file is malformed.
    """
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict) or not all(
        isinstance(raw.get(k, []), list) for k in ("queues", "topics")
    ):
        raise EntityConfigError(f"{path}: expected a mapping with 'queues' and 'topics' lists")
    return NamespaceSpec(
        queues=[spec_from_mapping(q) for q in raw.get("queues", [])],
        topics=[topic_from_mapping(t) for t in raw.get("topics", [])],
    )
