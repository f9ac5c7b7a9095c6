"""Entity declarations: what a queue is before any message reaches it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

STANDARD_MAX_MESSAGE_KB = 256
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

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_size_in_kilobytes * 1024


_DURATIONS = {
    "lock_duration",
    "default_message_time_to_live",
    "duplicate_detection_history_window",
}


def spec_from_mapping(raw: dict[str, Any]) -> QueueSpec:
    """A QueueSpec from YAML-style data; durations in seconds (numbers).

    Raises:
        EntityConfigError: unknown keys or wrong types.
    """
    known = {f.name for f in fields(QueueSpec)}
    unknown = set(raw) - known
    if unknown:
        raise EntityConfigError(f"unknown queue properties: {sorted(unknown)}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise EntityConfigError("every queue needs a name")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _DURATIONS and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise EntityConfigError(f"{raw['name']}: {key} must be seconds (a number)")
            value = timedelta(seconds=value)
        values[key] = value
    return QueueSpec(**values)


@dataclass
class NamespaceSpec:
    """Everything declared up front, as loaded from YAML."""

    queues: list[QueueSpec] = field(default_factory=list)


def load_entities(path: str | Path) -> NamespaceSpec:
    """Reads ``queues: [{name: …, …}]`` from a YAML file.

    Raises:
        EntityConfigError: the file is malformed.
    """
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict) or not isinstance(raw.get("queues", []), list):
        raise EntityConfigError(f"{path}: expected a mapping with a 'queues' list")
    return NamespaceSpec(queues=[spec_from_mapping(q) for q in raw.get("queues", [])])
