"""A primary namespace's entities and the settings the reconcile needs of them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from syphon.core.schema import DESTINATIONS, Field, names
from syphon.servicebus.access import Access


def list_destinations(access: Access) -> list[tuple[Any, ...]]:
    """Every queue and topic of the namespace, as rows of
    :data:`syphon.core.schema.DESTINATIONS` (two management calls).

    Raises:
        azure.core.exceptions.AzureError, OSError: the management API did not answer.
    """

    def row(entity: Any, requires_session: bool) -> tuple[Any, ...]:
        size = (entity.max_message_size_in_kilobytes or 0) * 1024
        return row_of(
            DESTINATIONS,
            primary=access.namespace,
            destination=entity.name,
            exists=True,
            requires_duplicate_detection=bool(entity.requires_duplicate_detection),
            requires_session=requires_session,
            max_message_bytes=size or access.max_message_bytes,
            partitioned=bool(entity.enable_partitioning),
            duplicate_detection_window_seconds=_seconds(
                entity.duplicate_detection_history_time_window
            ),
        )

    with access.admin_client() as admin:
        queues = [row(q, bool(q.requires_session)) for q in admin.list_queues()]
        return queues + [row(t, False) for t in admin.list_topics()]


def _seconds(window: Any) -> float | None:
    """A window the SDK read (a timedelta, or None), in seconds."""
    return None if window is None else float(window.total_seconds())


def listing_failed(exc: BaseException) -> bool:
    """True when ``exc`` means the management API did not answer (its settings are then
    unknown), rather than a bug."""
    from azure.core.exceptions import AzureError

    return isinstance(exc, (AzureError, OSError))


def row_of(fields: Iterable[Field], **values: Any) -> tuple[Any, ...]:
    """A row of the schema ``fields``, its values given by column name.

    Raises:
        ValueError: a column without a value, or a value for no column.
    """
    columns = names(fields)
    missing, unknown = set(columns) - set(values), set(values) - set(columns)
    if missing or unknown:
        raise ValueError(f"row: no value for {sorted(missing)}; no column {sorted(unknown)}")
    return tuple(values[c] for c in columns)
