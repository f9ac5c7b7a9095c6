"""The job through ``spark-submit`` (the one in the pyspark package) against the local
Service Bus: the entry script in ``jobs/`` hands its arguments to the ``syphon`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paired_env import Pair, job_config, park_orders

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_spark_submit_runs_the_job_end_to_end(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parked = park_orders(pair, "submit", queues=2, per_queue=2)
    job_config(pair, tmp_path, monkeypatch)  # sets the secrets' variables in os.environ
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}  # fmt: skip
    result = subprocess.run(
        [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         str(ROOT / "jobs" / "syphon_submit.py"), "--log-format", "json", "run",
         "--config", str(tmp_path / "syphon.yaml")],
        capture_output=True, text=True, env=env, timeout=280, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert ": done" in result.stdout
    received = sorted(str(m.message_id) for m in
                      pair.primary.broker.entity("orders").messages.values())  # fmt: skip
    assert received == sorted(parked)
    assert pair.secondary.connection_string not in result.stdout + result.stderr
