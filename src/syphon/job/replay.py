"""Replay: send a planned run's ``replay`` messages to their primaries.

Input: the run's plan rows in the audit (verdict, batch, position, effective partition
key) joined with a snapshot of the backlog (the bodies and original properties, which
the audit never holds). Every destination is pinged from the driver first; one that is
missing, unavailable or fails the ping is skipped for this run and its messages stay in
the backlog.

Spark lays the sends out by (destination, partition key): rows are hash-partitioned on
that pair (keyless messages on their batch, so a destination's keyless batches may go in
parallel) and sorted by replay order inside each task. A task holds one client per
primary namespace, sends its batches one after another and closes its clients on every
path. Within a partition key, a batch is sent only after the one before it succeeded:
after a failure the key's later batches are ``skipped`` (``earlier_batch_failed``), so a
retry by the next run starts from the first unsent message and order is never broken.
Server-busy answers back off and retry the same batch.

Outcomes per message: ``sent``; ``failed`` (the error class in ``detail``: the service
refused the batch, nothing was delivered); ``in_doubt`` (a timeout or a broken
connection after the transfer started: the batch may or may not have arrived; the next
run sends it again and marks it); ``skipped`` (with the reason). A message sent again
because an earlier run left it in doubt, or by a Spark task retried after a failed
attempt (which may have sent part of the same batches), has ``detail``
``resent_in_doubt``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from syphon.core.config import SyphonConfig
from syphon.core.envelope import PING_CONTENT_TYPE
from syphon.obs.failpoints import FailPoint
from syphon.servicebus.access import Access, resolve_access

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

#: Columns of the replay stage's result rows.
RESULT_SCHEMA = (
    "backlog_queue string, sequence_number long, outcome string, detail string, "
    "transfers int, busy_retries int"
)

#: The SDK's own retries per send: few, so that server-busy comes back to the replay's
#: backoff (which counts it) and a dead namespace is noticed in seconds.
SDK_RETRIES = 2

#: Senders opened side by side (pings, and a replay task's destinations).
OPEN_THREADS = 16

#: Error classes after which a batch may have arrived although the send failed.
IN_DOUBT_ERRORS = frozenset(
    {
        "OperationTimeoutError",
        "ServiceBusConnectionError",
        "ServiceBusCommunicationError",
        "AMQPConnectionError",
        "ConnectionError",
        "TimeoutError",
    }
)

#: Error classes that mean the namespace itself failed (not one entity): the task closes
#: every client of that namespace at once and skips the rest of its work there
#: (``namespace_fault``); the run ends ``failed`` and the next run picks up the rest.
NAMESPACE_FAULTS = frozenset(
    {
        "ServiceBusConnectionError",
        "ServiceBusCommunicationError",
        "ServiceBusAuthenticationError",
        "ServiceBusAuthorizationError",
    }
)

#: Columns the replay reads (restored snapshot columns plus the plan's).
_INPUT_COLUMNS = (
    "backlog_queue", "sequence_number", "primary", "destination", "partition_key_effective",
    "replay_order", "batch_id", "batch_position", "body", "message_id", "partition_key",
    "original_session_id", "original_time_to_live_ticks", "original_scheduled_enqueue_time",
    "original_enqueued_time", "original_application_properties", "content_type",
    "correlation_id", "subject", "to", "reply_to", "reply_to_session_id", "in_doubt",
    "snapshot_matches",
)  # fmt: skip


@dataclass(frozen=True)
class ReplaySettings:
    """How hard the replay tries.

    Attributes:
        busy_retries: retries of one batch after server-busy answers.
        backoff_seconds: the first back-off; it doubles up to ``backoff_max_seconds``.
        backoff_max_seconds: the longest back-off.
        failed_batches_per_destination: after this many failed batches in one task, a
            destination's remaining batches in that task are skipped
            (``destination_failing``).
    """

    busy_retries: int = 8
    backoff_seconds: float = 1.0
    backoff_max_seconds: float = 30.0
    failed_batches_per_destination: int = 3


def ping_destinations(
    config: SyphonConfig,
    destinations: list[tuple[str, str]],
    dbutils_get: Callable[[str, str], str] | None = None,
) -> dict[tuple[str, str], str | None]:
    """Pings every (primary, destination); returns None for the healthy ones and a skip
    reason for the others (``destination_missing``, ``destination_unavailable`` or
    ``ping_failed_<ErrorClass>``). A ping is what the paired sender sends: an empty
    message of content type ping with a one-second TTL, which the service never
    delivers."""
    from concurrent.futures import ThreadPoolExecutor

    from azure.core.exceptions import AzureError
    from azure.servicebus import ServiceBusMessage
    from azure.servicebus.exceptions import (
        MessagingEntityDisabledError,
        MessagingEntityNotFoundError,
        ServiceBusServerBusyError,
    )

    from syphon.servicebus.access import servicebus_client

    def ping(client: Any, primary: str, name: str) -> str | None:
        ping = ServiceBusMessage(
            b"", content_type=PING_CONTENT_TYPE, time_to_live=timedelta(seconds=1)
        )
        try:
            with client.get_queue_sender(name) as sender:
                sender.send_messages(ping)
            return None
        except MessagingEntityNotFoundError:
            reason = "destination_missing"
        except MessagingEntityDisabledError:
            reason = "destination_unavailable"
        except ServiceBusServerBusyError:
            return None  # up, only throttled: the sends back off
        except (AzureError, OSError) as exc:
            reason = f"ping_failed_{type(exc).__name__}"
        log.warning("destination %s of %s is skipped: %s", name, primary, reason)
        return reason

    out: dict[tuple[str, str], str | None] = {}
    by_primary: dict[str, list[str]] = {}
    for primary, destination in destinations:
        by_primary.setdefault(primary, []).append(destination)
    for primary, names in by_primary.items():
        # each sender has its own connection: the pings go side by side
        with (
            servicebus_client(config.primary(primary), dbutils_get, retry_total=1) as client,
            ThreadPoolExecutor(max_workers=OPEN_THREADS) as pool,
        ):
            reasons = pool.map(ping, [client] * len(names), [primary] * len(names), names)
            out.update(((primary, name), r) for name, r in zip(names, reasons, strict=True))
    return out


def replay_input(
    restored: DataFrame, plan_rows: DataFrame, in_doubt: DataFrame | None
) -> DataFrame:
    """The messages to send: plan rows with verdict ``replay`` joined with the restored
    snapshot on (backlog queue, sequence number), flagged when an earlier run left them
    in doubt and when the snapshot's body differs from the planned one."""
    from pyspark.sql import functions as F

    plan = plan_rows.where(F.col("verdict") == "replay").select(
        "backlog_queue", "sequence_number", "primary", "destination",
        "partition_key_effective", "replay_order", "batch_id", "batch_position",
        F.col("body_sha256").alias("_planned_sha"),
    )  # fmt: skip
    message = restored.select(
        "backlog_queue", "sequence_number", "body", "body_sha256", "message_id",
        "partition_key", "original_session_id", "original_time_to_live_ticks",
        "original_scheduled_enqueue_time", "original_enqueued_time",
        "original_application_properties", "content_type", "correlation_id", "subject", "to",
        "reply_to", "reply_to_session_id",
    )  # fmt: skip
    df = plan.join(message, ["backlog_queue", "sequence_number"], "left")
    matches = F.coalesce(F.col("body_sha256") == F.col("_planned_sha"), F.lit(False))
    df = df.withColumn("snapshot_matches", matches)
    if in_doubt is not None:
        doubt = in_doubt.select("backlog_queue", "sequence_number").distinct()
        doubt = doubt.withColumn("in_doubt", F.lit(True))
        df = df.join(doubt, ["backlog_queue", "sequence_number"], "left")
        df = df.withColumn("in_doubt", F.coalesce(F.col("in_doubt"), F.lit(False)))
    else:
        df = df.withColumn("in_doubt", F.lit(False))
    return df.select(*_INPUT_COLUMNS)


def replay_messages(
    rows: DataFrame,
    config: SyphonConfig,
    skipped: dict[tuple[str, str], str | None],
    settings: ReplaySettings | None = None,
    dbutils_get: Callable[[str, str], str] | None = None,
    failpoint: FailPoint | None = None,
) -> DataFrame:
    """Sends ``rows`` (the output of :func:`replay_input`) and returns one result row per
    message (:data:`RESULT_SCHEMA`). Lazy: the sends happen when the result is read, so
    read it exactly once (write it)."""
    from pyspark.sql import functions as F

    settings = settings or ReplaySettings()
    primaries = sorted({p for p, _ in skipped})
    secrets = {p: resolve_access(config.primary(p), dbutils_get) for p in primaries}
    skip: dict[tuple[str, str], str | None] = {k: v for k, v in skipped.items() if v}
    lane = F.coalesce(F.col("partition_key_effective"), F.col("batch_id"))
    partitions = max(1, rows.sparkSession.sparkContext.defaultParallelism)
    laid_out = rows.repartition(partitions, "primary", "destination", lane).sortWithinPartitions(
        "primary", "destination", lane, "replay_order"
    )
    task = _ReplayTask(_TaskPlan(secrets, skip, settings, failpoint))
    return laid_out.mapInPandas(task, RESULT_SCHEMA)


class _ReplayTask:
    """The function every replay task runs (pickled with its secrets, never logged)."""

    def __init__(self, plan: _TaskPlan) -> None:
        self.plan = plan

    def __repr__(self) -> str:  # never show the secrets
        return f"_ReplayTask(primaries={sorted(self.plan.secrets)})"

    def __call__(self, frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd  # type: ignore[import-untyped]
        from pyspark import TaskContext

        state = _TaskState(self.plan)
        context = TaskContext.get()
        # a retried task may repeat sends of the failed attempt: everything it sends is
        # marked as a resend of something in doubt
        state.retried = context is not None and context.attemptNumber() > 0
        try:
            batch: list[dict[str, Any]] = []
            for pdf in frames:
                state.open_senders(zip(pdf["primary"], pdf["destination"], strict=True))
                out: list[dict[str, Any]] = []
                for rec in pdf.to_dict("records"):
                    if batch and rec["batch_id"] != batch[0]["batch_id"]:
                        out.extend(state.send(batch))
                        batch = []
                    batch.append(rec)
                if out:
                    yield pd.DataFrame(out, columns=_RESULT_COLUMNS)
            if batch:
                yield pd.DataFrame(state.send(batch), columns=_RESULT_COLUMNS)
        finally:
            state.close()


_RESULT_COLUMNS = [c.split()[0] for c in RESULT_SCHEMA.split(", ")]


@dataclass(frozen=True)
class _TaskPlan:
    """What every replay task is given: the primaries' secrets (never shown), the
    destinations to skip, the settings and the armed fail point."""

    secrets: dict[str, Access] = field(repr=False)
    skip: dict[tuple[str, str], str | None]
    settings: ReplaySettings
    failpoint: FailPoint | None = None


class _TaskState:
    def __init__(self, plan: _TaskPlan) -> None:
        self.secrets = plan.secrets
        self.skip = dict(plan.skip)
        self.settings = plan.settings
        self.failpoint = plan.failpoint
        self.batches_sent = 0
        self.retried = False
        self.clients: dict[str, Any] = {}
        self.senders: dict[tuple[str, str], Any] = {}
        self.broken_keys: set[tuple[str, str, str]] = set()
        self.failures: dict[tuple[str, str], int] = {}
        self.faulted: set[str] = set()

    def sender(self, primary: str, destination: str) -> Any:
        key = (primary, destination)
        if key not in self.senders:
            if primary not in self.clients:
                self.clients[primary] = self.secrets[primary].client(
                    retry_total=SDK_RETRIES, keep_alive=None
                )
            self.senders[key] = self.clients[primary].get_queue_sender(destination)
        return self.senders[key]

    def open_senders(self, destinations: Iterable[tuple[str, str]]) -> None:
        """Opens the senders of ``destinations`` side by side: the SDK's link set-up is
        mostly waiting (it polls every 50 ms), about half a second each one after
        another. An error here is left for the send, which handles it."""
        from concurrent.futures import ThreadPoolExecutor

        todo = {
            d for d in set(destinations)
            if d not in self.senders and not self.skip.get(d) and d[0] not in self.faulted
        }  # fmt: skip
        if len(todo) < 2:
            return
        senders = [self.sender(*d) for d in sorted(todo)]

        def open_one(sender: Any) -> None:
            with contextlib.suppress(Exception):
                sender.__enter__()

        with ThreadPoolExecutor(max_workers=min(OPEN_THREADS, len(senders))) as pool:
            list(pool.map(open_one, senders))

    def close(self) -> None:
        for s in self.senders.values():  # closing after a failure: nothing left to do
            with contextlib.suppress(Exception):
                s.close()
        for c in self.clients.values():
            with contextlib.suppress(Exception):
                c.close()
        self.senders.clear()
        self.clients.clear()

    def send(self, batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = batch[0]
        dest = (first["primary"], first["destination"])
        key = first["partition_key_effective"]
        lane = (dest[0], dest[1], key) if key is not None else None

        def all_as(outcome: str, detail: str | None) -> list[dict[str, Any]]:
            return [_result(r, outcome, detail) for r in batch]

        if self.skip.get(dest):
            return all_as("skipped", self.skip[dest])
        if dest[0] in self.faulted:
            return all_as("skipped", "namespace_fault")
        if lane is not None and lane in self.broken_keys:
            return all_as("skipped", "earlier_batch_failed")
        if self.failures.get(dest, 0) >= self.settings.failed_batches_per_destination:
            return all_as("skipped", "destination_failing")
        now = datetime.now(timezone.utc)
        results: list[dict[str, Any]] = []
        messages = []
        sending: list[dict[str, Any]] = []
        for rec in batch:
            if not rec["snapshot_matches"]:
                results.append(_result(rec, "skipped", "backlog_changed"))
                continue
            ttl = _ttl_left(rec, now)
            if ttl is not None and ttl <= timedelta(0):
                results.append(_result(rec, "skipped", "expired_before_send"))
                continue
            try:
                messages.append(_message(rec, ttl, now))
            except Exception:
                # the plan rejects what the SDK is known to refuse; anything else stops
                # the batch here, and the key's later batches, so order is kept
                if lane is not None:
                    self.broken_keys.add(lane)
                return [
                    *results,
                    *(_result(r, "skipped", "batch_not_sendable") for r in sending),
                    _result(rec, "skipped", "not_sendable"),
                    *(_result(r, "skipped", "batch_not_sendable")
                      for r in batch[len(results) + len(sending) + 1 :]),
                ]  # fmt: skip
            sending.append(rec)
        if not messages:
            return results
        outcome, detail, transfers, busy = self._transfer(dest, messages)
        if outcome != "sent":
            if lane is not None:
                self.broken_keys.add(lane)
            self.failures[dest] = self.failures.get(dest, 0) + 1
        for i, rec in enumerate(sending):
            d = detail
            if outcome == "sent" and (rec["in_doubt"] or self.retried):
                d = "resent_in_doubt"
            results.append(_result(rec, outcome, d, transfers if i == 0 else 0,
                                   busy if i == 0 else 0))  # fmt: skip
        return results

    def _transfer(
        self, dest: tuple[str, str], messages: list[Any]
    ) -> tuple[str, str | None, int, int]:
        from azure.servicebus.exceptions import ServiceBusServerBusyError

        delay = self.settings.backoff_seconds
        transfers = busy = 0
        while True:
            transfers += 1
            try:
                self.sender(*dest).send_messages(messages)
                self.batches_sent += 1
                if self.failpoint is not None:
                    self.failpoint.reached(self.batches_sent)
                return "sent", None, transfers, busy
            except ServiceBusServerBusyError:
                busy += 1
                if busy > self.settings.busy_retries:
                    return "failed", "ServiceBusServerBusyError", transfers, busy
                time.sleep(delay)
                delay = min(delay * 2, self.settings.backoff_max_seconds)
            except Exception as exc:
                name = type(exc).__name__
                self._drop_sender(dest)
                if name in NAMESPACE_FAULTS:
                    self._fault(dest[0])
                if name in IN_DOUBT_ERRORS:
                    return "in_doubt", name, transfers, busy
                return "failed", name, transfers, busy

    def _fault(self, primary: str) -> None:
        """The primary namespace failed: close all of its clients now."""
        self.faulted.add(primary)
        for key in [k for k in self.senders if k[0] == primary]:
            self._drop_sender(key)
        client = self.clients.pop(primary, None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _drop_sender(self, dest: tuple[str, str]) -> None:
        sender = self.senders.pop(dest, None)
        if sender is not None:
            with contextlib.suppress(Exception):
                sender.close()


def _result(rec: dict[str, Any], outcome: str, detail: str | None, transfers: int = 0,
            busy: int = 0) -> dict[str, Any]:  # fmt: skip
    return {
        "backlog_queue": rec["backlog_queue"],
        "sequence_number": int(rec["sequence_number"]),
        "outcome": outcome,
        "detail": detail,
        "transfers": transfers,
        "busy_retries": busy,
    }


def _ttl_left(rec: dict[str, Any], now: datetime) -> timedelta | None:
    from syphon.core.timespan import TICKS_PER_MICROSECOND
    from syphon.job.reconcile import plain_cell

    ticks = plain_cell(rec["original_time_to_live_ticks"])
    if ticks is None:
        return None
    enqueued = plain_cell(rec["original_enqueued_time"])
    ttl = timedelta(microseconds=int(ticks) // TICKS_PER_MICROSECOND)
    if enqueued is None:
        return ttl
    if enqueued.tzinfo is None:
        enqueued = enqueued.replace(tzinfo=timezone.utc)
    left: timedelta = ttl - (now - enqueued)
    return left


def _message(rec: dict[str, Any], ttl: timedelta | None, now: datetime) -> Any:
    from syphon.job.reconcile import plain_cell
    from syphon.servicebus.messages import restored_message

    plain = {k: plain_cell(v) for k, v in rec.items()}
    props = plain["original_application_properties"]
    plain["original_application_properties"] = dict(props) if props is not None else {}
    scheduled = plain["original_scheduled_enqueue_time"]
    if scheduled is not None:
        if scheduled.tzinfo is None:
            scheduled = scheduled.replace(tzinfo=timezone.utc)
        plain["original_scheduled_enqueue_time"] = scheduled if scheduled > now else None
    return restored_message(plain, ttl)
