"""Leases asking for the lease at the same moment (threads released by one barrier), for
the lease tests on a local folder and on object storage."""

from __future__ import annotations

import threading

from syphon.store.lease import Lease


def race(leases: list[Lease]) -> list[str]:
    """Every lease acquires at once; returns the holders that then hold it (one, if the
    lease keeps its guarantee)."""
    won: list[str] = []
    start = threading.Barrier(len(leases))

    def ask(lease: Lease) -> None:
        start.wait()
        lease.acquire()
        if lease.held():
            won.append(lease.holder)

    threads = [threading.Thread(target=ask, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return won
