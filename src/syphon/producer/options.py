"""The paired sender's options, counters, routes and errors."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from syphon.core.errors import SyphonError

log = logging.getLogger(__name__)

PRIMARY, SECONDARY = "primary", "secondary"


class PairedNamespaceError(SyphonError):
    """A paired-namespace send cannot be done."""


class BacklogUnavailableError(PairedNamespaceError):
    """Every backlog queue has failed a send and left the rotation."""


class BacklogMessageTooLargeError(PairedNamespaceError, ValueError):
    """A message's backlog form (the original plus its aliases) exceeds the limit."""


class PairedClientClosedError(PairedNamespaceError):
    """The paired client (or one of its sides) is closed or faulted."""


@dataclass(frozen=True)
class SendAvailabilityOptions:
    """The send-availability options of a paired namespace (Service Bus's names and
    defaults).

    Attributes:
        backlog_queue_count: backlog queues per primary namespace (default 10).
        failover_interval: how long an entity may go without a successful send after a
            non-transient failure before it fails over.
        ping_primary_interval: how often a failed-over entity is pinged (default 1
            minute).
        partner_close_timeout: how long the other side may stay open after one side is
            closed or faults (default 5 seconds).
    """

    backlog_queue_count: int = 10
    failover_interval: timedelta = timedelta(minutes=1)
    ping_primary_interval: timedelta = timedelta(minutes=1)
    partner_close_timeout: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if self.backlog_queue_count < 1:
            raise ValueError("backlog_queue_count must be at least 1")
        for name in ("failover_interval", "ping_primary_interval", "partner_close_timeout"):
            if getattr(self, name) < timedelta(0):
                raise ValueError(f"{name} must not be negative")


@dataclass
class PairedCounters:
    """What a paired client did: the operations a paired namespace is billed for."""

    primary_sends: int = 0
    primary_failures: int = 0
    backlog_sends: int = 0
    backlog_failures: int = 0
    pings_sent: int = 0
    pings_failed: int = 0
    failovers: int = 0
    recoveries: int = 0
    backlog_queues_removed: int = 0


@dataclass(frozen=True)
class SendRoute:
    """Where one ``send_messages`` call went: ``primary`` or ``backlog`` (and which
    queue), with the number of messages."""

    target: str
    queue: str
    count: int


def close_quietly(handler: Any) -> None:
    """Closes an SDK client or sender; one of a failed namespace may fail to close."""
    if handler is None:
        return
    try:
        handler.close()
    except Exception as exc:
        log.debug("closing %s failed: %s", type(handler).__name__, type(exc).__name__)
