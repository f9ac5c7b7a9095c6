"""One queue's settlements by lock tokens, whichever read received its messages: the
settle rows both reads' settles answer (:data:`syphon.core.schema.SETTLE_RESULT`).

A :class:`QueueSettle` settles the messages a :class:`~syphon.servicebus.locked.
LockedQueue` keeps locked, as their settle actions say (:func:`settlement_of`):
completions one request per page of lock tokens, dead-letters one per (reason,
description) and page. A request that fails is followed by its page one by one; a
message whose own settlement then fails is looked up by its sequence number: gone from
the queue, the failed request had settled it (recorded as such); still there, it is
``left`` with the error, or :data:`LOCK_LOST` when its lock lapsed (the queue has it
again: a later run reads it, and finds its outcome in the audit). A message the queue
does not keep locked when its settlement comes is ``left`` too: ``lock_lost`` when its
lock lapsed, ``not_received`` when it never was received. A namespace fault stops the
queue: what it has not settled is ``left`` / ``namespace_fault`` (the run ends failed).

Who received the messages says what a row's ``received`` counts: a peeking read's settle
receives each message it settles (1), a read once received them already and counted
them (0).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from syphon.core.schema import Detail, Outcome
from syphon.job.settle.actions import COMPLETE, DEAD_LETTER, DISCARD, LEAVE, Action
from syphon.obs.failpoints import FailPoint
from syphon.servicebus import locked
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.locked import TOKENS_PER_REQUEST, LockedQueue

log = logging.getLogger(__name__)

#: The actions that settle a message (the rest leave it, locked until the read gives it
#: back).
SETTLED = (COMPLETE, DEAD_LETTER, DISCARD)
#: The detail of a message whose lock lapsed before its settlement.
LOCK_LOST = "lock_lost"


@dataclass(frozen=True)
class Settlement:
    """How a group of messages is settled (``status``: completed, or suspended:
    dead-lettered; a dead-lettering's ``reason`` and ``description``) and what their rows
    record (``outcome``; ``detail``: a discard's reason, the operator's)."""

    status: str
    outcome: str
    reason: str | None = None
    description: str | None = None
    detail: str | None = None

    @property
    def recorded(self) -> str | None:
        """What the rows' detail says: the dead-lettering's reason, or the operator's."""
        return self.reason if self.reason is not None else self.detail


def settlement_of(run_id: str, action: str, reason: str | None, verdict: str) -> Settlement:
    """How a message of the plan is settled, by its action (a discard is completed, its
    row keeping the operator's reason; a dead-lettering says which run and verdict)."""
    if action in (COMPLETE, DISCARD):
        outcome = Outcome.COMPLETED if action == COMPLETE else Outcome.DISCARDED
        return Settlement(locked.COMPLETE, outcome, detail=reason if action == DISCARD else None)
    why = f"syphon run {run_id}: {verdict}"
    return Settlement(locked.DEAD_LETTER, Outcome.DEAD_LETTERED, reason, why)


class SettledCount:
    """Messages the queues of one settle (a Spark task's, or the driver's) settled, for
    the crash tests' ``mid_settle`` fail point (its queues settle side by side)."""

    def __init__(self, failpoint: FailPoint | None) -> None:
        self.failpoint = failpoint
        self.settled = 0
        self.lock = threading.Lock()

    def add(self, settled: int) -> None:
        if self.failpoint is None:
            return
        with self.lock:
            self.settled += settled
            total = self.settled
        self.failpoint.reached(total)


def stopped_by(exc: BaseException) -> str:
    """The detail of what a queue's settle left when ``exc`` stopped it."""
    name = type(exc).__name__
    return Detail.NAMESPACE_FAULT if name in NAMESPACE_FAULTS else f"{Detail.SETTLE_FAILED}{name}"


class QueueSettle:
    """One queue's settlements and their rows (``out``, by sequence number; 0: the
    queue's ``given_back`` row), by the locks ``queue`` keeps.

    Attributes:
        todo: the queue's messages of the plan, each with its settle action.
        receives: whether the settle received what it settles (a row's ``received``).
    """

    def __init__(
        self,
        queue: LockedQueue,
        run_id: str,
        todo: dict[int, Action],
        counter: SettledCount,
        receives: bool = False,
    ) -> None:
        self.locks = queue
        self.run_id = run_id
        self.todo = todo
        self.counter = counter
        self.receives = receives
        self.out: dict[int, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"QueueSettle({self.locks.queue!r}, {len(self.todo)} to settle)"

    def row(self, seq: int, outcome: str, detail: str | None, requests: int = 0) -> None:
        """Records ``seq``'s row."""
        received = int(self.receives and seq != 0)
        self.out[seq] = result_row(self.locks.queue, seq, outcome, detail, received, requests)

    def settle(self, seqs: list[int]) -> None:
        """Settles the messages ``seqs`` of the plan, as their actions say, a page of
        lock tokens per request and outcome; what is left is recorded left, with its
        reason. Raises on a namespace fault (see :meth:`stop`)."""
        groups: dict[Settlement, list[int]] = {}
        for seq in seqs:
            action, reason, verdict = self.todo[seq]
            if action not in SETTLED:
                self.row(seq, Outcome.LEFT, reason)
            else:
                groups.setdefault(settlement_of(self.run_id, action, reason, verdict), []).append(
                    seq
                )
        for how, group in groups.items():
            for start in range(0, len(group), TOKENS_PER_REQUEST):
                self._settle_page(group[start : start + TOKENS_PER_REQUEST], how)

    def stop(self, detail: str | None) -> None:
        """Records every message of the plan not recorded yet as left: with ``detail``
        (what stopped the settle; None: ``not_received``), or a left one's own reason."""
        for seq, (action, reason, _) in self.todo.items():
            if seq not in self.out:
                why = reason if action == LEAVE else (detail or Detail.NOT_RECEIVED)
                self.out[seq] = result_row(self.locks.queue, seq, Outcome.LEFT, why, 0)

    def _not_locked(self, seq: int) -> None:
        """``seq`` was not locked when its settlement came: its lock lapsed (the renewal
        found it lost, or a settlement did), or the queue never handed it out."""
        self.row(seq, Outcome.LEFT, LOCK_LOST if seq in self.locks.lost else Detail.NOT_RECEIVED)

    def _settle_page(self, page: list[int], how: Settlement) -> None:
        """One page's messages of one outcome in one request; when it fails, one by one
        (a request that failed may have settled some: each is found out)."""
        try:
            missing = self.locks.settle(page, how.status, how.reason, how.description)
        except Exception as exc:
            name = type(exc).__name__
            if name in NAMESPACE_FAULTS:  # the namespace is gone: the next run finds out
                raise
            log.info(
                "settling a page of %s in one request failed (%s): one by one",
                self.locks.queue,
                name,
            )
            for seq in page:
                self._settle_one(seq, how)
            self.out[page[0]]["requests"] += 1  # the failed one
            return
        for seq in missing:
            self._not_locked(seq)
        gone = set(missing)
        settled = [seq for seq in page if seq not in gone]
        for i, seq in enumerate(settled):
            self.row(seq, how.outcome, how.recorded, requests=int(i == 0))
        self.counter.add(len(settled))

    def _settle_one(self, seq: int, how: Settlement) -> None:
        try:
            missing = self.locks.settle([seq], how.status, how.reason, how.description)
        except Exception as exc:  # a lapsed lock, or settled by the failed request
            name = type(exc).__name__
            if name in NAMESPACE_FAULTS:
                raise
            lapsed = name == locked.LOCK_LOST
            self.locks.forget(seq, lost=lapsed)
            if self.locks.gone(seq):
                self.row(seq, how.outcome, how.recorded, requests=1)
                self.counter.add(1)
            else:
                failed = LOCK_LOST if lapsed else f"{Detail.SETTLE_FAILED}{name}"
                self.row(seq, Outcome.LEFT, failed, requests=1)
            return
        if missing:
            self._not_locked(seq)
            return
        self.row(seq, how.outcome, how.recorded, requests=1)
        self.counter.add(1)


def result_row(
    queue: str, seq: int, outcome: str, detail: str | None, received: int, requests: int = 0
) -> dict[str, Any]:
    """A settle row (:data:`syphon.core.schema.SETTLE_RESULT`)."""
    return {
        "backlog_queue": queue,
        "sequence_number": seq,
        "outcome": outcome,
        "detail": detail,
        "received": received,
        "abandoned": 0,
        "requests": requests,
    }
