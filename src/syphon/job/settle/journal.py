"""The settle's journal: what a wave's settle is about to remove from its source, written
before its first settlement, so that a crash between a settlement and the commit of its
rows loses no outcome.

A wave's settle rows reach the audit in one commit once every queue is settled. A run
killed in between has removed messages (completed, dead-lettered) whose outcome the
audit does not have; when that left the backlog empty, the next run found nothing to do
and never recorded them. So before the settle starts, the driver writes one file below
the audit's location (``settle-journal/<run id>--<id>.json``, whole or not at all): the
place (queue, sequence number) of each message the settle is to remove, with the outcome
and detail its row would record. Once the rows are committed, the file is removed.

The next run (under the lease, before anything is read; an ``empty`` run too) reads each
file left behind (:func:`recover_settles`): a place that has a settle row of its run is
done; one still in its queue (a peek by sequence number) was not removed and waits for a
later read, which finds its outcome in the audit; one gone from its queue was removed by
the killed settle, and its row is recorded now, in the killed run's name, as it would
have been. The commit is named for the file, so a crash during the recovery never
writes a row twice. The journal holds places and outcomes, never a message's body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.render import spark_schema
from syphon.core.schema import SETTLE_RESULT, Stage
from syphon.job.replay.journal import new_journal_id
from syphon.job.request import StageResult
from syphon.job.settle.by_locks import SETTLED, settlement_of
from syphon.servicebus.peek import present_sequence_numbers
from syphon.store.location import Location

if TYPE_CHECKING:
    from syphon.job.context import RunContext
    from syphon.servicebus.access import Access

log = logging.getLogger(__name__)

FOLDER = "settle-journal"
#: A removal the settle intends: (queue, sequence number, outcome, detail).
Removal = tuple[str, int, str, "str | None"]


def removals(actions: Iterable[tuple[Any, ...]], run_id: str) -> list[Removal]:
    """The removals of a wave's settle actions ((queue, sequence number, action, reason,
    verdict), :func:`~syphon.job.settle.actions.settle_actions`' rows): what it completes,
    dead-letters or discards, each with the outcome and detail its row records."""
    out: list[Removal] = []
    for queue, seq, action, reason, verdict in actions:
        if action in SETTLED:
            how = settlement_of(run_id, action, reason, verdict)
            out.append((queue, int(seq), how.outcome, how.recorded))
    return out


def open_settle_journal(location: Location, run_id: str, removals: Iterable[Removal]) -> str:
    """Writes the journal of a wave's settle (nothing when it removes nothing); returns
    its name ("" for none)."""
    places = [[q, int(s), o, d] for q, s, o, d in removals]
    if not places:
        return ""
    name = f"{run_id}--{new_journal_id()}.json"
    body = json.dumps({"run_id": run_id, "removals": places}, separators=(",", ":"))
    location.child(FOLDER).write_bytes(name, body.encode())
    return name


def close_settle_journal(location: Location, name: str) -> None:
    """Removes a settle's journal once its rows are committed (a failure is logged: a
    journal left behind is read again, and finds every row in)."""
    if not name:
        return
    try:
        location.child(FOLDER).filesystem().delete_file(name)
    except Exception as exc:  # pragma: no cover - the store's own failure
        log.warning("the settle journal %s was not removed (%s)", name, type(exc).__name__)


def settles_pending(location: Location) -> bool:
    """Whether an interrupted settle left a journal (one directory listing)."""
    return bool(_names(location))


def _names(location: Location) -> list[str]:
    root = location.child(FOLDER)
    return [n for n in root.file_names("") if n.endswith(".json") and not n.startswith(".")]


def recover_settles(ctx: RunContext, access: Access) -> StageResult:
    """Records the outcomes of what interrupted settles removed from the queues of
    ``access`` without recording it (see the module docstring). Run under the lease."""
    result = StageResult()  # the peeks it made
    root = ctx.store.files.child(FOLDER)
    for name in _names(ctx.store.files):
        entry = json.loads(root.read_bytes(name))
        run_id = str(entry["run_id"])
        intended = {(str(q), int(s)): (str(o), d) for q, s, o, d in entry["removals"]}
        recorded = _recorded(ctx, run_id)
        todo = {p: v for p, v in intended.items() if p not in recorded}
        try:
            gone = _gone(access, todo, result)
        except Exception as exc:  # another source's queues: its own runs recover it
            log.warning(
                "the settle journal of interrupted run %s was not recovered (%s): a run of "
                "its source does",
                run_id,
                type(exc).__name__,
            )
            continue
        if gone:
            _record(ctx, run_id, name, [(q, s, *todo[(q, s)]) for q, s in gone])
        close_settle_journal(ctx.store.files, name)
        log.info(
            "the settle journal of interrupted run %s: %d removals recorded now, %d were "
            "recorded, %d are still in the backlog",
            run_id,
            len(gone),
            len(intended) - len(todo),
            len(todo) - len(gone),
        )
    return result


def _gone(
    access: Access, todo: dict[tuple[str, int], Any], result: StageResult
) -> list[tuple[str, int]]:
    """The places of ``todo`` no longer in their queues (their peeks counted)."""
    gone = []
    for queue in sorted({q for q, _ in todo}):
        seqs = sorted(s for q, s in todo if q == queue)
        present, peeked = present_sequence_numbers(access, queue, seqs)
        ops = result.operations
        ops.snapshot_messages_peeked = (ops.snapshot_messages_peeked or 0) + peeked
        gone += [(queue, s) for s in seqs if s not in present]
    return gone


def _recorded(ctx: RunContext, run_id: str) -> set[tuple[str, int]]:
    """The places that have a settle row of ``run_id``."""
    rows = ctx.store.run_rows(run_id, Stage.SETTLE)
    if rows is None:
        return set()
    found = rows.select("backlog_queue", "sequence_number").collect()
    return {(str(r[0]), int(r[1])) for r in found}


def _record(ctx: RunContext, run_id: str, name: str, rows: list[Removal]) -> None:
    """Appends the settle rows of ``rows`` in ``run_id``'s name, in one commit named for
    the journal ``name``."""
    plan = ctx.store.run_rows(run_id, Stage.PLAN)
    if plan is None:  # pragma: no cover - a settle journal is written after a plan
        return
    values = [(q, s, o, d, 0, 0, 0) for q, s, o, d in rows]
    frame = ctx.spark().createDataFrame(values, spark_schema(SETTLE_RESULT))
    commit = f"syphon-settle-{name.removesuffix('.json')}"
    now = datetime.now(timezone.utc)
    ctx.store.append_outcomes(frame, plan, run_id, Stage.SETTLE, now, commit)
