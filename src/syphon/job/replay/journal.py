"""The replay's journal: each transfer recorded as it happens, so that a crash leaves in
doubt only the batches whose transfer had started and whose result was never recorded.

The replay's outcomes reach the audit in one commit at the end of a wave. Until then
they are in the journal, a folder per wave attempt below the audit's location
(``journal/<run id>/<journal id>/``):

- ``_open``, written by the driver before the wave records ``replaying`` (a wave whose
  journal has no ``_open`` is read as having none: every message it planned and did not
  record is in doubt, the rule without a journal);
- ``<task>-<n>.json``, written by a replay task before its ``n``-th transfer, whole or
  not at all: the places (queue, sequence number) the transfer is about to send, and
  the outcome of the task's previous transfer;
- ``<task>-end.json``: the outcome of the task's last transfer.

A task sends its batches one after another, so what a task journaled before a transfer
is all it had started. After a crash, the next run (or ``syphon replay --run-id``) reads
the journal of the interrupted wave (:func:`read_journal`): a place with a recorded
outcome went as recorded, one that was started without an outcome is in doubt, and one
that was never started was not sent. The journal holds places and outcomes, never a
message's body or properties.

Once a wave's outcomes are committed to the audit, its journal is removed. The commit
is named for the journal (:func:`outcomes_commit`), whether the wave makes it or the
next run makes it from the journal: the audit takes the first and skips any other
(Delta's idempotent writes), so a crash between the commit and the removal never
writes a wave's outcomes twice.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from syphon.store.location import Location

log = logging.getLogger(__name__)

OPEN = "_open"
#: A place: (backlog queue, sequence number).
Place = tuple[str, int]


def new_journal_id() -> str:
    return uuid.uuid4().hex[:12]


def outcomes_commit(run_id: str, journal_id: str) -> str:
    """The name of the audit commit that holds a wave attempt's replay outcomes."""
    return f"syphon-replay-{run_id}-{journal_id}"


def journal_folder(location: Location, run_id: str, journal_id: str) -> Location:
    return location.child("journal", run_id, journal_id)


def open_journal(location: Location, run_id: str, journal_id: str) -> Location:
    """Creates a wave attempt's journal (its ``_open``) and returns its folder."""
    folder = journal_folder(location, run_id, journal_id)
    folder.write_bytes(OPEN, b"{}")
    return folder


def remove_journal(location: Location, run_id: str) -> None:
    """Removes a run's journals (its outcomes are committed); a failure is logged, not
    raised: a journal left behind is never read for a wave that recorded ``replayed``."""
    try:
        location.child("journal").remove_tree(run_id)
    except Exception as exc:  # pragma: no cover - the store's own failure
        log.warning("the journal of run %s was not removed (%s)", run_id, type(exc).__name__)


class TaskJournal:
    """A replay task's side of the journal (no folder: records nothing)."""

    def __init__(self, folder: Location | None, task: str) -> None:
        self.folder = folder
        self.task = task
        self.transfers = 0
        self._pending: list[list[Any]] = []

    def starting(self, places: Iterable[Place]) -> None:
        """Records, before a transfer, the places it sends and the previous outcome."""
        if self.folder is None:
            return
        self.transfers += 1
        entry = {"results": self._pending, "starting": [[q, int(s)] for q, s in places]}
        self.folder.write_bytes(f"{self.task}-{self.transfers:06d}.json", _dumps(entry))
        self._pending = []

    def finished(self, results: Iterable[tuple[Place, str, str | None]]) -> None:
        """Keeps a transfer's outcome for the next entry: (place, outcome, detail)."""
        if self.folder is None:
            return
        self._pending.extend([q, int(s), outcome, detail] for (q, s), outcome, detail in results)

    def close(self) -> None:
        """Records the last transfer's outcome."""
        if self.folder is None or not self._pending:
            return
        self.folder.write_bytes(f"{self.task}-end.json", _dumps({"results": self._pending}))
        self._pending = []


def _dumps(entry: Mapping[str, Any]) -> bytes:
    return json.dumps(entry, separators=(",", ":")).encode()


@dataclass
class Journal:
    """What a wave attempt's journal says.

    Attributes:
        started: every place a transfer was started for.
        outcomes: the places whose transfer's outcome was recorded: (outcome, detail).
    """

    started: set[Place] = field(default_factory=set)
    outcomes: dict[Place, tuple[str, str | None]] = field(default_factory=dict)

    @property
    def in_doubt(self) -> set[Place]:
        """Started, with no outcome recorded."""
        return self.started - set(self.outcomes)


def read_journal(location: Location, run_id: str, journal_id: str) -> Journal | None:
    """The journal of a wave attempt; None when it has none (no ``_open``)."""
    root = location.child("journal")  # the journals' root: reading creates no folder
    here = f"{run_id}/{journal_id}"
    names = set(root.file_names(here))
    if OPEN not in names:
        return None
    journal = Journal()
    for name in sorted(n for n in names if n.endswith(".json") and not n.startswith(".")):
        entry = json.loads(root.read_bytes(f"{here}/{name}"))
        for q, s in entry.get("starting", []):
            journal.started.add((q, int(s)))
        for q, s, outcome, detail in entry.get("results", []):
            journal.outcomes[(q, int(s))] = (outcome, detail)
    return journal
