"""An outage scenario: producers keep sending through a primary outage.

Used by the tests of later stages and by the demo to make realistic backlogs. Several
producers, each with its own :class:`~syphon.producer.paired.PairedNamespaceClient` (as separate
processes would have), send a deterministic stream of messages (sessions, partition
keys, TTLs, scheduled times) in three phases:

1. before: the primary is healthy;
2. during: ``start_outage()`` has been called; producers keep sending for
   ``outage_seconds``. A send the sender refuses (inside the failover interval) is
   retried after a short pause with the same MessageId, as a producer would;
3. after: ``end_outage()`` has been called; producers wait until every entity they
   failed over has recovered (the ping tasks), then send the rest.

The result lists every message with where it went, so a test can check that each one
arrives exactly once, in order per session or partition key.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from syphon.producer import PairedCounters, PairedNamespaceClient
from syphon.servicebus.backlog_messages import counts_as_outage


@dataclass(frozen=True)
class Destination:
    """An entity of the primary the producers send to."""

    name: str
    kind: str = "queue"  # or "topic"
    sessions: bool = False


@dataclass(frozen=True)
class SentMessage:
    """One message of the scenario and where it went."""

    producer: int
    seq: int
    phase: str
    destination: str
    message_id: str
    body: bytes
    session_id: str | None
    partition_key: str | None
    time_to_live: timedelta | None
    scheduled_enqueue_time_utc: datetime | None
    target: str  # "primary" or "backlog"
    queue: str  # the primary entity or the backlog queue


@dataclass
class ScenarioResult:
    messages: list[SentMessage] = field(default_factory=list)
    counters: list[PairedCounters] = field(default_factory=list)
    refused_sends: int = 0

    def to_backlog(self) -> list[SentMessage]:
        return [m for m in self.messages if m.target == "backlog"]

    def to_primary(self) -> list[SentMessage]:
        return [m for m in self.messages if m.target == "primary"]


@dataclass
class _Phase:
    name: str = "before"
    changed: threading.Condition = field(default_factory=threading.Condition)


def run_outage_scenario(
    make_client: Callable[[], PairedNamespaceClient],
    destinations: Sequence[Destination],
    start_outage: Callable[[], None],
    end_outage: Callable[[], None],
    *,
    producers: int = 3,
    messages_per_phase: int = 10,
    outage_seconds: float = 2.0,
    send_pause: float = 0.02,
    seed: int = 0,
    recovery_timeout: float = 60.0,
    id_prefix: str = "",
) -> ScenarioResult:
    """Runs the scenario and returns what was sent where (see the module docstring).

    Every fifth message has a TTL of one hour, every seventh is scheduled one minute
    ahead; messages to session destinations carry one of three session ids per
    producer, the others one of three partition keys or none. MessageIds are
    ``<id_prefix>p<producer>-<seq>``.
    """
    from azure.servicebus import ServiceBusMessage

    result = ScenarioResult()
    lock = threading.Lock()
    phase = _Phase()
    errors: list[BaseException] = []

    def make_message(producer: int, seq: int, rng: random.Random) -> tuple[Any, SentMessage]:
        dest = destinations[rng.randrange(len(destinations))]
        session = f"p{producer}-s{rng.randrange(3)}" if dest.sessions else None
        key = session or (f"p{producer}-k{rng.randrange(3)}" if rng.random() < 0.7 else None)
        ttl = timedelta(hours=1) if seq % 5 == 0 else None
        scheduled = datetime.now(timezone.utc) + timedelta(minutes=1) if seq % 7 == 0 else None
        message_id = f"{id_prefix}p{producer}-{seq:05d}"
        body = f"{message_id}:{dest.name}".encode() + bytes(rng.randrange(256) for _ in range(16))
        msg = ServiceBusMessage(
            body,
            message_id=message_id,
            session_id=session,
            partition_key=key,
            time_to_live=ttl,
            scheduled_enqueue_time_utc=scheduled,
            application_properties={"producer": producer, "seq": seq},
        )
        record = SentMessage(
            producer, seq, "", dest.name, message_id, body, session, key, ttl, scheduled, "", ""
        )
        return msg, record

    def produce(producer: int) -> None:
        rng = random.Random(seed * 1000 + producer)  # noqa: S311 (test data)
        client = make_client()
        senders: dict[str, Any] = {}
        try:
            seq = 0
            for wanted in ("before", "during", "after"):
                with phase.changed:
                    phase.changed.wait_for(lambda w=wanted: phase.name == w)  # type: ignore[misc]
                if wanted == "after":
                    deadline = time.monotonic() + recovery_timeout
                    while any(client.is_failed_over(d.name) for d in destinations):
                        if time.monotonic() > deadline:
                            raise TimeoutError("the primary did not recover in time")
                        time.sleep(0.05)
                sent_in_phase = 0
                while sent_in_phase < messages_per_phase:
                    msg, record = make_message(producer, seq, rng)
                    dest = next(d for d in destinations if d.name == record.destination)
                    if dest.name not in senders:
                        senders[dest.name] = (
                            client.get_queue_sender(dest.name)
                            if dest.kind == "queue"
                            else client.get_topic_sender(dest.name)
                        )
                    while True:
                        try:
                            route = senders[dest.name].send_messages(msg)
                            break
                        except Exception as exc:
                            if not counts_as_outage(exc):
                                raise
                            with lock:
                                result.refused_sends += 1
                            time.sleep(0.1)
                    with lock:
                        result.messages.append(
                            _with_route(record, wanted, route.target, route.queue)
                        )
                    seq += 1
                    sent_in_phase += 1
                    time.sleep(send_pause)
            with lock:
                result.counters.append(client.counters)
        except BaseException as exc:
            errors.append(exc)
        finally:
            for sender in senders.values():
                sender.close()
            client.close()

    threads = [
        threading.Thread(target=produce, args=(p,), name=f"producer-{p}", daemon=True)
        for p in range(producers)
    ]
    for t in threads:
        t.start()

    def move_to(name: str) -> None:
        with phase.changed:
            phase.name = name
            phase.changed.notify_all()

    def phase_done(name: str) -> bool:
        with lock:
            done = sum(1 for m in result.messages if m.phase == name)
        return done >= producers * messages_per_phase or bool(errors)

    _wait(lambda: phase_done("before"))
    start_outage()
    move_to("during")
    time.sleep(outage_seconds)
    _wait(lambda: phase_done("during"))
    end_outage()
    move_to("after")
    for t in threads:
        t.join(recovery_timeout + 60)
    if errors:
        raise errors[0]
    result.messages.sort(key=lambda m: (m.producer, m.seq))
    return result


def _wait(done: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("the scenario's producers did not finish a phase in time")
        time.sleep(0.02)


def _with_route(record: SentMessage, phase: str, target: str, queue: str) -> SentMessage:
    from dataclasses import replace

    return replace(record, phase=phase, target=target, queue=queue)
