"""``syphon status``: the backlog's depth and the last runs (no Spark with delta-rs)."""

from __future__ import annotations

from dataclasses import dataclass

from syphon.core.ledger import RunRecord, latest_per_run
from syphon.job.context import RunContext
from syphon.job.plan import discover
from syphon.servicebus.discovery import DiscoveredQueue


@dataclass
class StatusReport:
    """Backlog depth per queue and the ledger's last runs (newest first)."""

    queues: list[DiscoveredQueue]
    runs: list[RunRecord]


def status(ctx: RunContext, last_runs: int = 10) -> StatusReport:
    """Discovers the backlog queues (with their depth when the management API tells it)
    and reads the last runs' latest rows from the ledger."""
    queues = discover(ctx)
    latest = latest_per_run(ctx.store.runs())
    runs = sorted(latest.values(), key=lambda r: r.started_at, reverse=True)[:last_runs]
    return StatusReport(queues, runs)
