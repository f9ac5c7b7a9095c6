"""The replay's rules, batch by batch: what is sent, what is skipped, and why.

A *lane* is a (primary, destination, partition key): its messages go out in plan order,
each batch only after the one before it was sent. A batch may hold several lanes (many
keys for one destination, see :mod:`syphon.job.plan.batches`): a lane that broke earlier is
left out of the batch, the rest goes, and a failed batch breaks every lane in it.
:class:`Replayer` applies the rules to one batch at a time, given a ``send`` callable (a
:class:`~syphon.servicebus.sending.SenderPool` in a Spark task; a fake in tests) and a
``build`` callable that rebuilds a message:

- a destination the probes skipped: every batch ``skipped`` with the probe's reason;
- a destination whose send said it does not exist or is disabled (after the probe): that
  batch ``failed`` with the error class, the destination's later batches ``skipped`` /
  ``destination_missing`` or ``destination_unavailable``;
- a primary that faulted earlier in the task: ``skipped`` / ``namespace_fault``;
- a lane whose earlier batch was not sent (in this task, or in an earlier wave of the
  run: the lanes it starts with): its messages ``skipped`` / ``earlier_batch_failed`` (so
  the next run starts from the first unsent message and order is never broken); a lane
  the run holds back because it could not read one of its messages (another receiver
  holds it locked): ``skipped`` / ``earlier_message_unseen``;
- a destination with ``failed_batches_per_destination`` failed batches in this task:
  ``skipped`` / ``destination_failing``;
- within a batch, a message whose snapshot body is not the planned one: ``skipped`` /
  ``backlog_changed``; one whose TTL ran out since the plan: ``skipped`` /
  ``expired_before_send``; one that cannot be rebuilt: ``skipped`` / ``not_sendable``,
  with the rest of its batch ``batch_not_sendable`` and its lane broken;
- a throttled send backs off (doubling, capped) and tries the same batch again, at most
  ``busy_retries`` times, then ``failed`` / ``ServiceBusServerBusyError``;
- with a credit budget for the batch's primary, each transfer waits until the budget
  allows its messages (:class:`CreditPacer`);
- otherwise ``sent`` (``resent_in_doubt`` when an earlier run left the message in doubt,
  or this task is a retry that may have sent it already), ``failed`` or ``in_doubt``
  with the error class.

With a :class:`~syphon.job.replay.journal.TaskJournal`, each transfer's places are journaled
before it starts and its outcome after it (see :mod:`syphon.job.replay.journal`).

Records are plain mappings (the replay input's columns, see :mod:`syphon.job.replay.send`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.core.schema import Detail, Outcome
from syphon.core.timespan import TICKS_PER_MICROSECOND
from syphon.job.replay.journal import TaskJournal
from syphon.servicebus import errors
from syphon.servicebus.sending import Destination, Sent

#: A lane: (primary, destination, partition key).
Lane = tuple[str, str, str]

Record = Mapping[str, Any]
Result = dict[str, Any]
#: Sends one batch of built messages to a destination.
Send = Callable[[Destination, list[Any]], Sent]
#: Rebuilds a record's message with the TTL left and the time of sending; raises when it
#: cannot.
Build = Callable[[Record, "timedelta | None", datetime], Any]


@dataclass(frozen=True)
class ReplaySettings:
    """How hard the replay tries.

    Attributes:
        busy_retries: retries of one batch after server-busy answers.
        backoff_seconds: the first back-off; it doubles up to ``backoff_max_seconds``.
        backoff_max_seconds: the longest back-off.
        failed_batches_per_destination: after this many failed batches in one task, a
            destination's remaining batches in that task are skipped.
    """

    busy_retries: int = 8
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    failed_batches_per_destination: int = 3
    credits_per_second: Mapping[str, float] = field(default_factory=dict)

    def split(self, tasks: int) -> ReplaySettings:
        """The settings of one of ``tasks`` tasks: each gets an even share of every
        primary's credit budget."""
        share = {k: v / max(1, tasks) for k, v in self.credits_per_second.items()}
        return dataclasses.replace(self, credits_per_second=share)


class CreditPacer:
    """Keeps a task's sends to each primary within its credit budget (credits per
    second; a message sent is a credit). A transfer of ``n`` messages goes at once when
    the budget allows, else waits; it then holds the budget for ``n / rate`` seconds, so
    over any stretch of time the task spends at most its rate, plus one batch."""

    def __init__(
        self,
        rates: Mapping[str, float],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rates = {k: v for k, v in rates.items() if v > 0}
        self._clock = clock
        self._sleep = sleep
        self._free_at: dict[str, float] = {}
        self.waited = 0.0

    def take(self, primary: str, credits: int) -> None:
        """Waits until ``credits`` may be spent on ``primary``, and spends them."""
        rate = self.rates.get(primary)
        if rate is None:
            return
        now = self._clock()
        start = max(now, self._free_at.get(primary, now))
        if start > now:
            self._sleep(start - now)
            self.waited += start - now
        self._free_at[primary] = start + credits / rate


def result(
    rec: Record, outcome: str, detail: str | None, transfers: int = 0, busy: int = 0
) -> Result:
    """One row of :data:`syphon.core.schema.REPLAY_RESULT`."""
    return {
        "backlog_queue": rec["backlog_queue"],
        "sequence_number": int(rec["sequence_number"]),
        "outcome": outcome,
        "detail": detail,
        "transfers": transfers,
        "busy_retries": busy,
    }


def ttl_left(rec: Record, now: datetime) -> timedelta | None:
    """What is left of a message's original TTL at ``now`` (None: it never expires),
    counted from its original enqueue time."""
    ticks = rec.get("original_time_to_live_ticks")
    if ticks is None:
        return None
    ttl = timedelta(microseconds=int(ticks) // TICKS_PER_MICROSECOND)
    enqueued = rec.get("original_enqueued_time")
    if enqueued is None:
        return ttl
    if enqueued.tzinfo is None:
        enqueued = enqueued.replace(tzinfo=timezone.utc)
    left: timedelta = ttl - (now - enqueued)
    return left


@dataclass(frozen=True)
class Attempt:
    """What a replay task brings to its batches.

    Attributes:
        retried: the task is a retry of one that failed (and may have sent some).
        broken: lanes (primary, destination, partition key) already held back when the
            task starts, each with why (the detail its messages are skipped with): an
            earlier wave of the run did not send one of their messages, or the run could
            not read one.
        journal: where each transfer is journaled (None: nowhere).
        on_sent: called with the number of batches sent so far (the fail point).
    """

    retried: bool = False
    broken: Mapping[Lane, str] = field(default_factory=dict)
    journal: TaskJournal | None = None
    on_sent: Callable[[int], None] | None = None


@dataclass(frozen=True)
class Clocks:
    """The replay's clocks, each replaceable in tests: ``now`` (the TTLs' clock),
    ``sleep`` (how to wait) and ``monotonic`` (the pacer's)."""

    now: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic


#: A batch's records by what becomes of them before the transfer: the results of those
#: not sent, the records sent and their messages.
Prepared = tuple[list[Result], list[Record], list[Any]]


class Replayer:
    """Applies the rules (see the module docstring) to one task's batches, in order.

    Args:
        settings: retries and thresholds.
        skip: destinations the probes skipped, with the reason (a send that finds one
            missing or disabled adds it).
        send: sends a batch (never raises).
        build: rebuilds a message.
        attempt: what the task brings (a retry, broken lanes, its journal, the fail
            point).
        clocks: the clocks.
    """

    def __init__(
        self,
        settings: ReplaySettings,
        skip: Mapping[Destination, str | None],
        send: Send,
        build: Build,
        *,
        attempt: Attempt = Attempt(),
        clocks: Clocks = Clocks(),
    ) -> None:
        self.settings = settings
        self.attempt = attempt
        self.skip = {k: v for k, v in skip.items() if v}
        self._send = send
        self._build = build
        self._clocks = clocks
        self.pacer = CreditPacer(settings.credits_per_second, clocks.monotonic, clocks.sleep)
        self.batches_sent = 0
        self.broken_lanes: dict[Lane, str] = dict(attempt.broken)
        self.failures: dict[Destination, int] = {}
        self.faulted: set[str] = set()

    def replay(self, batch: Sequence[Record]) -> list[Result]:
        """Sends one planned batch (records of one ``batch_id``, in position order) or
        skips it; returns one result per record."""
        dest = (batch[0]["primary"], batch[0]["destination"])
        results, batch = self._held_back(dest, batch)
        if not batch:
            return results
        built, sending, messages = self._built(batch)
        results += built
        if not messages:
            return results
        return results + self._transfer_and_record(dest, sending, messages)

    def _lane(self, rec: Record) -> Lane | None:
        key = rec["partition_key_effective"]
        return (rec["primary"], rec["destination"], key) if key is not None else None

    def _break(self, records: Sequence[Record]) -> None:
        for r in records:
            lane = self._lane(r)
            if lane is not None:
                self.broken_lanes.setdefault(lane, Detail.EARLIER_BATCH_FAILED)

    def _held_back(
        self, dest: Destination, batch: Sequence[Record]
    ) -> tuple[list[Result], list[Record]]:
        """The results of what the batch does not send at all (its destination skipped,
        faulted or failing; its broken lanes' records), and the records left to send."""

        def all_as(detail: str, records: Sequence[Record]) -> list[Result]:
            return [result(r, Outcome.SKIPPED, detail) for r in records]

        if dest in self.skip:
            return all_as(str(self.skip[dest]), batch), []
        if dest[0] in self.faulted:
            return all_as(Detail.NAMESPACE_FAULT, batch), []
        # a batch may hold many keys: a key whose earlier batch failed is left out
        results = [
            result(r, Outcome.SKIPPED, self.broken_lanes[lane])
            for r in batch
            if (lane := self._lane(r)) in self.broken_lanes
        ]
        left = [r for r in batch if self._lane(r) not in self.broken_lanes]
        if left and self.failures.get(dest, 0) >= self.settings.failed_batches_per_destination:
            return results + all_as(Detail.DESTINATION_FAILING, left), []
        return results, left

    def _built(self, batch: list[Record]) -> Prepared:
        """The batch's messages rebuilt, but for those changed in the backlog or expired
        since the plan (skipped); a record that cannot be rebuilt stops the batch and
        breaks its lanes, so order is kept (the plan rejects what cannot be rebuilt:
        this is anything else)."""
        now = self._clocks.now()
        results: list[Result] = []
        sending: list[Record] = []
        messages: list[Any] = []
        for i, rec in enumerate(batch):
            if not rec["snapshot_matches"]:
                results.append(result(rec, Outcome.SKIPPED, Detail.BACKLOG_CHANGED))
                continue
            ttl = ttl_left(rec, now)
            if ttl is not None and ttl <= timedelta(0):
                results.append(result(rec, Outcome.SKIPPED, Detail.EXPIRED_BEFORE_SEND))
                continue
            try:
                messages.append(self._build(rec, ttl, now))
            except Exception:
                self._break(batch)
                results += [
                    *(result(r, Outcome.SKIPPED, Detail.BATCH_NOT_SENDABLE) for r in sending),
                    result(rec, Outcome.SKIPPED, Detail.NOT_SENDABLE),
                    *(
                        result(r, Outcome.SKIPPED, Detail.BATCH_NOT_SENDABLE)
                        for r in batch[i + 1 :]
                    ),
                ]
                return results, [], []
            sending.append(rec)
        return results, sending, messages

    def _transfer_and_record(
        self, dest: Destination, sending: list[Record], messages: list[Any]
    ) -> list[Result]:
        """Transfers the built messages (journaled before and after), and judges the
        destination and the lanes by the answer; one result per record sent."""
        journal = self.attempt.journal
        if journal is not None:  # before the transfer: a crash leaves it in doubt
            journal.starting((r["backlog_queue"], r["sequence_number"]) for r in sending)
        sent, transfers, busy = self._transfer(dest, messages)
        if sent.status != "sent":
            self._break(sending)
            self.failures[dest] = self.failures.get(dest, 0) + 1
            if sent.namespace_fault:
                self.faulted.add(dest[0])
            if sent.error in errors.ENTITY_MISSING:
                self.skip[dest] = Detail.DESTINATION_MISSING
            elif sent.error in errors.ENTITY_DISABLED:
                self.skip[dest] = Detail.DESTINATION_UNAVAILABLE
        outcome = {"sent": Outcome.SENT, "in_doubt": Outcome.IN_DOUBT}.get(
            sent.status, Outcome.FAILED
        )
        results = []
        for i, rec in enumerate(sending):
            detail = sent.error
            if outcome == Outcome.SENT and (rec["in_doubt"] or self.attempt.retried):
                detail = Detail.RESENT_IN_DOUBT
            results.append(
                result(rec, outcome, detail, transfers if i == 0 else 0, busy if i == 0 else 0)
            )
        if journal is not None:
            journal.finished(
                ((r["backlog_queue"], r["sequence_number"]), r["outcome"], r["detail"])
                for r in results
            )
        return results

    def _transfer(self, dest: Destination, messages: list[Any]) -> tuple[Sent, int, int]:
        """Sends, backing off on throttling; returns the last answer, the transfers tried
        and the busy answers met."""
        delay = self.settings.backoff_seconds
        transfers = busy = 0
        while True:
            transfers += 1
            self.pacer.take(dest[0], len(messages))
            sent = self._send(dest, messages)
            if sent.status == "busy":
                busy += 1
                if busy > self.settings.busy_retries:
                    return Sent("failed", sent.error), transfers, busy
                self._clocks.sleep(delay)
                delay = min(delay * 2, self.settings.backoff_max_seconds)
                continue
            if sent.status == "sent":
                self.batches_sent += 1
                if self.attempt.on_sent is not None:
                    self.attempt.on_sent(self.batches_sent)
            return sent, transfers, busy
