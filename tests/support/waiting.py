"""Waiting for something a test can observe, instead of sleeping for a while."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: How often a condition is looked at: short enough that a wait ends soon after the
#: thing happens, long enough not to compete with it for the CPU.
POLL_SECONDS = 0.01


def wait_until(condition: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    """Returns as soon as ``condition()`` is true; fails the test after ``timeout``
    seconds (a generous bound: a busy machine only makes the wait longer, never the test
    wrong)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting after {timeout} s: {what or condition}")
        time.sleep(POLL_SECONDS)


def deliverable(sb: Any, path: str) -> bool:
    """Whether the local Service Bus ``sb`` holds a message at ``path`` (a queue, a
    subscription or their dead-letter queue) that it could deliver now: active and not
    locked, or due to be (its scheduled time or its lock's end has come by the
    namespace's clock; the broker makes it so on its own thread). A test that drains an
    entity stops when the answer is no, instead of waiting out an empty receive."""
    from servicebus_emulator.model import ACTIVE, SCHEDULED

    now = sb.clock.now_ms()
    with sb.broker.lock:
        entity = sb.broker.entity(path)
        return any(
            (m.state == ACTIVE and (m.lock_token is None or (m.locked_until_ms or 0) <= now))
            or (m.state == SCHEDULED and (m.scheduled_ms or 0) <= now)
            for m in entity.messages.values()
        )


def drain(sb: Any, path: str, receiver: Any) -> list[Any]:
    """Everything ``receiver`` (open on ``path`` of ``sb``) is delivered, each settled
    unless the receiver deletes on receipt. It ends once the local Service Bus holds
    nothing more it could deliver there (:func:`deliverable`), instead of waiting out an
    empty receive; an empty receive still ends it (a message that expires rather than
    being delivered)."""
    from azure.servicebus import ServiceBusReceiveMode

    out: list[Any] = []
    while deliverable(sb, path):
        batch = receiver.receive_messages(50, max_wait_time=1)
        if not batch:
            break
        for m in batch:
            out.append(m)
            if receiver._receive_mode == ServiceBusReceiveMode.PEEK_LOCK:
                receiver.complete_message(m)
    return out
