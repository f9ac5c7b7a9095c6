"""One queue's messages received in peek-lock and kept locked until they are settled by
their lock tokens or given back: the one lock-holding type behind the Service Bus
boundary, and its one set of settlements (:data:`COMPLETE`, :data:`DEAD_LETTER`,
:data:`GIVE_BACK`).

A :class:`LockedQueue` names its messages by sequence number: the job holds no SDK
object. It receives in pages, keeps each message's encoded bytes (:func:`syphon.
servicebus.raw.keep_encoded`) and its lock token, and answers the bytes; the SDK's
decoded message is dropped at once. Its messages stay locked, and so invisible to every
receive of the queue, until it settles them (complete or dead-letter, a page in one
request by lock tokens), gives them back (abandon) or closes. Both reads use it:

- a read once (:mod:`syphon.job.read.once`) keeps one per queue for a whole run, and receives,
  renews and settles from several threads (the next wave's read, the renewal, the
  settle): receives go through one link, the management requests through another (a
  lock token settles its message from any link), each link's calls one at a time;
- a peeking read's settle (:mod:`syphon.job.settle.passes`) opens one per queue for a pass,
  on one link (``own_link=False``): it receives what it settles and settles it at once.

A lock lasts the queue's lock duration from its receive or its last renewal;
:meth:`LockedQueue.renew` renews every lock in pages of tokens, one request each. A
lock that lapsed is dropped from what is locked and remembered as lost
(:attr:`LockedQueue.lost`): its message is available to the queue again, and a settle
of it settles nothing and answers it (the caller records it as left, ``lock_lost``).

A receive never hands out what another receiver holds locked; a peek shows it. The
queue peeks on its management link (:meth:`LockedQueue.peek`), so that a run can learn
what it could not receive (:mod:`syphon.job.read.gaps`).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from syphon.core.peeked import sequence_number
from syphon.servicebus.access import Access
from syphon.servicebus.raw import (
    ABANDONED,
    COMPLETED,
    SUSPENDED,
    complete_decoder,
    delivery_tag,
    forget_deliveries,
    keep_delivered,
    keep_encoded,
    lean,
    peek_raw,
    receive_deferred_raw,
    renew_lock_tokens,
    settle_tokens,
    stop_credit,
)

#: How a message is settled: completed, dead-lettered (suspended) or given back.
COMPLETE = COMPLETED
DEAD_LETTER = SUSPENDED
GIVE_BACK = ABANDONED

#: Lock tokens per settlement or renewal request.
TOKENS_PER_REQUEST = 500
#: The SDK's error for a lock that lapsed (or a message gone).
LOCK_LOST = "MessageLockLostError"
#: Messages one receive asks for at most.
RECEIVE_PAGE = 500


class LockedQueue:
    """One queue's peek-lock receiver and the messages it keeps locked, by sequence
    number. Use it as a context manager: it opens a client and a receiver (and, with
    ``own_link``, a second link for the requests), and on leaving gives back what it
    still keeps locked and closes them."""

    def __init__(self, access: Access, queue: str, own_link: bool = True) -> None:
        self.__access = access
        self.queue = queue
        self.own_link = own_link
        self._tokens: dict[int, uuid.UUID] = {}
        self._encoded: dict[bytes, bytes] = {}
        self._stack = contextlib.ExitStack()
        self._receiver: Any = None
        self._manager: Any = None
        self._receiving = threading.Lock()  # the receiver's calls
        self._managing = threading.RLock()  # the manager's calls
        self._state = threading.Lock()  # the tokens, the counts
        self.received = 0
        self.requests = 0
        #: messages peeked (each a credit)
        self.peeked = 0
        #: messages given back (abandoned), and the requests that gave them back
        self.given_back = 0
        self.give_back_requests = 0
        #: the sequence numbers whose lock lapsed while it kept them (a message received
        #: again after its lapse is locked again, under its new lock)
        self.lost: set[int] = set()
        #: how long a lock lasts, learned from the first message received (None: none
        #: received yet)
        self.lock_seconds: float | None = None

    def __repr__(self) -> str:
        return f"LockedQueue({self.queue!r}, {len(self._tokens)} locked)"

    def __enter__(self) -> LockedQueue:
        """Opens the receiver, and with ``own_link`` a second receiver on a second
        connection that never receives, for the management requests (settle, renew,
        look up). A lock is the message's, and its token settles it from any link of
        the namespace; a receive that waits for messages then never holds up a renewal
        or a settle. Without it the requests go through the receiver (a pass that
        receives and settles in turn: a link less to open)."""
        complete_decoder()  # the SDK decodes what it hands out, whatever syphon keeps
        with self._stack as stack:
            client = stack.enter_context(self.__access.client())
            receiver = client.get_queue_receiver(self.queue, prefetch_count=0)
            receiver = keep_delivered(keep_encoded(receiver, self._encoded))
            self._receiver = stack.enter_context(lean(receiver))
            self._manager = self._receiver
            if self.own_link:
                other = stack.enter_context(self.__access.client())
                manager = other.get_queue_receiver(self.queue, prefetch_count=1, keep_alive=None)
                self._manager = stack.enter_context(lean(manager))
            self._stack = stack.pop_all()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            with contextlib.suppress(Exception):  # a lapsed lock needs no give-back
                self.give_back(self.locked)
        finally:
            with self._state:
                self._tokens.clear()
            self._stack.close()

    @property
    def locked(self) -> list[int]:
        """The sequence numbers of the messages it keeps locked."""
        with self._state:
            return sorted(self._tokens)

    def receive(self, count: int, wait_seconds: float) -> list[tuple[int, bytes]]:
        """Receives up to ``count`` messages in pages (waiting at most ``wait_seconds``
        for each page's first), keeps them locked and answers them, each as its sequence
        number (the service's, as the SDK read it) and the bytes the service sent, in the
        order the queue handed them out. Fewer than ``count``: the queue had no more
        available (an empty page ends it)."""
        out: list[tuple[int, bytes]] = []
        with self._receiving:
            while len(out) < count:
                page = self._receive_page(min(RECEIVE_PAGE, count - len(out)), wait_seconds)
                if not page:
                    break
                out.extend(page)
            stop_credit(self._receiver)  # read enough: nothing more is delivered
        return out

    def receive_page(self, count: int, wait_seconds: float) -> list[int]:
        """One receive of up to :data:`RECEIVE_PAGE` messages (what the queue has
        available, waiting at most ``wait_seconds`` for the first), kept locked; answers
        their sequence numbers, in the order the queue handed them out."""
        with self._receiving:
            return [seq for seq, _ in self._receive_page(count, wait_seconds)]

    def _receive_page(self, count: int, wait_seconds: float) -> list[tuple[int, bytes]]:
        messages = self._receiver.receive_messages(
            max_message_count=count, max_wait_time=wait_seconds
        )
        page = []
        if messages and self.lock_seconds is None:
            self.lock_seconds = _lock_seconds(messages[0])
        tags = []
        with self._state:
            for m in messages:
                seq = int(m.sequence_number)
                self._tokens[seq] = m.lock_token
                tags.append(delivery_tag(m))
                page.append((seq, self._encoded.pop(tags[-1])))
            self.received += len(page)
        forget_deliveries(self._receiver, tags)  # settled by token, never by the link
        return page

    def settle(
        self,
        seqs: Sequence[int],
        how: str,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[int]:
        """Settles the locked messages of ``seqs`` ``how`` (:data:`COMPLETE`,
        :data:`DEAD_LETTER` with ``reason`` and ``description``, :data:`GIVE_BACK`) in one
        request, and answers those of ``seqs`` it does not keep locked (their lock
        lapsed, see :attr:`lost`, or it never received them): it settles none of them.
        When the request raises, the messages stay locked: it may have settled some of
        them."""
        named = list(dict.fromkeys(seqs))
        with self._state:
            holding = [s for s in named if s in self._tokens]
            tokens = [self._tokens[s] for s in holding]
        if tokens:
            with self._managing:
                self.requests += 1
                settle_tokens(self._manager, tokens, how, reason, description)
            with self._state:
                for s in holding:
                    self._tokens.pop(s, None)
        kept = set(holding)
        return [s for s in named if s not in kept]

    def forget(self, seq: int, lost: bool = False) -> None:
        """Forgets the lock of ``seq``: a failed request settled it, or (``lost``) it
        lapsed."""
        with self._state:
            self._tokens.pop(seq, None)
            if lost:
                self.lost.add(seq)

    def receive_deferred(self, seqs: Sequence[int]) -> list[tuple[int, bytes]]:
        """Receives the deferred messages ``seqs`` by their sequence numbers (a receive
        never hands one out), keeps them locked like any other it received and answers
        them as :meth:`receive` does, in sequence order. Each costs a credit.

        Raises:
            ServiceBusError: the service refused (one of them is not deferred now).
        """
        if not seqs:
            return []
        with self._managing:
            self.requests += 1
            got = receive_deferred_raw(self._manager, sorted(seqs))
        page = []
        with self._state:
            for encoded, token in got:
                seq = sequence_number(encoded)
                self._tokens[seq] = token if isinstance(token, uuid.UUID) else uuid.UUID(str(token))
                page.append((seq, encoded))
            self.received += len(page)
        return sorted(page)

    def peek(self, from_sequence_number: int, count: int) -> list[bytes]:
        """Up to ``count`` messages of the queue from ``from_sequence_number`` on, as the
        service holds them (locked ones too: a peek locks nothing), in sequence order."""
        with self._managing:
            self.requests += 1
            out = peek_raw(self._manager, max(1, from_sequence_number), count)
        self.peeked += len(out)
        return out

    def gone(self, seq: int) -> bool:
        """Whether the message ``seq`` is no longer in the queue (a settlement that
        failed for the caller was applied); False when the queue cannot tell."""
        with self._managing:
            try:
                peeked = self._manager.peek_messages(max_message_count=1, sequence_number=seq)
            except Exception:  # cannot tell: the message is taken to be there
                return False
            return not peeked or int(peeked[0].sequence_number or 0) != seq

    def give_back(self, seqs: Sequence[int]) -> list[int]:
        """Abandons locked messages, a page per request (one by one where a request
        fails; a lapsed lock needs none: the message is available anyway); answers those
        given back. The requests are counted in :attr:`give_back_requests`."""
        given: list[int] = []
        before = self.requests
        for start in range(0, len(seqs), TOKENS_PER_REQUEST):
            page = list(seqs[start : start + TOKENS_PER_REQUEST])
            try:
                missing = set(self.settle(page, GIVE_BACK))
                given += [s for s in page if s not in missing]
            except Exception:
                for seq in page:
                    with contextlib.suppress(Exception):
                        if not self.settle([seq], GIVE_BACK):
                            given.append(seq)
                    self.forget(seq)
        self.given_back += len(given)
        self.give_back_requests += self.requests - before
        return given

    def renew(self) -> list[int]:
        """Renews every lock, a page of tokens per request; answers the sequence numbers
        whose lock was lost (their messages are available to the queue again)."""
        lost: list[int] = []
        for page in self._pages():
            with self._state:
                tokens = [self._tokens[s] for s in page if s in self._tokens]
            with self._managing:
                if not self._renewed(tokens):
                    lost.extend(self._renew_each(page))
        return lost

    def _renewed(self, tokens: list[uuid.UUID]) -> bool:
        """Whether one request renewed ``tokens`` (False: a lock of them lapsed, or the
        request failed)."""
        try:
            self.requests += 1
            renew_lock_tokens(self._manager, tokens)
        except Exception:
            return False
        return True

    def _renew_each(self, page: list[int]) -> list[int]:
        """Renews the locks of ``page`` one by one; answers those lost."""
        lost = []
        for seq in page:
            with self._state:
                token = self._tokens.get(seq)
            if token is None:
                continue
            try:
                self.requests += 1
                renew_lock_tokens(self._manager, [token])
            except Exception as exc:
                if type(exc).__name__ != LOCK_LOST:
                    raise  # the namespace, not the lock: the next renewal tries
                self.forget(seq, lost=True)
                lost.append(seq)
        return lost

    def _pages(self) -> Iterator[list[int]]:
        locked = self.locked
        for start in range(0, len(locked), TOKENS_PER_REQUEST):
            yield locked[start : start + TOKENS_PER_REQUEST]


def _lock_seconds(message: Any) -> float | None:
    """How long ``message``'s lock lasts from now (None: the SDK does not say)."""
    from datetime import datetime, timezone

    until = message.locked_until_utc
    if until is None:
        return None
    if until.tzinfo is None:
        until = until.replace(tzinfo=timezone.utc)
    return max(0.0, float((until - datetime.now(timezone.utc)).total_seconds()))
