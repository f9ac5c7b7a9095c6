"""Settling one queue's messages in peek-lock, behind the Service Bus boundary: the
settle (:mod:`syphon.job.settle`) names messages by their sequence numbers and never
holds an SDK object.

A :class:`QueueLocks` receives a page and keeps each message it hands out locked (held
here) until it is settled: completed, dead-lettered or given back (abandoned), a page at
a time in one request by lock tokens, or one by one; and it tells whether a message is
gone from its queue. Errors are the SDK's, raised as they come: the caller tells a
namespace fault by its class's name (:data:`syphon.servicebus.errors.NAMESPACE_FAULTS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from syphon.servicebus.access import Access
from syphon.servicebus.raw import (
    ABANDONED,
    COMPLETED,
    SUSPENDED,
    complete_decoder,
    lean,
    settle_by_lock_tokens,
)

#: How a message is settled: completed, dead-lettered (suspended) or given back.
COMPLETE = COMPLETED
DEAD_LETTER = SUSPENDED
GIVE_BACK = ABANDONED


class QueueLocks:
    """One queue's receiver in peek-lock, and the messages it holds locked (by sequence
    number). Use it as a context manager: it opens a client and a receiver, and closes
    both (what it still holds is then released by the service when the link closes)."""

    def __init__(self, access: Access, queue: str) -> None:
        self.__access = access
        self.queue = queue
        self._held: dict[int, Any] = {}
        self._stack = contextlib.ExitStack()
        self._receiver: Any = None

    def __repr__(self) -> str:
        return f"QueueLocks({self.queue!r}, {len(self._held)} held)"

    def __enter__(self) -> QueueLocks:
        complete_decoder()  # a message of a type the SDK cannot decode would stop the pass
        with self._stack as stack:
            client = stack.enter_context(self.__access.client())
            # no keep-alive thread: it sleeps in 1 s steps and the close waits for it; a
            # pass receives often enough to stay alive
            self._receiver = stack.enter_context(lean(client.get_queue_receiver(self.queue)))
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._held.clear()
        self._stack.close()

    def receive(self, count: int, wait_seconds: float) -> list[int]:
        """Receives up to ``count`` messages (waiting at most ``wait_seconds`` for the
        first), holds them locked and answers their sequence numbers, in the order the
        queue handed them out."""
        messages = self._receiver.receive_messages(
            max_message_count=count, max_wait_time=wait_seconds
        )
        received = []
        for m in messages:
            seq = int(m.sequence_number or 0)
            self._held[seq] = m
            received.append(seq)
        return received

    def settle(
        self,
        seqs: Sequence[int],
        how: str,
        reason: str | None = None,
        description: str | None = None,
    ) -> None:
        """Settles held messages ``how`` (:data:`COMPLETE`, :data:`DEAD_LETTER` with
        ``reason`` and ``description``, or :data:`GIVE_BACK`) in one request. When it
        raises, the messages stay held: the request may have settled some of them."""
        named = list(dict.fromkeys(seqs))  # one received again after its lock lapsed: once
        messages = [self._held[s] for s in named]
        settle_by_lock_tokens(self._receiver, messages, how, reason, description)
        for s in named:
            del self._held[s]

    def settle_one(
        self, seq: int, how: str, reason: str | None = None, description: str | None = None
    ) -> None:
        """Settles one held message ``how``, with the SDK's own call for it."""
        m = self._held.pop(seq)
        if how == COMPLETE:
            self._receiver.complete_message(m)
        elif how == DEAD_LETTER:
            self._receiver.dead_letter_message(m, reason=reason, error_description=description)
        else:
            self._receiver.abandon_message(m)

    def gone(self, seq: int) -> bool:
        """Whether the message ``seq`` is no longer in the queue (so a settlement that
        failed for the caller was applied: completed, or moved to the dead-letter
        queue); False when the queue cannot tell."""
        try:
            peeked = self._receiver.peek_messages(max_message_count=1, sequence_number=seq)
        except Exception:  # cannot tell: the message is taken to be there
            return False
        return not peeked or int(peeked[0].sequence_number or 0) != seq
