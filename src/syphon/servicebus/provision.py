"""Backlog queue provisioning, as Service Bus's paired namespaces create them.

For each index in ``[0, count)`` the queue ``<primary>/x-servicebus-transfer/<index>``
is created in the secondary namespace with the backlog QueueDescription, after checking
whether it exists. Existing queues are never changed or deleted: a queue whose
description differs is reported, and so are *extra* backlog queues (indices at or
beyond ``count``), which paired namespaces allow and which the job drains too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from syphon.core.naming import (
    BACKLOG_QUEUE_DESCRIPTION,
    MAX_INDEX,
    BacklogQueueDescription,
    backlog_queue_path,
    backlog_queue_prefix,
    match_backlog_queue_path,
)

log = logging.getLogger(__name__)

_COMPARED = tuple(BACKLOG_QUEUE_DESCRIPTION.as_create_kwargs())


@dataclass
class ProvisionResult:
    """What provisioning found and did for one primary namespace."""

    primary: str
    count: int
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    mismatched: dict[str, list[str]] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        """One line per extra queue and per differing property of an existing queue."""
        out = [
            f"{path}: extra backlog queue (index beyond {self.count - 1}); left in place, "
            "and drained by the job"
            for path in self.extras
        ]
        for path, problems in self.mismatched.items():
            out.extend(f"{path}: differs from the backlog description: {p}" for p in problems)
        return out

    def summary(self) -> str:
        return (
            f"{self.primary}: {len(self.created)} created, {len(self.existing)} already "
            f"there, {len(self.extras)} extra, {len(self.mismatched)} differing"
        )


def provision_backlog(
    admin: Any,
    primary: str,
    count: int = 10,
    description: BacklogQueueDescription = BACKLOG_QUEUE_DESCRIPTION,
) -> ProvisionResult:
    """Creates the missing backlog queues of ``primary`` and reports the rest.

    Args:
        admin: a ``ServiceBusAdministrationClient`` for the secondary namespace.
        primary: the primary namespace's name.
        count: the backlog queue count (paired namespaces default to 10).
        description: the properties of a new backlog queue.

    Raises:
        ValueError: ``count`` outside [1, 2**31 - 1].
    """
    from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError

    if not 1 <= count <= MAX_INDEX:
        raise ValueError(f"the backlog queue count must be in [1, {MAX_INDEX}], not {count}")
    result = ProvisionResult(primary=primary, count=count)
    wanted = [backlog_queue_path(primary, i) for i in range(count)]
    for path in wanted:
        try:
            existing = admin.get_queue(path)
        except ResourceNotFoundError:
            try:
                admin.create_queue(path, **description.as_create_kwargs())
            except ResourceExistsError:  # another provisioner was faster
                existing = admin.get_queue(path)
            else:
                result.created.append(path)
                log.info("created backlog queue %s", path)
                continue
        result.existing.append(path)
        found = {name: getattr(existing, name, None) for name in _COMPARED}
        problems = description.differences(found)
        if problems:
            result.mismatched[path] = problems
    prefix = backlog_queue_prefix(primary).lower()
    for queue in admin.list_queues():
        name = queue.name
        if not name.lower().startswith(prefix):
            continue
        parsed = match_backlog_queue_path(name)
        if parsed is not None and parsed.index >= count:
            result.extras.append(name)
    result.extras.sort(key=lambda p: (len(p), p))
    for warning in result.warnings:
        log.warning("%s", warning)
    return result
