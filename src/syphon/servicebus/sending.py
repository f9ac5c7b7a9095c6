"""Sending to the primaries: probes of the destinations, and a task's senders.

A :class:`SenderPool` holds one client per primary and one sender per destination,
opens them side by side (the SDK's link set-up is mostly waiting), sends one batch of
encoded messages (:mod:`syphon.servicebus.raw`) per call and says what happened as a
:class:`Sent` — never raising, so the replay's rules (:mod:`syphon.job.replay.lanes`) decide
what a failure means for the batches after it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from syphon.core.schema import Detail
from syphon.servicebus import errors
from syphon.servicebus.access import Access
from syphon.servicebus.raw import lean
from syphon.servicebus.raw_batch import EncodedMessage, encoded_batch

log = logging.getLogger(__name__)

#: The SDK's own retries per send: few, so that server-busy comes back to the replay's
#: backoff (which counts it) and a dead namespace is noticed in seconds.
SDK_RETRIES = 2

#: Senders a replay task opens side by side.
OPEN_THREADS = 16

#: Destinations the driver probes side by side (link set-up is mostly the SDK waiting).
PROBE_THREADS = 64

#: A destination: (primary namespace, entity path).
Destination = tuple[str, str]


@dataclass(frozen=True)
class Sent:
    """What one send of a batch did.

    Attributes:
        status: ``sent``, ``busy`` (throttled: nothing sent, try again later),
            ``in_doubt`` (the transfer started and the answer was lost: the batch may
            have arrived) or ``failed`` (the service refused it: nothing arrived).
        error: the error's class name, when not sent.
        namespace_fault: the namespace itself failed (all its senders are closed).
    """

    status: str
    error: str | None = None
    namespace_fault: bool = False


#: The entity a credentials check attaches a sender link to. It need not exist: the
#: token is put (and a wrong key refused) before the attach is answered.
CREDENTIALS_CHECK_ENTITY = "syphon-credentials-check"


def refused_credentials(namespaces: Iterable[Access]) -> tuple[BaseException, Access] | None:
    """The SDK's error of the first namespace (in the order given) that refuses its
    credentials for sending, with that namespace; None when every one accepts them.
    Nothing is sent.

    Each is checked by attaching a sender link to :data:`CREDENTIALS_CHECK_ENTITY`, side
    by side: the SDK first puts a token for it (CBS), which the service refuses for a
    wrong or expired key, and azure-identity fails without an identity; a key without
    Send rights has the attach refused. Any other answer (the entity does not exist,
    most likely; a namespace that cannot be reached, which the destinations' probes and
    the sends meet later, per destination) is not a refusal of the credentials."""

    def check(access: Access) -> BaseException | None:
        try:
            with (
                access.client(retry_total=0) as client,
                lean(client.get_queue_sender(CREDENTIALS_CHECK_ENTITY, keep_alive=None)),
            ):
                pass  # entering puts the token and attaches the link
        except Exception as exc:
            if errors.error_name(exc) in errors.DENIED:
                return exc
            log.debug("credentials check of %s: %s", access.namespace, type(exc).__name__)
        return None

    listed = list(namespaces)
    if not listed:
        return None
    with ThreadPoolExecutor(max_workers=min(PROBE_THREADS, len(listed))) as pool:
        answers = list(pool.map(check, listed))
    for access, refusal in zip(listed, answers, strict=True):
        if refusal is not None:
            return refusal, access
    return None


def probe_destinations(
    primaries: Mapping[str, Access], destinations: Iterable[Destination]
) -> dict[Destination, str | None]:
    """Checks every (primary, destination) by attaching a sender link and closing it, side
    by side; None for the healthy ones, else a skip reason (``destination_missing``,
    ``destination_unavailable``, ``probe_failed_<Error>``: the namespace refused the
    connection or the credentials).

    No message is sent: a ping (an empty message the service drops) would reach the
    consumers of a service that does not drop it (the paired sender, whose wire
    behaviour is the paired-namespace feature's, still pings). A destination that accepts
    the attach and refuses sends (the service may check a disabled entity only when it
    receives a message) is found by the first send, and its later batches are skipped
    (see :mod:`syphon.job.replay.lanes`)."""

    def probe(client: Any, primary: str, name: str) -> str | None:
        try:
            with lean(client.get_queue_sender(name, keep_alive=None)):
                pass  # entering attaches the link (and puts the token)
            return None
        except Exception as exc:
            name_of = type(exc).__name__
            if name_of in errors.BUSY:
                return None  # up, only throttled: the sends back off
            if name_of in errors.ENTITY_MISSING:
                reason = Detail.DESTINATION_MISSING
            elif name_of in errors.ENTITY_DISABLED:
                reason = Detail.DESTINATION_UNAVAILABLE
            elif isinstance(exc, OSError) or _is_azure(exc):
                reason = f"{Detail.PROBE_FAILED}{name_of}"
            else:
                raise
        log.warning("destination %s of %s is skipped: %s", name, primary, reason)
        return reason

    out: dict[Destination, str | None] = {}
    by_primary: dict[str, list[str]] = {}
    for primary, destination in destinations:
        by_primary.setdefault(primary, []).append(destination)
    for primary, names in by_primary.items():
        # each sender has its own connection: the attaches go side by side
        with (
            primaries[primary].client(retry_total=1) as client,
            ThreadPoolExecutor(max_workers=min(PROBE_THREADS, len(names))) as pool,
        ):
            reasons = pool.map(probe, [client] * len(names), [primary] * len(names), names)
            out.update(((primary, name), r) for name, r in zip(names, reasons, strict=True))
    return out


def _is_azure(exc: BaseException) -> bool:
    from azure.core.exceptions import AzureError

    return isinstance(exc, AzureError)


class SenderPool:
    """One replay task's clients (one per primary) and senders (one per destination)."""

    def __init__(self, primaries: Mapping[str, Access]) -> None:
        self.primaries = primaries
        self.clients: dict[str, Any] = {}
        self.senders: dict[Destination, Any] = {}

    def sender(self, destination: Destination) -> Any:
        if destination not in self.senders:
            primary = destination[0]
            if primary not in self.clients:
                self.clients[primary] = self.primaries[primary].client(
                    retry_total=SDK_RETRIES, keep_alive=None
                )
            # keep_alive=None: the client's does not reach its senders, and a sender's
            # keep-alive thread makes its close wait up to a second
            self.senders[destination] = lean(
                self.clients[primary].get_queue_sender(destination[1], keep_alive=None)
            )
        return self.senders[destination]

    def open(self, destinations: Iterable[Destination]) -> None:
        """Opens the senders of ``destinations`` side by side. An error here is left for
        the send, which reports it."""
        todo = sorted({d for d in destinations if d not in self.senders})
        if len(todo) < 2:
            return
        senders = [self.sender(d) for d in todo]

        def open_one(sender: Any) -> None:
            with contextlib.suppress(Exception):
                sender.__enter__()

        with ThreadPoolExecutor(max_workers=min(OPEN_THREADS, len(senders))) as pool:
            list(pool.map(open_one, senders))

    def send(self, destination: Destination, messages: list[EncodedMessage]) -> Sent:
        """Sends ``messages`` as one batch, each exactly as encoded; never raises."""
        try:
            sender = self.sender(destination)
            sender.send_messages(encoded_batch(sender, messages))
            return Sent("sent")
        except Exception as exc:
            name = type(exc).__name__
            if name in errors.BUSY:
                return Sent("busy", name)
            self.drop(destination)
            fault = name in errors.NAMESPACE_FAULTS
            if fault:
                self.close_namespace(destination[0])
            status = "in_doubt" if name in errors.IN_DOUBT else "failed"
            return Sent(status, name, fault)

    def drop(self, destination: Destination) -> None:
        sender = self.senders.pop(destination, None)
        if sender is not None:
            with contextlib.suppress(Exception):  # a failed sender may fail to close
                sender.close()

    def close_namespace(self, primary: str) -> None:
        """The primary failed: close all of its senders and its client now."""
        for key in [k for k in self.senders if k[0] == primary]:
            self.drop(key)
        client = self.clients.pop(primary, None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def close(self) -> None:
        for key in list(self.senders):
            self.drop(key)
        for primary in list(self.clients):
            self.close_namespace(primary)
