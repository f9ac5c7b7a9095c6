"""A paired sender: one queue or topic of the primary, through the backlog when its
entity is failed over (see :mod:`syphon.producer.client`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, Protocol

from syphon.producer.options import (
    PRIMARY,
    SECONDARY,
    BacklogMessageTooLargeError,
    BacklogUnavailableError,
    SendRoute,
    close_quietly,
)
from syphon.servicebus.backlog_messages import (
    counts_as_outage,
    is_authorization_error,
    is_message,
    is_size_exceeded,
    to_backlog_message,
)


class _FailoverState(Protocol):
    @property
    def failed_over(self) -> bool: ...


class _Pair(Protocol):
    """What a sender asks of its :class:`~syphon.producer.client.PairedNamespaceClient`
    (named here, not imported: the client imports the sender)."""

    backlog_paths: list[str]
    _clients: dict[str, Any]

    def check_open(self) -> None: ...
    def fault(self, side: str, exc: BaseException) -> None: ...
    def stamp(self) -> tuple[str, int]: ...
    def _state(self, entity: str, kind: str) -> _FailoverState: ...
    def _count(self, name: str, by: int = 1) -> None: ...
    def _record_success(self, entity: str, kind: str, count: int) -> None: ...
    def _record_failure(self, entity: str, kind: str, exc: BaseException) -> bool: ...
    def _backlog_index(self, current: int | None) -> int: ...
    def _remove_from_rotation(self, index: int, exc: BaseException) -> None: ...


class PairedSender:
    """Sends to one queue or topic of the primary, through the backlog when failed over."""

    def __init__(self, client: _Pair, entity: str, kind: str) -> None:
        client.check_open()
        self.client = client
        self.entity = entity
        self.kind = kind
        self._primary: Any = None
        self._backlog: Any = None
        self._backlog_at: int | None = None
        # one random pick per sender, so that unrelated clients spread their load
        # (with none in the rotation, sends say so; the pick happens when one is back)
        self._choice: int | None = None
        with contextlib.suppress(BacklogUnavailableError):
            self._choice = client._backlog_index(None)

    @property
    def backlog_queue(self) -> str:
        """The backlog queue this sender uses when its entity is failed over."""
        self._choice = self.client._backlog_index(self._choice)
        return self.client.backlog_paths[self._choice]

    def _primary_sender(self) -> Any:
        if self._primary is None:
            primary = self.client._clients[PRIMARY]
            self._primary = (
                primary.get_queue_sender(self.entity)
                if self.kind == "queue"
                else primary.get_topic_sender(self.entity)
            )
        return self._primary

    def _backlog_sender(self, index: int) -> Any:
        if self._backlog_at != index:
            self._close_backlog()
            path = self.client.backlog_paths[index]
            self._backlog = self.client._clients[SECONDARY].get_queue_sender(path)
            self._backlog_at = index
        return self._backlog

    def _close_backlog(self) -> None:
        close_quietly(self._backlog)
        self._backlog = None
        self._backlog_at = None

    def send_messages(self, message: Any | Iterable[Any]) -> SendRoute:
        """Sends one message or a list (one transfer to the primary, in order).

        Returns:
            Where the messages went.

        Raises:
            PairedClientClosedError: the client is closed or faulted.
            BacklogUnavailableError: failed over, and no backlog queue accepts sends.
            BacklogMessageTooLargeError: a message's backlog form is over the limit.
            azure.servicebus.exceptions.ServiceBusError: the primary's error, while the
                entity is not (yet) failed over.
        """
        self.client.check_open()
        messages = [message] if is_message(message) else list(message)
        if not messages:
            return SendRoute("primary", self.entity, 0)
        state = self.client._state(self.entity, self.kind)
        if not state.failed_over:
            try:
                self._primary_sender().send_messages(
                    messages[0] if len(messages) == 1 else messages
                )
            except Exception as exc:
                if not counts_as_outage(exc):
                    raise
                self._auth_fault(PRIMARY, exc)
                if not self.client._record_failure(self.entity, self.kind, exc):
                    raise
            else:
                self.client._record_success(self.entity, self.kind, len(messages))
                return SendRoute("primary", self.entity, len(messages))
        return self._send_to_backlog(messages)

    def _auth_fault(self, side: str, exc: BaseException) -> None:
        if is_authorization_error(exc):
            self.client.fault(side, exc)

    def _send_to_backlog(self, messages: list[Any]) -> SendRoute:
        pending = [to_backlog_message(m, self.entity, self.client.stamp()) for m in messages]
        while True:
            self.client.check_open()
            index = self.client._backlog_index(self._choice)
            self._choice = index
            sender = self._backlog_sender(index)
            path = self.client.backlog_paths[index]
            try:
                while pending:
                    batch = sender.create_message_batch()
                    taken = 0
                    for item in pending:
                        try:
                            batch.add_message(item)
                        except Exception as exc:
                            if not is_size_exceeded(exc):
                                raise
                            if taken == 0:
                                raise BacklogMessageTooLargeError(
                                    f"a message for {self.entity} is too large for the backlog: "
                                    f"its backlog form (with the x-ms-* aliases) exceeds the "
                                    f"{batch.max_size_in_bytes} bytes {path} accepts"
                                ) from None
                            break
                        taken += 1
                    sender.send_messages(batch)
                    pending = pending[taken:]
                    self.client._count("backlog_sends", taken)
            except BacklogMessageTooLargeError:
                raise
            except Exception as exc:
                if not counts_as_outage(exc):
                    raise
                self.client._count("backlog_failures")
                self._auth_fault(SECONDARY, exc)
                self.client._remove_from_rotation(index, exc)
                self._close_backlog()
                continue
            return SendRoute("backlog", path, len(messages))

    def close(self) -> None:
        close_quietly(self._primary)
        self._primary = None
        self._close_backlog()

    def __enter__(self) -> PairedSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
