"""A run's Python workers come from one PySpark daemon: every stage's tasks reuse the
same warm workers instead of a second daemon forking workers that import pandas,
pyarrow and the SDK again; and the daemon imports the installed PySpark, not the sources
of the zip that Spark puts first on the workers' path."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage

from support.paired_env import Pair, job_config, run_job, send_raw
from syphon.app.pyworkers import GROUP, start_python_workers
from syphon.app.spark import LOCAL_CONF
from syphon.core.schema import Status
from syphon.servicebus.backlog_messages import to_backlog_message

pytestmark = pytest.mark.timeout(300)

DAEMON = LOCAL_CONF["spark.python.daemon.module"]


def daemons_of(jvm_pid: int) -> list[int]:
    """The PySpark daemons (``python -m syphon.app.worker_daemon``, see LOCAL_CONF) the
    JVM started."""
    listing = subprocess.run(
        ["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in listing.splitlines():
        pid, ppid, args = line.split(None, 2)
        if int(ppid) == jvm_pid and f"-m {DAEMON}" in args:
            found.append(int(pid))
    return found


def test_every_stage_of_a_run_uses_the_workers_of_one_daemon(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = [
        to_backlog_message(
            ServiceBusMessage(
                f"m{i}".encode(), message_id=f"m{i}", session_id="s" if i % 2 else None
            ),
            "orders",
        )
        for i in range(20)
    ]
    send_raw(pair, 0, messages[:10])
    send_raw(pair, 1, messages[10:])
    jvm = spark.sparkContext._gateway.proc.pid
    before = set(daemons_of(jvm))  # the session is shared: earlier tests' Python tasks
    result = run_job(job_config(pair, tmp_path, monkeypatch), spark)
    assert result.status == Status.DONE, result.detail
    after = set(daemons_of(jvm))
    if before:  # the run's tasks went to the daemon already there
        assert after == before
    else:
        assert len(after) == 1


def test_a_worker_imports_the_installed_pyspark_with_its_cached_bytecode(spark: Any) -> None:
    """Modules imported from a zip are compiled from source in every worker; the installed
    package's are read from their cached bytecode."""
    import pandas as pd
    import pyspark

    def where(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        import pyspark
        import pyspark.worker

        for _ in frames:
            yield pd.DataFrame({"module": [pyspark.__file__], "worker": [pyspark.worker.__file__]})

    (row,) = (
        spark.range(1).repartition(1).mapInPandas(where, "module string, worker string").collect()
    )
    assert row.module == pyspark.__file__
    assert ".zip" not in row.worker
    assert daemons_of(spark.sparkContext._gateway.proc.pid)


def test_the_workers_started_ahead_of_a_run_are_the_daemon_its_tasks_use(spark: Any) -> None:
    """The warm-up a local session of ``syphon`` runs as it starts (syphon.app.pyworkers):
    its one task succeeds, and it starts no daemon beside the one the session's other
    Python tasks use (a second would import pandas, pyarrow and the SDK again)."""
    jvm = spark.sparkContext._gateway.proc.pid
    spark.range(2).mapInArrow(lambda batches: batches, "id long").collect()  # a run's task
    before = set(daemons_of(jvm))
    assert before, "a Python task ran, so its daemon is there"
    tracker = spark.sparkContext.statusTracker()
    earlier = set(tracker.getJobIdsForGroup(GROUP))  # in-process commands' sessions: this one
    start_python_workers(spark).join(timeout=120)
    (job,) = set(tracker.getJobIdsForGroup(GROUP)) - earlier
    # the tracker learns a job's end from Spark's listener bus, after the job's action
    # returned to the warm-up's thread: a suite run once read RUNNING here
    until = time.monotonic() + 30
    while tracker.getJobInfo(job).status == "RUNNING" and time.monotonic() < until:
        time.sleep(0.05)
    assert tracker.getJobInfo(job).status == "SUCCEEDED"
    assert set(daemons_of(jvm)) == before
