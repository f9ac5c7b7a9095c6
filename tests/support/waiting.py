"""Waiting for something a test can observe, instead of sleeping for a while."""

from __future__ import annotations

import time
from collections.abc import Callable

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
