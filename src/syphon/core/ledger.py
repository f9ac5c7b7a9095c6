"""The run ledger's record: one row per run and status change, typed.

The ledger table stores operations and timings as maps (``discover.peeks`` → 3) so that
any engine can read them; in code they are :class:`Operations` and :class:`Timings`,
whose fields say what a run counts. :meth:`Operations.as_map` and
:meth:`Operations.from_map` convert between the two.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

_T = TypeVar("_T", bound="_Metrics")


@dataclass
class _Metrics:
    """Fields named ``stage_what`` stored under ``stage.what``."""

    def as_map(self) -> dict[str, Any]:
        """The stored form: ``stage.what`` keys, unset fields left out."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and not isinstance(value, dict):  # dicts: see subclasses
                stage, _, what = f.name.partition("_")
                out[f"{stage}.{what}" if what else stage] = value
        return out

    def add(self, other: _Metrics) -> None:
        """Adds ``other``'s figures to these (a figure ``other`` has not set stays; a
        dict of figures is updated: it holds rates, not sums)."""
        for f in dataclasses.fields(other):
            value = getattr(other, f.name)
            if value is None:
                continue
            mine = getattr(self, f.name)
            if isinstance(value, dict):
                mine.update(value)
            else:
                setattr(self, f.name, value if mine is None else mine + value)

    @classmethod
    def from_map(cls: type[_T], stored: Mapping[str, Any] | None) -> _T:
        """Reads the stored form back (unknown keys, from other versions, are ignored)."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k.replace(".", "_", 1): v for k, v in dict(stored or {}).items()}
        return cls(**{k: v for k, v in values.items() if k in known})


#: The prefixes of the per-namespace credit figures in the stored operations.
CREDIT_KEYS = ("replay.credit_budget.", "replay.credit_rate.")


@dataclass
class Operations(_Metrics):
    """Service operations a run performed, by stage."""

    discover_management_calls: int | None = None
    discover_peeks: int | None = None
    discover_backlog_queues: int | None = None
    destinations_management_calls: int | None = None
    snapshot_queues_peeked: int | None = None
    snapshot_messages_peeked: int | None = None
    #: read once: the messages the run's reads received in peek-lock (each a credit;
    #: its settle then receives nothing)
    snapshot_messages_received: int | None = None
    #: read once with ``--take-deferred``: the deferred messages received by their
    #: sequence numbers (counted among those received too)
    snapshot_deferred_received: int | None = None
    replay_pings: int | None = None  # None: the run probed its destinations
    replay_probes: int | None = None
    replay_send_transfers: int | None = None
    replay_messages_sent: int | None = None
    replay_busy_retries: int | None = None
    settle_receives: int | None = None
    settle_completes: int | None = None
    settle_dead_letters: int | None = None
    settle_discards: int | None = None
    settle_abandons: int | None = None
    settle_requests: int | None = None
    #: per primary with a credit budget: ``replay.credit_budget.<namespace>`` (credits
    #: per second allowed) and ``replay.credit_rate.<namespace>`` (reached: messages sent
    #: there per second of sending), both whole credits
    credit_rates: dict[str, int] = field(default_factory=dict)

    @property
    def credits_estimated(self) -> int:
        """Billable operations: one per message peeked, sent or received (by the read or
        the settle), one per settlement request (a page's completions are one request),
        one per probe peek of the discovery and per ping (a destination probed by
        attaching a link is not billed; a ledger row with pings pinged its destinations
        instead). A row without settlement requests counts one per message completed or
        dead-lettered instead."""
        settled = self.settle_requests
        if settled is None:
            settled = (self.settle_completes or 0) + (self.settle_dead_letters or 0)
        billed = (
            self.snapshot_messages_peeked,
            self.snapshot_messages_received,
            self.replay_messages_sent,
            self.settle_receives,
            settled,
            self.replay_pings,
            self.discover_peeks,
        )
        return sum(v or 0 for v in billed)

    def credits_per_replayed_message(self) -> float | None:
        """Estimated credits per message replayed, once the run has settled."""
        sent = self.replay_messages_sent
        if not sent or self.settle_receives is None:
            return None
        return self.credits_estimated / sent

    @classmethod
    def from_map(cls, stored: Mapping[str, Any] | None) -> Operations:
        ops = super().from_map(stored)
        ops.credit_rates = {
            k: int(v) for k, v in dict(stored or {}).items() if k.startswith(CREDIT_KEYS)
        }
        return ops

    def as_map(self) -> dict[str, Any]:
        out = super().as_map()
        out.update(self.credit_rates)
        if self.settle_receives is not None:  # a run that reached its settle
            out["credits_estimated"] = self.credits_estimated
        return out


@dataclass
class Timings(_Metrics):
    """Seconds per stage (and, within the replay, its probes and sends; within the
    settle, its passes over the queues, before their outcomes are recorded)."""

    discover: float | None = None
    destinations: float | None = None
    snapshot: float | None = None
    reconcile: float | None = None
    audit: float | None = None
    replay: float | None = None
    replay_pings: float | None = None  # None: the run probed its destinations
    replay_probes: float | None = None
    replay_sends: float | None = None
    settle: float | None = None
    settle_passes: float | None = None


@dataclass
class RunRecord:
    """One row of the run ledger.

    Attributes:
        counts: messages by verdict (keys from :class:`syphon.core.schema.Verdict`).
        recorded_at: when the row was written (set by the store).
        source: the configured source the run drained (None: a backlog run).
        wave: of a run drained in waves, the wave the row records (1, 2, ...; None: a
            run of one wave, or the run's final row).
        watermark: that wave's cut: it took the messages enqueued before it (None: it
            took every queue to its end).
        repair: the run's repair in the operator's words (``set NAME=SQL``,
            ``unset NAME``; :meth:`syphon.core.repair.Repair.describe`); empty: none.
        job_run_id: the platform's job run that wrote the row (Databricks'
            ``{{job.run_id}}``); None: none was given.
    """

    run_id: str
    status: str
    started_at: datetime
    finished_at: datetime | None = None
    config_fingerprint: str = ""
    counts: Mapping[str, int] = field(default_factory=dict)
    operations: Operations = field(default_factory=Operations)
    timings: Timings = field(default_factory=Timings)
    detail: str | None = None
    recorded_at: datetime | None = None
    source: str | None = None
    wave: int | None = None
    watermark: datetime | None = None
    repair: tuple[str, ...] = ()
    job_run_id: str | None = None

    def as_row(self, recorded_at: datetime) -> dict[str, Any]:
        """The row as the ledger table stores it (see :data:`syphon.core.schema.RUNS`)."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "recorded_at": recorded_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "config_fingerprint": self.config_fingerprint,
            "counts": list(dict(self.counts).items()),
            "operations": list(self.operations.as_map().items()),
            "timings": list(self.timings.as_map().items()),
            "detail": self.detail,
            "credits_per_replayed_message": self.operations.credits_per_replayed_message(),
            "source": self.source,
            "wave": self.wave,
            "watermark": self.watermark,
            "repair": json.dumps(list(self.repair)) if self.repair else None,
            "job_run_id": self.job_run_id,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunRecord:
        """A stored row (maps as lists of pairs or dicts) back as a record."""
        return cls(
            run_id=row["run_id"],
            status=row["status"],
            started_at=row["started_at"],
            finished_at=row.get("finished_at"),
            config_fingerprint=row.get("config_fingerprint") or "",
            counts={k: int(v) for k, v in dict(row.get("counts") or {}).items()},
            operations=Operations.from_map(dict(row.get("operations") or {})),
            timings=Timings.from_map(dict(row.get("timings") or {})),
            detail=row.get("detail"),
            recorded_at=row.get("recorded_at"),
            source=row.get("source"),
            wave=row.get("wave"),
            watermark=row.get("watermark"),
            repair=tuple(json.loads(row.get("repair") or "[]")),
            job_run_id=row.get("job_run_id"),
        )


def latest_per_run(records: list[RunRecord]) -> dict[str, RunRecord]:
    """Each run's newest row."""
    latest: dict[str, RunRecord] = {}
    for r in records:
        seen = latest.get(r.run_id)
        if seen is None or (r.recorded_at or r.started_at) >= (seen.recorded_at or seen.started_at):
            latest[r.run_id] = r
    return latest
