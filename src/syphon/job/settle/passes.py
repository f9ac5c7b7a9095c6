"""Settle: remove from the backlog what a run has finished with, and only that.

Runs after the run's outcomes are committed to the audit. Per backlog queue (the queues
of a Spark task side by side, see :func:`settle_queues`), receive in peek-lock and

- complete what the plan judged ``duplicate``, ``expired`` or ``ping`` and what the
  replay recorded as ``sent``;
- complete what the operator discards (verdict ``discarded``), in a dead-letter queue
  too, recording ``discarded`` with the operator's reason;
- dead-letter ``invalid`` and ``conflict`` with the verdict's reason and a description;
- leave everything else available (failed, skipped or in-doubt sends): kept locked
  until the pass ends, then abandoned, so that a pass never receives a message twice.

A pass receives through a :class:`~syphon.servicebus.locked.LockedQueue` on one link
and settles each received page at once, as a read once settles what it keeps locked
(:class:`~syphon.job.settle.by_locks.QueueSettle`: a request per page and outcome, one by one
where it fails); what it keeps locked is given back at the end, a page per request.

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

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Any

from syphon.core.naming import PARTITIONED_SEQUENCE
from syphon.core.render import spark_schema
from syphon.core.schema import SETTLE_RESULT, Detail, Outcome, names
from syphon.job.context import service_tasks
from syphon.job.settle.actions import LEAVE, Action
from syphon.job.settle.by_locks import SETTLED, QueueSettle, SettledCount, result_row
from syphon.job.where import IN_TASKS, Spread, map_in_pandas
from syphon.obs.failpoints import FailPoint
from syphon.servicebus.access import Access
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.locked import LockedQueue

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


#: Queues one settle task settles side by side.
SETTLE_THREADS = 16


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


class _QueuePass:
    """One backlog queue's pass: receive in peek-lock, settle page by page, give back what
    it keeps locked (messages named by their sequence numbers)."""

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

    def run(self) -> Any:
        import pandas as pd  # type: ignore[import-untyped]

        stopped: str | None = None
        locks = LockedQueue(self.__access, self.queue, own_link=False)
        settle = QueueSettle(locks, self.run_id, self.todo, self.counter, receives=True)
        try:
            with locks:
                self._drain(locks, settle)
        except Exception as exc:  # the namespace or the queue failed: the rest waits
            name = type(exc).__name__
            stopped = (
                Detail.NAMESPACE_FAULT
                if name in NAMESPACE_FAULTS
                else f"{Detail.RECEIVE_FAILED}{name}"
            )
            log.warning("settling %s stopped: %s", self.queue, name)
        settle.stop(stopped)
        return pd.DataFrame(list(settle.out.values()), columns=_RESULT_COLUMNS)

    def _drain(self, locks: LockedQueue, settle: QueueSettle) -> None:
        todo = self.todo
        to_settle = {seq for seq, (a, _, _) in todo.items() if a in SETTLED}
        unreceived = set(todo)
        kept: list[int] = []
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
                received = locks.receive_page(page, RECEIVE_WAIT_SECONDS)
                if not received:
                    empty += 1
                    if empty < EMPTY_RECEIVES:
                        continue  # a busy namespace, or a lock about to lapse: again
                    break
                empty = 0
                beyond = bounded and any(seq > last for seq in received)
                mine = self._sorted(settle, received, unreceived, kept)
                to_settle.difference_update(mine)
                settle.settle(mine)
                if beyond and not mine:
                    break  # nothing of the plan is at the head: locked elsewhere, or gone
                went_beyond = went_beyond or beyond
        finally:
            self._give_back(locks, settle, kept)

    def _sorted(
        self, settle: QueueSettle, received: list[int], unreceived: set[int], kept: list[int]
    ) -> list[int]:
        """A page's messages to settle; the rest is ``kept`` locked, to be given back at
        the end (what is not the plan's is counted, not audited)."""
        mine = []
        for seq in received:
            unreceived.discard(seq)
            action, reason, _ = self.todo.get(seq, (LEAVE, None, ""))
            if action in SETTLED:
                mine.append(seq)
                continue
            kept.append(seq)
            if seq not in self.todo:
                row = _given_back(settle.out, self.queue)
            else:
                row = settle.out.setdefault(
                    seq, result_row(self.queue, seq, Outcome.LEFT, reason, 0)
                )
            row["received"] += 1
        return mine

    def _give_back(self, locks: LockedQueue, settle: QueueSettle, kept: list[int]) -> None:
        """Abandons what the pass keeps locked, a page per request (one by one where a
        request fails; a lapsed lock needs no abandon: the message is available
        anyway)."""
        if not kept:
            return
        before = locks.give_back_requests
        given = locks.give_back(kept)
        first = settle.out.get(kept[0]) or _given_back(settle.out, self.queue)
        first["requests"] += locks.give_back_requests - before
        for seq in given:
            (settle.out.get(seq) or _given_back(settle.out, self.queue))["abandoned"] += 1


def _ahead(unreceived: set[int], to_settle: set[int]) -> int:
    """How many messages of the plan not yet received stand up to the last one still to
    settle: what a queue that hands out in order has to give before the pass is done."""
    last = max(to_settle, default=0)
    return sum(1 for seq in unreceived if seq <= last)


def _given_back(out: dict[int, dict[str, Any]], queue: str) -> dict[str, Any]:
    """The queue's ``given_back`` row (key 0: no message has sequence number 0)."""
    return out.setdefault(0, result_row(queue, 0, Outcome.GIVEN_BACK, None, 0))
