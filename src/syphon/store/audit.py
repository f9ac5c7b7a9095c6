"""The audit store: one interface, chosen once from the config.

- ``audit`` — one row per message per run and stage (:data:`syphon.core.schema.AUDIT`):
  where the message was found, its keys, verdict and reason, sizes and body hash (never
  the body), the planned batch and position; the replay and the settle append their
  outcomes as rows of their own.
- ``runs`` — the run ledger (:data:`syphon.core.schema.RUNS`): one row per run and status
  change.

Two backends implement :class:`AuditStore`: :class:`syphon.store.deltars.DeltaRsStore`
(Delta tables at ``audit.path``, written as Parquet and committed by delta-rs)
and :class:`syphon.store.catalog.CatalogStore` (catalog tables through Spark's own
table format). :func:`syphon.store.backend.open_store` picks one; nothing else asks which. The
lease is each backend's (a delta-rs table at ``audit.path``, or a catalog table through
Spark); the run reports and the replay's journal are files at ``audit.path`` with either.

A store reads through Spark only when asked for a DataFrame: it is given a *provider*
that starts the session on first use, so a run that needs no Spark starts none.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from syphon.core.ledger import RunRecord
from syphon.core.schema import Stage
from syphon.store import queries
from syphon.store.figures import RunFigures, SparkFigures
from syphon.store.lease import Lease
from syphon.store.location import Location
from syphon.store.reports import write_page

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame, SparkSession

#: Starts (or returns) the Spark session when a store first needs it.
SparkProvider = Callable[[], "SparkSession"]

AUDIT_TABLE = "audit"
RUNS_TABLE = "runs"


class AuditStore(Protocol):
    """Where a run's plan, outcomes and ledger rows go, and what runs read back."""

    @property
    def where(self) -> str:
        """Where the audit is, for messages: a folder or URI, or a catalog table."""
        ...

    def append_rows(
        self, rows: pa.Table, run_id: str, stage: str, commit: str | None = None
    ) -> int:
        """Appends audit rows the driver holds, a stage's of ``run_id`` (a wave's plan:
        :func:`syphon.job.plan.facts.plan_rows`; its outcomes:
        :func:`syphon.job.plan.facts.outcome_rows`) in one commit; returns how many.
        ``commit`` as for :meth:`append_outcomes`."""
        ...

    def append_outcomes(
        self,
        results: DataFrame,
        planned: DataFrame,
        run_id: str,
        stage: str,
        recorded_at: datetime,
        commit: str | None = None,
    ) -> int:
        """Appends a stage's results (keys from ``planned``: an earlier run's plan rows,
        read back from the audit) in one commit; returns how many rows. ``commit`` names
        the commit for Delta's idempotent writes: an append retried under the same name
        (a wave's outcomes, committed by the wave or read from its journal after a
        crash) is written once, whichever comes first."""
        ...

    def append_run(self, record: RunRecord) -> None:
        """Appends a row to the run ledger."""
        ...

    def runs(self) -> list[RunRecord]:
        """Every row of the run ledger (a few per run), oldest first."""
        ...

    def audit(self) -> DataFrame | None:
        """Every audit row, as Spark reads them; None before the first plan."""
        ...

    def run_rows(self, run_id: str, stage: str | None = None) -> DataFrame | None:
        """One run's audit rows (of one stage); None when there is no audit yet."""
        ...

    def replayed(self) -> DataFrame | None:
        """What earlier runs' replays delivered (for duplicates across runs)."""
        ...

    def in_doubt(self) -> DataFrame | None:
        """Backlog messages whose earlier send is unknown."""
        ...

    def spread_groups(self, run_id: str) -> DataFrame | None:
        """A run's replay groups spread over several backlog queues."""
        ...

    def run_figures(self, run_id: str) -> RunFigures | None:
        """What a run's report reads of its rows (:mod:`syphon.store.figures`), asked
        of the engine that reads this store best; None when there is no audit yet."""
        ...

    def waiting_before(self, waiting: DataFrame, run_id: str) -> DataFrame:
        """Which of ``waiting`` (messages a run left waiting for the operator) an earlier
        run left waiting too."""
        ...

    def lease(self, run_id: str, ttl: timedelta) -> Lease:
        """The lease that keeps two runs from replaying at once."""
        ...

    def write_report(self, run_id: str, page: bytes) -> str:
        """Writes a run's report page; returns where."""
        ...

    @property
    def files(self) -> Location:
        """The folder of the reports and the replay's journal (``audit.path``)."""
        ...


class TableStore(abc.ABC):
    """What both backends share: the questions asked of the tables (the same
    transforms, :mod:`syphon.store.queries`), the reports at ``location``
    (``audit.path``), and the lease there unless the backend keeps its own."""

    def __init__(self, location: Location, spark: SparkProvider) -> None:
        self.location = location
        self._spark = spark

    @property
    def files(self) -> Location:
        return self.location

    @property
    @abc.abstractmethod
    def where(self) -> str: ...

    @abc.abstractmethod
    def _append(self, frame: DataFrame, table: str, label: str, commit: str | None = None) -> int:
        """Appends ``frame`` to a table in one commit; returns how many rows. With
        ``commit``, a table that has a commit of that name already is not written again
        (Delta's application transactions: app id ``commit``, version 1)."""

    @abc.abstractmethod
    def append_run(self, record: RunRecord) -> None: ...

    @abc.abstractmethod
    def runs(self) -> list[RunRecord]: ...

    @abc.abstractmethod
    def audit(self) -> DataFrame | None: ...

    @abc.abstractmethod
    def _append_rows(
        self, rows: pa.Table, table: str, label: str, commit: str | None = None
    ) -> int:
        """Appends ``rows`` (Arrow, with the table's columns) as :meth:`_append` does."""

    def append_rows(
        self, rows: pa.Table, run_id: str, stage: str, commit: str | None = None
    ) -> int:
        return self._append_rows(rows, AUDIT_TABLE, f"{stage}-{run_id}", commit)

    def append_outcomes(
        self,
        results: DataFrame,
        planned: DataFrame,
        run_id: str,
        stage: str,
        recorded_at: datetime,
        commit: str | None = None,
    ) -> int:
        frame = queries.outcome_audit_rows(results, planned, run_id, stage, recorded_at)
        return self._append(frame, AUDIT_TABLE, f"{stage}-{run_id}", commit)

    def run_rows(self, run_id: str, stage: str | None = None) -> DataFrame | None:
        audit = self.audit()
        return None if audit is None else queries.run_rows(audit, run_id, stage)

    def replayed(self) -> DataFrame | None:
        audit = self.audit()
        return None if audit is None else queries.replayed_messages(audit)

    def in_doubt(self) -> DataFrame | None:
        records = self.runs()
        audit = self.audit() if records else None
        if audit is None:
            return None
        return queries.in_doubt_messages(audit, queries.interrupted_runs(records))

    def spread_groups(self, run_id: str) -> DataFrame | None:
        plan = self.run_rows(run_id, Stage.PLAN)
        return None if plan is None else queries.spread_groups(plan)

    def run_figures(self, run_id: str) -> RunFigures | None:
        rows = self.run_rows(run_id)
        return None if rows is None else SparkFigures(rows, run_id)

    def waiting_before(self, waiting: DataFrame, run_id: str) -> DataFrame:
        audit = self.audit()
        return waiting.limit(0) if audit is None else queries.waiting_before(audit, waiting, run_id)

    def lease(self, run_id: str, ttl: timedelta) -> Lease:
        return Lease(self.location, run_id, ttl)

    def write_report(self, run_id: str, page: bytes) -> str:
        return write_page(self.location, run_id, page)
