"""``syphon status``: a source's depth per queue and its last runs (no Spark with
delta-rs)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

from syphon.core.ledger import RunRecord, latest_per_run
from syphon.job.context import RunContext
from syphon.job.sources import RunSource
from syphon.servicebus.discovery import DiscoveredQueue, count_messages


@dataclass
class StatusReport:
    """A source's depth per queue and its last runs in the ledger (newest first)."""

    queues: list[DiscoveredQueue]
    runs: list[RunRecord]
    source: str = "backlog"


def status(ctx: RunContext, source: RunSource, last_runs: int = 10) -> StatusReport:
    """Discovers the source's queues (with their depth when a management listing tells
    it; else 0 or unknown) and reads its last runs' latest rows from the ledger (rows
    without a source count as the backlog's)."""
    queues = source.discover(ctx)
    unknown = [q.path for q in queues if q.message_count is None and q.unreadable is None]
    if unknown:  # a source of named entities is probed: their depth, by management
        with contextlib.suppress(Exception):
            counts = count_messages(source.access, unknown)
            queues = [
                replace(q, message_count=counts[q.path]) if q.path in counts else q for q in queues
            ]
    latest = latest_per_run(ctx.store.runs())
    mine = [
        r
        for r in latest.values()
        if r.source == source.name or (r.source is None and source.kind == "backlog")
    ]
    runs = sorted(mine, key=lambda r: r.started_at, reverse=True)[:last_runs]
    return StatusReport(queues, runs, source.name)
