"""Settle: remove from the backlog what a run has finished with, and only that.

Runs after the run's outcomes are committed to the audit. Per backlog queue (the queues
of a Spark task side by side, see :func:`settle_queues`), receive in peek-lock and

- complete what the plan judged ``duplicate``, ``expired`` or ``ping`` and what the
  replay recorded as ``sent``;
- complete what the operator discards (verdict ``discarded``), in a dead-letter queue
  too, recording ``discarded`` with the operator's reason;
- dead-letter ``invalid`` and ``conflict`` with the verdict's reason and a description;
- leave everything else available (failed, skipped or in-doubt sends): held (locked)
  until the pass ends, then abandoned, so that a pass never receives a message twice.

Settlements go by page: each received page's completions are one ``update-disposition``
request with their lock tokens, its dead-letters one per (reason, description), the held
messages' abandons one per page at the end. A request that fails is followed by the
page's settlements one by one; a message whose own settlement then fails is looked up by
its sequence number: gone from the queue, the failed request had settled it (recorded as
such); still there, it is ``left`` with the error (a lapsed lock: the next run settles
it).

A queue's pass touches only what its plan holds, as far as the queue allows: it asks for
no more than the plan still has to come there up to the last message to settle, so a
queue that hands out in order stops at the plan's end (the wave's watermark), not in the
next waves. What it must receive that its plan does not hold (an earlier wave's
left-over at the head, a message handed out again out of order, a partitioned queue's
other partitions) is given back with the rest and is no message of the run: no audit
row, only a count (a ``given_back`` row per queue, which the operations count).

A queue's pass ends when every message to settle has been settled, when receives come
back empty three times in a row, or when a page goes beyond the last message of the plan
in that queue and brought nothing to settle. A page beyond the plan that did bring some
may still have missed one: the SDK releases a message that arrives while no receive is
waiting (the rest of the credit a receive gave, while the page is settled), and the queue
hands it out again only after the messages it sent meanwhile. So the pass goes on, asking
for no more than it still has to settle, until a page brings none. Messages to settle not
received (locked elsewhere, or gone) are ``left`` / ``not_received``: the next run's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syphon.core.naming import PARTITIONED_SEQUENCE
from syphon.core.schema import (
    SETTLE_RESULT,
    Detail,
    Outcome,
    names,
    spark_schema,
)
from syphon.job.context import service_tasks
from syphon.job.settle_actions import COMPLETE, DEAD_LETTER, DISCARD, LEAVE, Action
from syphon.job.where import IN_TASKS, Spread, map_in_pandas
from syphon.obs.failpoints import FailPoint
from syphon.servicebus import settlement
from syphon.servicebus.access import Access
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.settlement import QueueLocks

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

_RESULT_COLUMNS = list(names(SETTLE_RESULT))

#: Messages a receive asks for: a page, settled by one request per outcome. 500 rather
#: than 100: a fifth of the requests (credits) and round trips; its locks outlast it.
RECEIVE_PAGE = 500
RECEIVE_WAIT_SECONDS = 2.0
#: Empty receives in a row that end a pass while messages remain to settle (one may be a
#: busy namespace; after these, what is not received is locked elsewhere or gone).
EMPTY_RECEIVES = 3


def settle_queues(
    actions: DataFrame,
    secondary: Access,
    run_id: str,
    failpoint: FailPoint | None = None,
    spread: Spread = IN_TASKS,
) -> DataFrame:
    """Settles every queue of ``actions`` (lazy: read the result exactly once; in the
    driver, when ``spread`` says so, done at once, the queues side by side).

    In ``spread.tasks`` Spark tasks (None: one per core), not one per queue: the rows are
    hash-partitioned by queue into that many, and each task settles its queues side by
    side (a thread and a receiver each, at most :data:`SETTLE_THREADS`). A receiver's
    link costs the SDK about half a second to open and close, mostly waiting, so ten
    queues on two cores took five such waits one after another as ten tasks."""
    parallelism = 1 if spread.driver else spread.tasks or service_tasks(actions.sparkSession, None)
    task = _SettleTask(secondary, run_id, failpoint)
    laid_out = actions.repartition(parallelism, "backlog_queue")
    return map_in_pandas(laid_out, task, spark_schema(SETTLE_RESULT), spread.driver)


#: The actions that settle a message (the rest leave it, held until the pass ends).
SETTLED = (COMPLETE, DEAD_LETTER, DISCARD)

#: Queues one settle task settles side by side.
SETTLE_THREADS = 16


@dataclass(frozen=True)
class Settlement:
    """How a group of a page's messages is settled (``status``: completed, or suspended:
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


class _SettleTask:
    """The function each settle task runs over its queues."""

    def __init__(self, access: Access, run_id: str, failpoint: FailPoint | None = None) -> None:
        self.__access = access
        self.run_id = run_id
        self.failpoint = failpoint

    def __repr__(self) -> str:
        return f"_SettleTask(run_id={self.run_id!r})"

    def __call__(self, frames: Iterator[Any]) -> Iterator[Any]:
        todo: dict[str, dict[int, Action]] = {}
        for pdf in frames:
            for queue, seq, action, reason, verdict in zip(
                pdf["backlog_queue"],
                pdf["sequence_number"],
                pdf["action"],
                pdf["reason"],
                pdf["verdict"],
                strict=True,
            ):
                todo.setdefault(str(queue), {})[int(seq)] = (
                    str(action),
                    None if reason is None else str(reason),
                    str(verdict),
                )
        if not todo:
            return
        counter = SettledCount(self.failpoint)
        with ThreadPoolExecutor(max_workers=min(SETTLE_THREADS, len(todo))) as pool:
            passes = [
                pool.submit(_QueuePass(self.__access, self.run_id, queue, rows, counter).run)
                for queue, rows in sorted(todo.items())
            ]
            for done in as_completed(passes):
                yield done.result()


class SettledCount:
    """Messages a task (or a read-once settle on the driver) settled, for the fail point
    (its queues settle side by side)."""

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


class _QueuePass:
    """One backlog queue's pass: receive in peek-lock, settle page by page, give back what
    is held (messages named by their sequence numbers: the Service Bus side is
    :class:`~syphon.servicebus.settlement.QueueLocks`)."""

    def __init__(
        self,
        access: Access,
        run_id: str,
        queue: str,
        todo: dict[int, Action],
        counter: SettledCount,
    ) -> None:
        self.__access = access
        self.run_id = run_id
        self.queue = queue
        self.todo = todo
        self.counter = counter
        self.out: dict[int, dict[str, Any]] = {}

    def run(self) -> Any:
        import pandas as pd  # type: ignore[import-untyped]

        stopped: str | None = None
        try:
            with QueueLocks(self.__access, self.queue) as locks:
                self._drain(locks)
        except Exception as exc:  # the namespace or the queue failed: the rest waits
            name = type(exc).__name__
            stopped = (
                Detail.NAMESPACE_FAULT
                if name in NAMESPACE_FAULTS
                else f"{Detail.RECEIVE_FAILED}{name}"
            )
            log.warning("settling %s stopped: %s", self.queue, name)
        for seq, (action, reason, _) in self.todo.items():
            if seq not in self.out:
                detail = reason if action == LEAVE else (stopped or Detail.NOT_RECEIVED)
                self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, detail, 0)
        return pd.DataFrame(list(self.out.values()), columns=_RESULT_COLUMNS)

    def _drain(self, locks: QueueLocks) -> None:
        todo = self.todo
        to_settle = {seq for seq, (a, _, _) in todo.items() if a in SETTLED}
        unreceived = set(todo)
        held: list[int] = []
        # the last message of the plan in this queue: a queue hands out its messages in
        # order, so once a page goes beyond it nothing of the plan is still to come (a
        # message locked elsewhere comes back only when its lock ends). A partitioned
        # queue hands out its partitions in no order: it is received to its end.
        last = max(todo, default=0)
        bounded = 0 < last < PARTITIONED_SEQUENCE
        empty = 0
        went_beyond = False
        try:
            while to_settle:
                ahead = _ahead(unreceived, to_settle) if bounded else len(unreceived)
                page = min(RECEIVE_PAGE, ahead)
                if went_beyond:  # beyond the plan, a few released ones at most are to come
                    page = min(page, len(to_settle))
                received = locks.receive(page, RECEIVE_WAIT_SECONDS)
                if not received:
                    empty += 1
                    if empty < EMPTY_RECEIVES:
                        continue  # a busy namespace, or a lock about to lapse: again
                    break
                empty = 0
                beyond = bounded and any(seq > last for seq in received)
                groups = self._sorted(received, unreceived, to_settle, held)
                for settlement, group in groups.items():
                    self._settle_page(locks, group, settlement)
                if beyond and not groups:
                    break  # nothing of the plan is at the head: locked elsewhere, or gone
                went_beyond = went_beyond or beyond
        finally:
            self._give_back(locks, held)

    def _sorted(
        self, received: list[int], unreceived: set[int], to_settle: set[int], held: list[int]
    ) -> dict[Settlement, list[int]]:
        """A page's messages to settle, grouped by how; the rest is ``held`` to be given
        back at the end (what is not the plan's is counted, not audited)."""
        groups: dict[Settlement, list[int]] = {}
        for seq in received:
            unreceived.discard(seq)
            action, reason, verdict = self.todo.get(seq, (LEAVE, None, ""))
            if action not in SETTLED:
                held.append(seq)
                row = None if seq in self.todo else _given_back(self.out, self.queue)
                row = row or self.out.setdefault(
                    seq, result_row(self.queue, seq, Outcome.LEFT, reason, 0)
                )
                row["received"] += 1
                continue
            to_settle.discard(seq)
            groups.setdefault(settlement_of(self.run_id, action, reason, verdict), []).append(seq)
        return groups

    def _settle_page(self, locks: QueueLocks, group: list[int], how: Settlement) -> None:
        """Settles one page's messages of one outcome in one request; when it fails,
        one by one (a request that failed may have settled some: each is found out)."""
        try:
            locks.settle(group, how.status, how.reason, how.description)
        except Exception as exc:
            name = type(exc).__name__
            if name in NAMESPACE_FAULTS:  # the namespace is gone: the next run finds out
                for seq in group:
                    failed = f"{Detail.SETTLE_FAILED}{name}"
                    self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, failed, 1)
                raise
            log.info(
                "settling a page of %s in one request failed (%s): one by one", self.queue, name
            )
            for seq in group:
                self._settle_one(locks, seq, how)
            self.out[group[0]]["requests"] += 1  # the failed one
            return
        for i, seq in enumerate(group):
            self.out[seq] = result_row(
                self.queue, seq, how.outcome, how.recorded, 1, requests=int(i == 0)
            )
        self.counter.add(len(group))

    def _settle_one(self, locks: QueueLocks, seq: int, how: Settlement) -> None:
        try:
            locks.settle_one(seq, how.status, how.reason, how.description)
        except Exception as exc:  # a lapsed lock, or settled by the failed request
            name = type(exc).__name__
            if name not in NAMESPACE_FAULTS and locks.gone(seq):
                self.out[seq] = result_row(
                    self.queue, seq, how.outcome, how.recorded, 1, requests=1
                )
                self.counter.add(1)
                return
            failed = f"{Detail.SETTLE_FAILED}{name}"
            self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, failed, 1, requests=1)
            if name in NAMESPACE_FAULTS:
                raise
            return
        self.out[seq] = result_row(self.queue, seq, how.outcome, how.recorded, 1, requests=1)
        self.counter.add(1)

    def _give_back(self, locks: QueueLocks, held: list[int]) -> None:
        """Abandons the held messages, a page per request (one by one where a request
        fails; a lapsed lock needs no abandon: the message is available anyway)."""

        def row(seq: int) -> dict[str, Any]:  # the message's, or the queue's given_back
            return self.out.get(seq) or _given_back(self.out, self.queue)

        for start in range(0, len(held), RECEIVE_PAGE):
            page = held[start : start + RECEIVE_PAGE]
            try:
                locks.settle(page, settlement.GIVE_BACK)
                given = page
                row(page[0])["requests"] += 1
            except Exception:
                given = []
                for seq in page:
                    with contextlib.suppress(Exception):
                        locks.settle_one(seq, settlement.GIVE_BACK)
                        given.append(seq)
                    row(seq)["requests"] += 1
            for seq in given:
                row(seq)["abandoned"] += 1


def settlement_of(run_id: str, action: str, reason: str | None, verdict: str) -> Settlement:
    """How a message of the plan is settled, by its action (a discard is completed, its
    row keeping the operator's reason; a dead-lettering says which run and verdict)."""
    if action in (COMPLETE, DISCARD):
        outcome = Outcome.COMPLETED if action == COMPLETE else Outcome.DISCARDED
        return Settlement(
            settlement.COMPLETE, outcome, detail=reason if action == DISCARD else None
        )
    why = f"syphon run {run_id}: {verdict}"
    return Settlement(settlement.DEAD_LETTER, Outcome.DEAD_LETTERED, reason, why)


def _ahead(unreceived: set[int], to_settle: set[int]) -> int:
    """How many messages of the plan not yet received stand up to the last one still to
    settle: what a queue that hands out in order has to give before the pass is done."""
    last = max(to_settle, default=0)
    return sum(1 for seq in unreceived if seq <= last)


def _given_back(out: dict[int, dict[str, Any]], queue: str) -> dict[str, Any]:
    """The queue's ``given_back`` row (key 0: no message has sequence number 0)."""
    return out.setdefault(0, result_row(queue, 0, Outcome.GIVEN_BACK, None, 0))


def result_row(
    queue: str, seq: int, outcome: str, detail: str | None, received: int, requests: int = 0
) -> dict[str, Any]:
    return {
        "backlog_queue": queue,
        "sequence_number": seq,
        "outcome": outcome,
        "detail": detail,
        "received": received,
        "abandoned": 0,
        "requests": requests,
    }
