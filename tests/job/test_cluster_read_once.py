"""A run read once on a multi-worker cluster: ``syphon run`` as a process on Spark's
``local-cluster`` master (a standalone master and two workers, each with an executor JVM
of its own and its own Python workers). The driver holds the source's locks and hands
each wave's received bytes to Spark; the executors parse them and send them. The event
log says which executors ran the tasks: both did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.jvm import QUICK
from support.paired_env import Pair, backlog_state, job_config
from support.waves import QUEUES, arrived, park_spread, queue
from syphon.app.spark import WAVE_HEAP_MIN_MB

pytestmark = pytest.mark.timeout(400)

SYPHON = Path(sys.executable).parent / "syphon"
MESSAGES = 24


def spark_home(tmp_path: Path) -> Path:
    """The pyspark package's distribution seen through symlinks, so that the standalone
    workers' directory (SPARK_HOME/work) is this test's."""
    import pyspark

    home = tmp_path / "spark-home"
    home.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    return home


def executors_that_ran_tasks(events: Path) -> set[str]:
    ran = set()
    for log in events.rglob("events_*"):
        for line in log.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                ran.add(event["Task Info"]["Executor ID"])
    return ran


def spark_properties(events: Path) -> dict[str, str]:
    """The driver's Spark properties, as its event log recorded them."""
    for log in events.rglob("events_*"):
        for line in log.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerEnvironmentUpdate":
                return dict(event["Spark Properties"])
    raise AssertionError("no environment in the event log")


def test_a_backlog_read_once_on_a_two_worker_cluster_arrives_in_order_and_once(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = park_spread(pair, "c", MESSAGES)
    events = tmp_path / "events"
    events.mkdir()
    # the lines go on in the config's spark.conf mapping (see job_config)
    extra = (
        '    spark.eventLog.enabled: "true"\n'
        f'    spark.eventLog.dir: "{events}"\n'
        '    spark.eventLog.compress: "false"\n'
        # the executors start as quick as the tests' drivers (C1 only, serial GC)
        f'    spark.executor.extraJavaOptions: "{QUICK}"\n'
        "run:\n  wave_messages: 8\n  read: once\n"
    )
    job_config(pair, tmp_path, monkeypatch, extra=extra)
    result = subprocess.run(
        [str(SYPHON), "--log-format", "json", "run", "--config", str(tmp_path / "syphon.yaml")],
        cwd=tmp_path,
        env={
            **os.environ,
            "SPARK_HOME": str(spark_home(tmp_path)),
            # two workers of one core and 1 GB each
            "SYPHON__SPARK__MASTER": "local-cluster[2,1,1024]",
        },
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert arrived(pair) == keys  # every key in order, every message once
    assert not any(backlog_state(pair).values())
    broker = pair.secondary.broker
    paths = [queue(q).lower() for q in range(QUEUES)]
    assert sum(broker.messages_peeked[p] for p in paths) == 0
    assert sum(broker.messages_received[p] for p in paths) == MESSAGES
    # the tasks ran on the cluster's executors, both of them, not in the driver
    assert executors_that_ran_tasks(events) == {"0", "1"}
    # a run in waves of known bytes (a few hundred) sizes the driver's heap: the least
    # (syphon.app.spark.wave_heap_mb)
    assert spark_properties(events)["spark.driver.memory"] == f"{WAVE_HEAP_MIN_MB}m"
    assert pair.secondary.connection_string not in result.stdout + result.stderr
