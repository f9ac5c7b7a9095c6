"""A lease in Delta, so that two runs never replay at once.

The lease lives in the commit log of a small Delta table, ``leases``, under the audit
path. Every action is one commit whose metadata names the holder, the action
(``acquire``, ``renew``, ``release``) and the expiry. Delta numbers commits one after
another and never gives two writers the same version, so every reader replays the same
history in the same order and comes to the same answer:

- an ``acquire`` wins when nobody holds the lease at that commit (never taken, released,
  or expired by the commit's time); otherwise it loses, for good;
- a ``renew`` extends the lease only if its writer still holds it at that commit (a
  holder that let the lease expire cannot take it back from a newer holder);
- a ``release`` by the holder frees it.

A crashed holder stops renewing; its lease expires after ``ttl`` and the next run takes
it. Commit times come from the writers' clocks: skew between machines shifts when a
lease counts as expired, never who holds it.

"Never the same version" rests on the store: delta-rs writes a commit file only if it
does not exist yet, atomically, which a local file system (a hard link), Azure Blob
storage and ADLS (a create with ``If-None-Match: *``) and GCS do. On S3, delta-rs needs
S3's conditional writes (``aws_conditional_put``) or a locking provider in
``audit.storage.options``; without one, two runs' commits can overwrite each other.

Where the commits go is a :class:`LeaseLog`: :class:`DeltaRsLeaseLog` (the ``leases``
table under ``audit.path``, committed by delta-rs) or, with ``audit.engine: spark``,
:class:`syphon.store.catalog.SparkLeaseLog` (the catalog table ``<audit.table>_leases``,
committed by Spark's Delta, whose log store gives the same guarantee). The rules above
are the same for both.
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from syphon.core.errors import LeaseLostError
from syphon.core.render import arrow_schema
from syphon.core.schema import LEASE
from syphon.store.delta import append_arrow, guarded
from syphon.store.location import Location, as_location

log = logging.getLogger(__name__)

LEASES_TABLE = "leases"

_HOLDER = "syphon.lease.holder"
_ACTION = "syphon.lease.action"
_EXPIRES = "syphon.lease.expires"


@dataclass(frozen=True)
class LeaseState:
    """Who holds the lease after the last commit, and until when."""

    holder: str | None
    expires_at: datetime | None

    def belongs_to(self, holder: str, now: datetime) -> bool:
        """Whether ``holder`` has the lease at ``now``."""
        return self.holder == holder and self.expires_at is not None and self.expires_at > now


def _utc_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def replay_history(commits: list[dict[str, Any]]) -> LeaseState:
    """The lease's state after ``commits`` (Delta history entries, any order)."""
    holder: str | None = None
    expires: datetime | None = None
    for commit in sorted(commits, key=lambda c: int(c["version"])):
        action = commit.get(_ACTION)
        who = commit.get(_HOLDER)
        if action is None or who is None:
            continue  # the table's creation, or a foreign commit
        at = _utc_ms(int(commit["timestamp"]))
        until = datetime.fromisoformat(str(commit.get(_EXPIRES)))
        free = expires is None or expires < at  # a holder always has an expiry
        if action == "acquire" and free:
            holder, expires = who, until
        elif action == "renew" and holder == who and expires is not None and expires >= at:
            expires = until
        elif action == "release" and holder == who:
            holder, expires = None, None
    return LeaseState(holder, expires)


def heartbeat_interval(ttl: timedelta) -> float:
    """Seconds between renewals: a third of the TTL (two renewals may fail before the
    lease expires), at least 50 ms."""
    return max(ttl.total_seconds() / 3, 0.05)


class LeaseLog(Protocol):
    """Where a lease's commits go and are read back, one commit per action."""

    @property
    def where(self) -> str:
        """Where the log is, for messages."""
        ...

    def commit(self, row: dict[str, Any], metadata: dict[str, str]) -> None:
        """Appends ``row`` (a :data:`~syphon.core.schema.LEASE` row) in one commit whose
        metadata is ``metadata``."""
        ...

    def history(self) -> list[dict[str, Any]]:
        """Every commit: its ``version``, its ``timestamp`` (epoch ms) and its metadata's
        keys; none before the first."""
        ...

    #: Whether reading the history runs a Spark job, which waits for a task slot while
    #: the run's own tasks hold them all: the heartbeat then only commits its renewals,
    #: and the run learns of a lost lease at its next check (a stage's boundary).
    history_needs_tasks: bool


class DeltaRsLeaseLog:
    """The ``leases`` table under ``root`` (``audit.path``), committed by delta-rs with
    the metadata as the commit's ``custom_metadata``."""

    history_needs_tasks = False

    def __init__(self, root: Location | str | os.PathLike[str]) -> None:
        location = as_location(root)
        self.where = location.shown
        self.table = location.child(LEASES_TABLE)

    def commit(self, row: dict[str, Any], metadata: dict[str, str]) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]
        from deltalake import CommitProperties

        arrow = pa.Table.from_pylist([row], schema=arrow_schema(LEASE))
        with guarded(self.where, f"{row['action']} the lease"):
            append_arrow(arrow, self.table, CommitProperties(custom_metadata=metadata))

    def history(self) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        with guarded(self.where, "read the lease"):
            table = DeltaTable(self.table.uri, storage_options=self.table.storage_options())
            return list(table.history())


class Lease:
    """One run's lease.

    Args:
        log: where its commits go: a :class:`LeaseLog`, or the audit path (a
            :class:`~syphon.store.location.Location` or a local path) whose ``leases``
            table delta-rs commits to.
        holder: who asks (the run id, plus a random suffix so that two attempts of
            one run are told apart).
        ttl: how long an acquire or renew holds without another renew.
    """

    def __init__(
        self, log: LeaseLog | Location | str | os.PathLike[str], holder: str, ttl: timedelta
    ) -> None:
        if isinstance(log, (Location, str, os.PathLike)):
            log = DeltaRsLeaseLog(log)
        self.log: LeaseLog = log
        self.holder = f"{holder}#{uuid.uuid4().hex[:8]}"
        self.ttl = ttl

    def _commit(self, action: str) -> None:
        now = datetime.now(timezone.utc)
        expires = now + self.ttl if action != "release" else now
        row = {"holder": self.holder, "action": action, "recorded_at": now, "expires_at": expires}
        metadata = {_HOLDER: self.holder, _ACTION: action, _EXPIRES: expires.isoformat()}
        self.log.commit(row, metadata)

    def state(self) -> LeaseState:
        return replay_history(self.log.history())

    def acquire(self) -> LeaseState:
        """Asks for the lease; returns the state after asking (check ``belongs_to``)."""
        self._commit("acquire")
        return self.state()

    def ours(self) -> bool:
        """Whether this holder has the lease now."""
        return self.state().belongs_to(self.holder, datetime.now(timezone.utc))

    def renew(self) -> None:
        """Extends the lease.

        Raises:
            LeaseLostError: the lease is no longer this holder's.
        """
        self._commit("renew")
        if not self.ours():
            raise self._lost()

    def release(self) -> None:
        self.stop_heartbeat()
        self._commit("release")

    def start_heartbeat(self) -> None:
        """Renews every third of the TTL on a daemon thread until released; a lost lease
        is remembered in ``lost`` (checked by the run at its stage boundaries)."""
        import threading

        self._stop = threading.Event()

        def beat() -> None:
            interval = heartbeat_interval(self.ttl)
            while not self._stop.wait(interval):
                try:
                    if self.log.history_needs_tasks:
                        self._commit("renew")  # checked at the run's next check
                    else:
                        self.renew()
                except LeaseLostError:
                    self.lost = True
                    return
                except Exception as exc:  # a failed write: the next beat tries again
                    log.warning("lease renewal failed (%s)", type(exc).__name__)

        self.lost = False
        self._thread = threading.Thread(target=beat, name="syphon-lease", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            self._thread.join(timeout=5)

    def check(self) -> None:
        """Raises LeaseLostError when the heartbeat found the lease lost."""
        if getattr(self, "lost", False) or not self.ours():
            raise self._lost()

    def _lost(self) -> LeaseLostError:
        seconds = f"{self.ttl.total_seconds():g}"
        return LeaseLostError(
            f"the lease of {self.holder} was lost",
            fix=f"this run went more than run.lease_seconds ({seconds} s) without renewing "
            "its lease and another run may hold it: it settles nothing more, and the next "
            "run settles what it sent; if runs stall that long, raise run.lease_seconds",
        )
