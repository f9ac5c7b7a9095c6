"""Reading backlog queues by peeking: never a lock, never a removal.

:func:`peek_rows` walks one backlog queue by sequence number and turns every message
into a row of :data:`syphon.core.schema.SNAPSHOT` (:func:`syphon.core.peeked.snapshot_row`:
the message's encoded bytes, which the replay rebuilds, and what the reconcile reads
from them). A peek answers at most a few hundred messages and may answer fewer than
asked (the service caps a call at 256 KB; a partitioned queue answers one partition at
a time), so the walk goes on from the last sequence number seen until a peek is empty.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from syphon.core.peeked import sequence_number, snapshot_row
from syphon.servicebus.raw import complete_decoder, lean, peek_raw

if TYPE_CHECKING:
    from syphon.servicebus.access import Access

PEEK_PAGE = 250


def peek_receiver(client: Any, queue: str) -> Any:
    """A receiver on ``queue`` for peeking only, which closes at once.

    The SDK gives every receiver without prefetch a keep-alive thread that sleeps in
    1 s steps, and its ``close`` waits for that thread: about half a second per receiver,
    paid by every peek of every queue. With a prefetch of one and ``keep_alive`` None it
    starts none (and :func:`syphon.servicebus.raw.lean` opens it without the SDK's
    sleeps between polls). The prefetch never takes effect: a receiver grants the service credit
    only when it receives, and this one only peeks, so nothing is delivered to it or
    locked (tests/job/test_peek_receiver.py fails if an SDK upgrade changes either).

    Args:
        client: a ``ServiceBusClient`` of the queue's namespace.
    """
    complete_decoder()
    return lean(client.get_queue_receiver(queue, prefetch_count=1, keep_alive=None))


def peek_rows(
    receiver: Any,
    backlog_queue: str,
    from_sequence_number: int = 1,
    until_sequence_number: int | None = None,
    page: int = PEEK_PAGE,
    limit: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Every message of a backlog queue from ``from_sequence_number`` on, as rows.

    Args:
        receiver: a ``ServiceBusReceiver`` on the backlog queue (it only peeks, through
            :func:`syphon.servicebus.raw.peek_raw`: nothing is locked or removed).
        backlog_queue: the queue's path, recorded in each row.
        from_sequence_number: the first sequence number to read.
        until_sequence_number: the last one to read (inclusive); None reads to the end.
        page: messages asked per peek.
        limit: the most messages to read (None: no limit); a peek asks for no more than
            are still wanted, since each message peeked costs a credit.
    """
    next_seq = max(1, from_sequence_number)
    left = limit
    while left is None or left > 0:
        messages = peek_raw(receiver, next_seq, page if left is None else min(page, left))
        if not messages:
            return
        for encoded in messages:
            number = sequence_number(encoded)
            if until_sequence_number is not None and number > until_sequence_number:
                return
            yield snapshot_row(encoded, backlog_queue)
            next_seq = number + 1
            if left is not None:
                left -= 1
                if left == 0:
                    return


def peek_queue(
    access: Access,
    backlog_queue: str,
    from_sequence_number: int = 1,
    until_sequence_number: int | None = None,
    page: int = PEEK_PAGE,
    limit: int | None = None,
) -> Iterator[dict[str, Any]]:
    """:func:`peek_rows` of ``backlog_queue`` through a client and a receiver of its own,
    opened here and closed when the rows end (or the caller stops reading them): the
    caller holds no SDK object."""
    with access.client() as client, peek_receiver(client, backlog_queue) as receiver:
        yield from peek_rows(
            receiver, backlog_queue, from_sequence_number, until_sequence_number, page, limit
        )


def first_sequence_number(access: Any, queue: str, from_sequence_number: int = 1) -> int | None:
    """The lowest sequence number in ``queue`` from ``from_sequence_number`` on (one
    peek), or None when there is none.

    Args:
        access: a :class:`syphon.servicebus.access.Access` of the queue's namespace.
    """
    with access.client() as client, peek_receiver(client, queue) as receiver:
        peeked = peek_raw(receiver, from_sequence_number, 1)
    return sequence_number(peeked[0]) if peeked else None


def present_sequence_numbers(access: Any, queue: str, seqs: list[int]) -> tuple[set[int], int]:
    """Which of ``seqs`` are still in ``queue`` (locked or not), and how many messages the
    peeks handed out (each a credit): a walk by peeks from the lowest to the highest.

    Args:
        access: a :class:`syphon.servicebus.access.Access` of the queue's namespace.
    """
    if not seqs:
        return set(), 0
    wanted, last = set(seqs), max(seqs)
    found: set[int] = set()
    peeked = 0
    with access.client() as client, peek_receiver(client, queue) as receiver:
        at = min(seqs)
        while at <= last:
            page = peek_raw(receiver, at, PEEK_PAGE)
            if not page:
                break
            peeked += len(page)
            numbers = [sequence_number(m) for m in page]
            found |= {n for n in numbers if n in wanted}
            at = numbers[-1] + 1
    return found, peeked
