"""A primary namespace's entities and the settings the reconcile needs of them."""

from __future__ import annotations

from typing import Any

from syphon.servicebus.access import Access


def list_destinations(access: Access) -> list[tuple[Any, ...]]:
    """Every queue and topic of the namespace, as rows of
    :data:`syphon.core.schema.DESTINATIONS` (two management calls).

    Raises:
        azure.core.exceptions.AzureError, OSError: the management API did not answer.
    """
    limit = access.max_message_bytes
    out: list[tuple[Any, ...]] = []
    with access.admin_client() as admin:
        for q in admin.list_queues():
            size = (q.max_message_size_in_kilobytes or 0) * 1024 or limit
            out.append((access.namespace, q.name, True, bool(q.requires_duplicate_detection),
                        bool(q.requires_session), size, bool(q.enable_partitioning)))  # fmt: skip
        for t in admin.list_topics():
            size = (t.max_message_size_in_kilobytes or 0) * 1024 or limit
            out.append((access.namespace, t.name, True, bool(t.requires_duplicate_detection),
                        False, size, bool(t.enable_partitioning)))  # fmt: skip
    return out


def listing_failed(exc: BaseException) -> bool:
    """True when ``exc`` means the management API did not answer (its settings are then
    unknown), rather than a bug."""
    from azure.core.exceptions import AzureError

    return isinstance(exc, (AzureError, OSError))
