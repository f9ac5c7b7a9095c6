"""A command's exit code is its own: ``syphon status`` and a run that ends ``empty`` (no
Spark: delta-rs reads the audit) are run many times in a row as processes, and each
exits 0 with nothing on stderr about native threads (a process that had Delta tables
open used to abort at exit now and then: ``terminate called without an active
exception``, exit -6)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from support.crash_scenario import SYPHON
from support.paired_env import Pair, job_config, park_orders, run_job

pytestmark = pytest.mark.timeout(300)

#: How many times each command runs: on the old code about half of such processes
#: aborted, so all eight would pass there about twice in a thousand.
TIMES = 4


def test_status_and_an_empty_run_exit_with_their_own_code_every_time(
    pair: Pair, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = job_config(pair, tmp_path, monkeypatch)
    for n in range(2):  # an audit with a few runs
        park_orders(pair, f"r{n}", queues=2, per_queue=2)
        assert run_job(config, spark, f"run-{n}").status == "done"
    conf = str(tmp_path / "syphon.yaml")
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    for argv in (["status", "--config", conf, "--runs", "3"], ["run", "--config", conf]):
        for _ in range(TIMES):
            done = subprocess.run(
                [str(SYPHON), *argv],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert (done.returncode, "terminate called" in done.stderr) == (0, False), (
                argv[0],
                done.returncode,
                done.stderr[-2000:],
            )
