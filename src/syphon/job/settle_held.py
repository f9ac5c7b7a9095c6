"""Settle, for a source read once: remove what a wave is done with by the locks its read
holds (:class:`~syphon.job.held.HeldSource`), without receiving anything again.

Runs after the wave's outcomes are committed to the audit, on the driver, from the
wave's settle actions (:func:`syphon.job.settle_actions.settle_actions`, a row per
message of the plan). Per queue (the queues side by side): the messages to complete,
to dead-letter (one group per reason and description) or to discard are settled a page
of lock tokens per request; a request that fails is followed by its page one by one,
and a message whose own settlement then fails is looked up by its sequence number: gone
from the queue, the failed request had settled it; still there, it is ``left`` with the
error. A namespace fault stops the queue: the rest of it is ``left`` (``namespace_fault``,
as a peek's settle records it: the run ends failed).

What the wave leaves (failed, skipped or in-doubt sends, what is not selected, a
dead-letter queue's messages not sent) stays held, so no later wave of the run receives
it again; the run gives it back when it ends. A message whose lock lapsed while held
is ``left`` with :data:`LOCK_LOST` (the renewal found it lost, or its settlement did,
whichever came first): the queue has it again, and a later run reads it with its
outcome in the audit.

The rows are the settle's (:data:`syphon.core.schema.SETTLE_RESULT`): ``received`` is
0 (the read received each message once and counted it), ``requests`` counts the
settlement requests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from syphon.core.schema import Detail, Outcome
from syphon.job.held import HeldSource
from syphon.job.settle import SETTLED, SettledCount, Settlement, result_row, settlement_of
from syphon.job.settle_actions import Action
from syphon.obs.failpoints import FailPoint
from syphon.servicebus.errors import NAMESPACE_FAULTS
from syphon.servicebus.locked import LOCK_LOST as LOCK_LOST_ERROR
from syphon.servicebus.locked import TOKENS_PER_REQUEST, LockedQueue

log = logging.getLogger(__name__)

#: The detail of a message whose lock lapsed while the run held it.
LOCK_LOST = "lock_lost"
#: Queues settled side by side.
_THREADS = 16


def settle_held(
    held: HeldSource,
    actions: Iterable[tuple[str, int, str, str | None, str]],
    run_id: str,
    failpoint: FailPoint | None = None,
) -> list[dict[str, Any]]:
    """Settles each message of ``actions`` ((queue, sequence number, action, reason,
    verdict), as :func:`~syphon.job.settle_actions.settle_actions` says) by the lock
    ``held`` holds; answers a settle row per message. ``failpoint``: the crash tests'
    ``mid_settle``, counting the messages settled."""
    todo: dict[str, dict[int, Action]] = {}
    for queue, seq, action, reason, verdict in actions:
        todo.setdefault(queue, {})[int(seq)] = (action, reason, verdict)
    if not todo:
        return []
    counter = SettledCount(failpoint)
    passes = [_HeldPass(held, run_id, queue, rows, counter) for queue, rows in sorted(todo.items())]
    with ThreadPoolExecutor(max_workers=min(_THREADS, len(passes))) as pool:
        done = list(pool.map(lambda p: p.run(), passes))
    return [row for rows in done for row in rows]


class _HeldPass:
    """One queue's settlements, by the locks the read holds."""

    def __init__(
        self,
        held: HeldSource,
        run_id: str,
        queue: str,
        todo: dict[int, Action],
        counter: SettledCount,
    ) -> None:
        self.locks: LockedQueue = held.queue(queue)
        self.counter = counter
        self.run_id = run_id
        self.queue = queue
        self.todo = todo
        self.out: dict[int, dict[str, Any]] = {}

    def run(self) -> list[dict[str, Any]]:
        groups: dict[Settlement, list[int]] = {}
        for seq, (action, reason, verdict) in sorted(self.todo.items()):
            if action not in SETTLED:  # held until the run ends, then given back
                self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, reason, 0)
            else:
                how = settlement_of(self.run_id, action, reason, verdict)
                groups.setdefault(how, []).append(seq)
        try:
            for how, group in groups.items():
                for start in range(0, len(group), TOKENS_PER_REQUEST):
                    self._settle_page(group[start : start + TOKENS_PER_REQUEST], how)
        except Exception as exc:  # the namespace failed: the rest waits
            name = type(exc).__name__
            log.warning("settling %s stopped: %s", self.queue, name)
            # as a peek's settle records it: the run ends failed, naming the namespace
            failed = (
                Detail.NAMESPACE_FAULT
                if name in NAMESPACE_FAULTS
                else f"{Detail.SETTLE_FAILED}{name}"
            )
            for seq in self.todo:
                if seq not in self.out:
                    self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, failed, 0)
        return list(self.out.values())

    def _not_held(self, seq: int) -> None:
        """``seq`` was not held when its settle came: its lock lapsed (the renewal found
        it lost, or a settle did), or the run never received it."""
        detail = LOCK_LOST if seq in self.locks.lost else Detail.NOT_RECEIVED
        self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, detail, 0)

    def _settle_page(self, page: list[int], how: Settlement) -> None:
        try:
            missing = self.locks.settle(page, how.status, how.reason, how.description)
        except Exception as exc:
            name = type(exc).__name__
            if name in NAMESPACE_FAULTS:
                raise
            log.info(
                "settling a page of %s in one request failed (%s): one by one", self.queue, name
            )
            for seq in page:
                self._settle_one(seq, how)
            self.out[page[0]]["requests"] += 1  # the failed one
            return
        for seq in missing:
            self._not_held(seq)
        settled = [seq for seq in page if seq not in set(missing)]
        for i, seq in enumerate(settled):
            self.out[seq] = result_row(
                self.queue, seq, how.outcome, how.recorded, 0, requests=int(i == 0)
            )
        self.counter.add(len(settled))

    def _settle_one(self, seq: int, how: Settlement) -> None:
        try:
            missing = self.locks.settle([seq], how.status, how.reason, how.description)
        except Exception as exc:  # a lapsed lock, or settled by the failed request
            name = type(exc).__name__
            if name in NAMESPACE_FAULTS:
                raise
            lapsed = name == LOCK_LOST_ERROR
            self.locks.forget(seq, lost=lapsed)
            if self.locks.gone(seq):
                self.out[seq] = result_row(self.queue, seq, how.outcome, how.recorded, 0, 1)
                self.counter.add(1)
            else:
                failed = LOCK_LOST if lapsed else f"{Detail.SETTLE_FAILED}{name}"
                self.out[seq] = result_row(self.queue, seq, Outcome.LEFT, failed, 0, 1)
            return
        if missing:
            self._not_held(seq)
            return
        self.out[seq] = result_row(self.queue, seq, how.outcome, how.recorded, 0, requests=1)
        self.counter.add(1)
