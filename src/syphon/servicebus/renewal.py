"""Keeping a run's locks: a thread that renews every lock of some
:class:`~syphon.servicebus.locked.LockedQueue`\\ s at a third of their lock duration.

The first message received tells a queue's lock duration; the renewal renews at a third
of the shortest one known, every queue in turn, a page of tokens per request. A renewal
the namespace refuses is counted (:attr:`Renewal.failed`) and tried again at the next
turn; a lock that lapsed anyway is the queue's to remember (:attr:`LockedQueue.lost`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from syphon.servicebus.locked import LockedQueue

log = logging.getLogger(__name__)

#: How often the renewal looks at the clock.
_POLL_SECONDS = 0.1


class Renewal:
    """Renews the locks of ``queues`` (by path) from when it is entered until it is left
    (a context manager: the thread is a daemon, and leaving joins it)."""

    def __init__(self, queues: Mapping[str, LockedQueue]) -> None:
        self.queues = queues
        #: renewals that failed (the namespace refused them), all queues
        self.failed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"Renewal({len(self.queues)} queues, {self.failed} failed)"

    def __enter__(self) -> Renewal:
        self._thread = threading.Thread(
            target=self._renew_forever, name="syphon-lock-renewal", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def lock_seconds(self) -> float | None:
        """The shortest lock duration of the queues (None: none received a message)."""
        known = [q.lock_seconds for q in self.queues.values() if q.lock_seconds]
        return min(known) if known else None

    def _renew_forever(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(_POLL_SECONDS):
            shortest = self.lock_seconds
            if shortest and time.monotonic() - last >= shortest / 3:
                last = time.monotonic()
                self.renew_once()

    def renew_once(self) -> None:
        """Renews every queue's locks once."""
        for path, queue in self.queues.items():
            try:
                lost = queue.renew()
            except Exception as exc:  # the namespace: the next renewal tries again
                log.warning("renewing the locks of %s failed: %s", path, type(exc).__name__)
                self.failed += 1
                continue
            if lost:
                log.warning("%d locks of %s lapsed while the run kept them", len(lost), path)
