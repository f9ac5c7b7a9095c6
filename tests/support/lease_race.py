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
        if lease.ours():
            won.append(lease.holder)

    threads = [threading.Thread(target=ask, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return won


def _connect_side(table: str, holders: int) -> None:
    """A second driver for the race on a Delta table through Spark: a client of the
    Spark Connect server ``SPARK_REMOTE`` names. It starts its session, says ``ready``,
    waits for a line on stdin, races ``holders`` leases on ``table`` and prints the
    holders that then held it, one per line, then ``done``."""
    import sys
    from datetime import timedelta

    from pyspark.sql import SparkSession

    from syphon.store.catalog import SparkLeaseLog

    spark = SparkSession.builder.getOrCreate()
    spark.range(1).count()  # the session answers before the race starts
    print("ready", flush=True)
    sys.stdin.readline()
    leases = [
        Lease(SparkLeaseLog(table, lambda: spark), f"connect-{i}", timedelta(minutes=5))
        for i in range(holders)
    ]
    for holder in race(leases):
        print(f"won {holder}", flush=True)
    print("done", flush=True)
    spark.stop()


if __name__ == "__main__":  # python tests/support/lease_race.py <table> <holders>
    import sys

    _connect_side(sys.argv[1], int(sys.argv[2]))
