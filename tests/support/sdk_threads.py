"""The Service Bus SDK's background threads, as tests see them."""

from __future__ import annotations

import threading


def keep_alive_threads() -> set[threading.Thread]:
    """The SDK's keep-alive threads now running: its AMQP client runs the loop in a thread
    whose target is its ``_keep_alive`` method (azure/servicebus/_pyamqp/client.py)."""
    return {
        t
        for t in threading.enumerate()
        if getattr(getattr(t, "_target", None), "__name__", "") == "_keep_alive"
    }
