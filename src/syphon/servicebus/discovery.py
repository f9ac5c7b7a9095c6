"""Finding a source's queues: every backlog queue of the configured primaries in the
secondary namespace, and the queues of the other sources.

Two ways, chosen by ``backlog.discovery``:

- ``management``: one listing of the namespace's queues with their runtime counts
  (``list_queues_runtime_properties``), kept when the name is a backlog queue path of a
  configured primary. Extras (an index at or beyond ``queue_count``, such as ``/7`` when
  five are used) are found too, and empty queues are known without a peek.
- ``probe``: for namespaces where the caller may not list (no Manage right): peek one
  message at each index below ``probe_limit``; a missing queue is skipped.

The other sources' queues (a primary's dead-letter queues, another namespace's queues)
are found the same two ways: named entities by a peek each (:func:`probe_entities`),
or every queue and subscription by listing them with their counts
(:func:`list_entities`, :func:`listed_queues`). A queue whose messages only a session
receiver sees is found, and marked ``unreadable``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from syphon.core.config import BacklogConfig
from syphon.core.errors import ConfigError
from syphon.core.naming import (
    backlog_queue_path,
    dead_letter_path,
    entity_of_dead_letter_path,
    match_backlog_queue_path,
    transfer_dead_letter_path,
)
from syphon.servicebus.peek import peek_receiver

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class DiscoveredQueue:
    """A backlog queue found in the secondary namespace.

    Attributes:
        primary: the primary namespace it serves.
        index: its index.
        path: its path.
        message_count: messages in it when the discovery knew (None: unknown), dead
            letters excluded.
        extra: its index is at or beyond the configured queue count.
        unreadable: why syphon cannot read it (None: it can): ``requires_session``, an
            entity whose messages only a session receiver sees (a peek of all its
            sessions' messages is not possible without locking each session).
        size_bytes: the bytes its messages take when the discovery knew (None:
            unknown): what a local session sizes its heap by.
    """

    primary: str
    index: int
    path: str
    message_count: int | None
    extra: bool
    unreadable: str | None = None
    size_bytes: int | None = None

    @property
    def empty(self) -> bool:
        return self.message_count == 0


def _wanted(primaries: Iterable[str]) -> dict[str, str]:
    return {p.lower(): p for p in primaries}


def discover_by_management(
    admin: Any, primaries: Sequence[str], queue_count: int
) -> list[DiscoveredQueue]:
    """Backlog queues of ``primaries`` from one listing of the namespace's queues.

    Args:
        admin: a ``ServiceBusAdministrationClient`` for the secondary namespace.
        primaries: the primary namespace names.
        queue_count: the configured backlog queue count (to flag extras).
    """
    wanted = _wanted(primaries)
    found = []
    for runtime in admin.list_queues_runtime_properties():
        parsed = match_backlog_queue_path(runtime.name)
        if parsed is None or parsed.primary.lower() not in wanted:
            continue
        count = runtime.active_message_count + runtime.scheduled_message_count
        found.append(
            DiscoveredQueue(
                primary=wanted[parsed.primary.lower()],
                index=parsed.index,
                path=runtime.name,
                message_count=count,
                extra=parsed.index >= queue_count,
                size_bytes=runtime.size_in_bytes,
            )
        )
    return sorted(found)


#: Probes run side by side.
PROBE_THREADS = 32


def discover_by_probe(
    client: Any, primaries: Sequence[str], queue_count: int, probe_limit: int
) -> list[DiscoveredQueue]:
    """Backlog queues of ``primaries`` found by peeking indices ``0 .. probe_limit-1``.

    Args:
        client: a ``ServiceBusClient`` for the secondary namespace.
        primaries: the primary namespace names.
        queue_count: the configured backlog queue count (to flag extras).
        probe_limit: how many indices to try per primary.
    """
    from concurrent.futures import ThreadPoolExecutor

    from azure.servicebus.exceptions import MessagingEntityNotFoundError

    def probe(primary: str, index: int) -> DiscoveredQueue | None:
        path = backlog_queue_path(primary, index)
        try:
            with peek_receiver(client, path) as receiver:
                peeked = receiver.peek_messages(1)
        except MessagingEntityNotFoundError:
            return None
        return DiscoveredQueue(
            primary=primary,
            index=index,
            path=path,
            message_count=None if peeked else 0,
            extra=index >= queue_count,
        )

    # a receiver's link costs the SDK about half a second to open, mostly waiting: the
    # probes go side by side
    probes = [(p, i) for p in primaries for i in range(probe_limit)]
    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_THREADS, len(probes)))) as pool:
        found = [q for q in pool.map(lambda pi: probe(*pi), probes) if q is not None]
    return sorted(found)


def discover_backlog(
    access: Any, primaries: Sequence[str], backlog: BacklogConfig
) -> list[DiscoveredQueue]:
    """The backlog queues of ``primaries`` in the namespace ``access`` reaches, the way
    ``backlog.discovery`` says.

    Args:
        access: a :class:`syphon.servicebus.access.Access` of the secondary namespace.
    """
    if backlog.discovery == "management":
        with access.admin_client() as admin:
            return discover_by_management(admin, primaries, backlog.queue_count)
    with access.client() as client:
        return discover_by_probe(client, primaries, backlog.queue_count, backlog.probe_limit)


def probe_entities(access: Any, paths: Sequence[str], what: str) -> list[DiscoveredQueue]:
    """Queues (or sub-queues) of the namespace ``access`` reaches, each found empty or not
    by one peek (Listen rights are enough: no listing).

    Args:
        paths: the queues' paths (an entity's, or its ``/$DeadLetterQueue``).
        what: the source, for the error (``the dead-letter source``).

    Returns:
        One :class:`DiscoveredQueue` per path (``primary`` the namespace, ``index`` the
        path's place in ``paths``, ``message_count`` 0 when empty, else unknown).

    Raises:
        ConfigError: an entity does not exist (its name is in the message).
    """
    from concurrent.futures import ThreadPoolExecutor

    from azure.servicebus.exceptions import MessagingEntityNotFoundError, ServiceBusError

    def probe(index: int, path: str) -> DiscoveredQueue:
        try:
            with access.client() as client, peek_receiver(client, path) as receiver:
                peeked = receiver.peek_messages(1)
        except MessagingEntityNotFoundError:
            entity = entity_of_dead_letter_path(path)
            message = f"{what}'s entity {entity!r} does not exist in {access.namespace}"
            raise ConfigError(message, fix=f"{message}: correct the source's entities") from None
        except ServiceBusError as exc:
            if not requires_session(exc):
                raise
            return DiscoveredQueue(
                primary=access.namespace,
                index=index,
                path=path,
                message_count=None,
                extra=False,
                unreadable=REQUIRES_SESSION,
            )
        return DiscoveredQueue(
            primary=access.namespace,
            index=index,
            path=path,
            message_count=None if peeked else 0,
            extra=False,
        )

    if not paths:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_THREADS, len(paths)))) as pool:
        return list(pool.map(lambda ip: probe(*ip), enumerate(paths)))


@dataclass(frozen=True)
class ListedQueue:
    """A queue or a subscription of a namespace as its management listing counts it."""

    path: str
    active: int  # active and scheduled messages
    dead_letters: int
    sessions: bool = False
    subscription: bool = False
    transfer_dead_letters: int = 0


def list_entities(access: Any) -> tuple[list[ListedQueue], int]:
    """Every queue and every topic's subscription of the namespace ``access`` reaches,
    with their counts (needs the Manage right), and how many listings that took: two of
    the queues, one of the topics and two per topic.

    Raises:
        azure.core.exceptions.AzureError, OSError: the management API did not answer.
    """
    calls = 3
    with access.admin_client() as admin:
        sessions = {q.name for q in admin.list_queues() if q.requires_session}
        listed = [
            ListedQueue(
                q.name,
                q.active_message_count + q.scheduled_message_count,
                q.dead_letter_message_count,
                q.name in sessions,
                transfer_dead_letters=q.transfer_dead_letter_message_count or 0,
            )
            for q in admin.list_queues_runtime_properties()
        ]
        for topic in admin.list_topics():
            calls += 2
            subs = admin.list_subscriptions(topic.name)
            in_sessions = {s.name for s in subs if s.requires_session}
            for sub in admin.list_subscriptions_runtime_properties(topic.name):
                path = f"{topic.name}/Subscriptions/{sub.name}"
                listed.append(
                    ListedQueue(
                        path,
                        sub.active_message_count,
                        sub.dead_letter_message_count,
                        sub.name in in_sessions,
                        True,
                        transfer_dead_letters=sub.transfer_dead_letter_message_count or 0,
                    )
                )
    return sorted(listed, key=lambda q: q.path), calls


#: Why a subscription's messages are not read: it has no target (a message cannot be sent
#: to one subscription), so a source that reads every entity leaves it.
NO_TARGET = "no_target"


def listed_queues(
    listed: Sequence[ListedQueue],
    active: bool,
    dead_letters: bool,
    namespace: str,
    targets: Collection[str] = (),
    transfer_dead_letters: bool = False,
) -> list[DiscoveredQueue]:
    """The queues a listing gives a source: each queue's active messages (``active``) and
    its dead-letter sub-queue (``dead_letters``), with their counts; a subscription's as
    well when it is one of ``targets``' entities, else named as not read (``no_target``)
    when it holds such messages. With ``transfer_dead_letters``, each transfer
    dead-letter queue the listing counts messages in, by the same rules."""
    paths: list[tuple[str, int, str | None]] = []
    for q in listed:
        untargeted = q.subscription and q.path not in targets
        if active and not (untargeted and not q.active):
            why = NO_TARGET if untargeted else REQUIRES_SESSION if q.sessions else None
            paths.append((q.path, q.active, why))
        if dead_letters and not (untargeted and not q.dead_letters):
            # a dead-letter queue never requires sessions
            paths.append(
                (dead_letter_path(q.path), q.dead_letters, NO_TARGET if untargeted else None)
            )
        if dead_letters and transfer_dead_letters and q.transfer_dead_letters:
            paths.append(
                (
                    transfer_dead_letter_path(q.path),
                    q.transfer_dead_letters,
                    NO_TARGET if untargeted else None,
                )
            )
    return [
        DiscoveredQueue(
            primary=namespace, index=i, path=p, message_count=n, extra=False, unreadable=why
        )
        for i, (p, n, why) in enumerate(paths)
    ]


#: Why an entity's active messages are not read: only a session receiver sees them.
REQUIRES_SESSION = "requires_session"


def requires_session(exc: BaseException) -> bool:
    """Whether ``exc`` is the service refusing a receiver without a session on an entity
    that requires sessions."""
    return "requires sessions" in str(exc)


def count_messages(access: Any, paths: Sequence[str]) -> dict[str, int]:
    """How many messages each of ``paths`` holds, by the management API's runtime
    properties of its entity (a queue or a subscription; its dead-letter or transfer
    dead-letter sub-queue's own count): one management read per entity, no peek. A path
    the API does not answer for (no Manage right, an entity gone) is left out."""
    from syphon.core.naming import DEAD_LETTER_SUFFIX, TRANSFER_DEAD_LETTER_SUFFIX

    counts: dict[str, int] = {}
    read: dict[str, Any] = {}  # entity -> its runtime properties (None: not answered)
    with access.admin_client() as admin:
        for path in paths:
            entity, kind = path, "active"
            for suffix, named in (
                (TRANSFER_DEAD_LETTER_SUFFIX, "transfer_dead_letter"),
                (DEAD_LETTER_SUFFIX, "dead_letter"),
            ):
                if path.endswith(suffix):
                    entity, kind = path[: -len(suffix)], named
                    break
            if entity not in read:  # an entity and its sub-queues: one read
                read[entity] = _runtime_properties(admin, entity)
            props = read[entity]
            if props is None:
                continue
            if kind == "active":
                got = props.active_message_count + (
                    getattr(props, "scheduled_message_count", 0) or 0
                )
            else:
                got = getattr(props, f"{kind}_message_count", None)
            if got is not None:
                counts[path] = int(got)
    return counts


def _runtime_properties(admin: Any, entity: str) -> Any:
    """A queue's or a subscription's runtime properties (None: the API did not answer)."""
    try:
        if "/Subscriptions/" in entity:
            topic, _, sub = entity.partition("/Subscriptions/")
            return admin.get_subscription_runtime_properties(topic, sub)
        return admin.get_queue_runtime_properties(entity)
    except Exception as exc:  # not counted: the depth stays unknown
        log.debug("no count of %s: %s", entity, type(exc).__name__)
        return None
