"""Backlog queue naming and the description paired namespaces give a backlog queue.

A paired-namespace sender parks messages for primary namespace ``contoso`` in queues
``contoso/x-servicebus-transfer/<index>`` of the secondary namespace. This module builds
and parses those paths (as plain functions and as Spark column expressions that give
the same answers) and holds the QueueDescription every backlog queue is created with.
No I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

from syphon.core.errors import BacklogPathError
from syphon.core.timespan import TIMESPAN_MAX

if TYPE_CHECKING:
    from pyspark.sql import Column

TRANSFER_SEGMENT = "x-servicebus-transfer"
MAX_INDEX = 2**31 - 1  # BacklogQueueCount is a .NET int
MAX_ENTITY_PATH_LENGTH = 260

# Azure's namespace naming rule: 6-50 characters, letters, digits and hyphens, starting
# with a letter and ending with a letter or digit. Service Bus paths are
# case-insensitive, so the transfer segment is matched without case.
_NAMESPACE = r"[A-Za-z][A-Za-z0-9-]{4,48}[A-Za-z0-9]"
_INDEX = r"0|[1-9][0-9]{0,9}"
_BODY = rf"({_NAMESPACE})/(?i:{TRANSFER_SEGMENT})/({_INDEX})"
# Only the end anchor differs: Python's \Z and Java's \z both mean "end of input" ($ in
# either would also match before a trailing newline).
BACKLOG_PATH_PATTERN = rf"^{_BODY}\Z"
_SPARK_BACKLOG_PATH_PATTERN = rf"^{_BODY}\z"
_BACKLOG_PATH = re.compile(BACKLOG_PATH_PATTERN)
_NAMESPACE_RE = re.compile(rf"^{_NAMESPACE}$")


@dataclass(frozen=True, order=True)
class BacklogQueue:
    """One backlog queue: the primary namespace it serves and its index."""

    primary: str
    index: int

    @property
    def path(self) -> str:
        """The queue's path in the secondary namespace."""
        return backlog_queue_path(self.primary, self.index)


def is_namespace_name(name: str) -> bool:
    """True when ``name`` follows Azure's Service Bus namespace naming rule."""
    return bool(_NAMESPACE_RE.match(name))


#: The path of an entity's dead-letter sub-queue is the entity's with this suffix.
DEAD_LETTER_SUFFIX = "/$DeadLetterQueue"


#: The transfer dead-letter queue's: what the service could not forward from an entity.
TRANSFER_DEAD_LETTER_SUFFIX = "/$Transfer" + DEAD_LETTER_SUFFIX


def transfer_dead_letter_path(entity: str) -> str:
    """The path of ``entity``'s transfer dead-letter queue."""
    return entity + TRANSFER_DEAD_LETTER_SUFFIX


def dead_letter_path(entity: str) -> str:
    """The path of ``entity``'s dead-letter sub-queue."""
    return entity + DEAD_LETTER_SUFFIX


def is_dead_letter_path(path: str | None) -> bool:
    """Whether ``path`` is a dead-letter sub-queue's, a transfer dead-letter queue's
    included (a backlog queue's never is)."""
    return bool(path) and str(path).endswith(DEAD_LETTER_SUFFIX)


def entity_of_dead_letter_path(path: str) -> str:
    """The entity whose dead-letter or transfer dead-letter queue ``path`` is (``path``
    itself otherwise)."""
    return path.removesuffix(TRANSFER_DEAD_LETTER_SUFFIX).removesuffix(DEAD_LETTER_SUFFIX)


def is_dead_letter_col(path: Column) -> Column:
    """Spark expression: :func:`is_dead_letter_path` of a path column."""
    return path.endswith(DEAD_LETTER_SUFFIX)


def entity_of_dead_letter_col(path: Column) -> Column:
    """Spark expression: :func:`entity_of_dead_letter_path` of a path column."""
    from pyspark.sql import functions as F

    suffix = f"({re.escape('/$Transfer')})?{re.escape(DEAD_LETTER_SUFFIX)}$"
    return F.regexp_replace(path, suffix, "")


def is_subscription_path(path: str) -> bool:
    """Whether ``path`` names a topic's subscription (``<topic>/Subscriptions/<name>``)."""
    parts = path.split("/")
    return len(parts) >= 3 and parts[-2].lower() == "subscriptions" and all(parts)


def backlog_queue_path(primary: str, index: int) -> str:
    """Builds ``<primary>/x-servicebus-transfer/<index>``.

    Args:
        primary: the primary namespace's name (``contoso``, not its host name).
        index: the backlog queue's index, 0 to 2**31-1.

    Raises:
        BacklogPathError: the name is not a namespace name or the index is out of range.
    """
    if not isinstance(primary, str) or not is_namespace_name(primary):
        raise BacklogPathError(
            f"{primary!r} is not a Service Bus namespace name (6-50 letters, digits or "
            "hyphens, starting with a letter, ending with a letter or digit)"
        )
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= MAX_INDEX:
        raise BacklogPathError(
            f"backlog queue index {index!r} is not an integer in [0, {MAX_INDEX}]"
        )
    return f"{primary}/{TRANSFER_SEGMENT}/{index}"


def match_backlog_queue_path(path: str | None) -> BacklogQueue | None:
    """Parses a backlog queue path, or returns None when ``path`` is not one."""
    if not isinstance(path, str):
        return None
    match = _BACKLOG_PATH.match(path)
    if match is None:
        return None
    index = int(match.group(2))
    if index > MAX_INDEX:
        return None
    return BacklogQueue(primary=match.group(1), index=index)


def backlog_queue_prefix(primary: str) -> str:
    """The path prefix every backlog queue of ``primary`` starts with (for prefix listing)."""
    backlog_queue_path(primary, 0)  # validates the name
    return f"{primary}/{TRANSFER_SEGMENT}/"


def backlog_primary_col(path: Column) -> Column:
    """Spark expression: the primary namespace of a backlog path, or null when not one."""
    from pyspark.sql import functions as F

    return F.when(_valid_backlog_path(path), F.regexp_extract(path, _SPARK_BACKLOG_PATH_PATTERN, 1))


def _valid_backlog_path(path: Column) -> Column:
    from pyspark.sql import functions as F

    index = F.regexp_extract(path, _SPARK_BACKLOG_PATH_PATTERN, 2)
    return path.rlike(_SPARK_BACKLOG_PATH_PATTERN) & (index.cast("long") <= F.lit(MAX_INDEX))


@dataclass(frozen=True)
class BacklogQueueDescription:
    """The properties paired namespaces set explicitly on every backlog queue.

    Field names follow ``azure.servicebus.management.QueueProperties`` so that
    :meth:`as_create_kwargs` can be passed to ``create_queue`` as it is. Every other
    property keeps the service's default.
    """

    max_size_in_megabytes: int = 5120
    max_delivery_count: int = 2**31 - 1
    default_message_time_to_live: timedelta = TIMESPAN_MAX
    auto_delete_on_idle: timedelta = TIMESPAN_MAX
    lock_duration: timedelta = timedelta(minutes=1)
    dead_lettering_on_message_expiration: bool = True
    enable_batched_operations: bool = True

    def as_create_kwargs(self) -> dict[str, Any]:
        """The description as keyword arguments for ``create_queue``."""
        return asdict(self)

    def differences(self, existing: Mapping[str, Any]) -> list[str]:
        """Names each property where an existing queue differs from this description.

        Args:
            existing: the existing queue's properties by the same names (a
                ``QueueProperties`` turned into a mapping, for instance).

        Returns:
            One line per differing property, ``name: expected X, found Y``; empty when
            the queue matches. Durations at or beyond ``TimeSpan.MaxValue`` all count as
            infinite.
        """
        problems = []
        for name, expected in asdict(self).items():
            found = existing.get(name)
            if isinstance(expected, timedelta) and isinstance(found, timedelta):
                if min(expected, TIMESPAN_MAX) == min(found, TIMESPAN_MAX):
                    continue
            elif found == expected:
                continue
            problems.append(f"{name}: expected {expected!r}, found {found!r}")
        return problems


#: The description paired namespaces create backlog queues with.
BACKLOG_QUEUE_DESCRIPTION = BacklogQueueDescription()


#: Sequence numbers at or above this carry a partition in their top 16 bits: the service
#: numbers a partitioned entity's messages per partition.
PARTITIONED_SEQUENCE: Final = 1 << 48
