"""``python -m syphon_demo`` end to end from an empty working directory, then the demo
again in the same directory (same audit and ledger) in the test's process.

The first demo is a process of its own: what the operator sees (stdout, and stderr
without library chatter) is what is tested. The second one checks that a demo can run
again where one ran before; it shares the tests' Spark session instead of starting a
JVM of its own (the same code from the namespaces to the report; only the session is
the tests')."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servicebus_emulator.server import EMULATOR_KEY
from support.jvm import SMALL_DATA_CONF, java_options
from syphon.store.audit import RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

#: the tests' quick JVM for the demo's Spark session (an override of conf/local.yaml)
QUICK_JVM = "SYPHON__SPARK__CONF__spark.driver.extraJavaOptions"
SMALL_DATA = {f"SYPHON__SPARK__CONF__{k}": v for k, v in SMALL_DATA_CONF.items()}
#: a task per message for the snapshot, the replay and the settle, at most one per core:
#: the demo's process (local[2]) spreads them over two tasks, which the tests' session
#: (one task per stage, tests/conftest.py) does not
TWO_TASKS = {"SYPHON__RUN__MESSAGES_PER_TASK": "1"}
#: loggers whose level the demo sets for its own story (restored after the in-process one)
DEMO_LOGGERS = ("proton", "servicebus_emulator", "syphon.producer")


def check_story(out: str, workdir: Path) -> None:
    """What every demo tells: the outage, the verdicts, the settle, the fix for the
    message sent to a queue that does not exist, and where the audit and report are."""
    assert "parked in the backlog" in out
    assert ": done" in out
    assert "verdicts: invalid 3, replay " in out
    assert "settle_dead_lettered 3" in out
    assert "fix: a destination does not exist: create nowhere on " in out
    assert str(workdir / ".syphon" / "delta") in out
    report = Path(out.split("report: ", 1)[1].split("\n", 1)[0])
    assert report.parent == workdir / ".syphon" / "delta" / "reports"
    assert "Verdicts by destination" in report.read_text(encoding="utf-8")


def test_the_demo_runs_the_whole_story_and_can_run_again(
    tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "syphon_demo"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, QUICK_JVM: java_options(), **SMALL_DATA, **TWO_TASKS},
        timeout=400,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    check_story(result.stdout, tmp_path)
    assert "proton" not in result.stdout + result.stderr  # no emulator chatter
    # the operator's stderr: the stages, warnings and no library chatter
    noise = [
        line
        for line in result.stderr.splitlines()
        if "azure." in line or (" INFO " in line and " syphon" not in line)
    ]
    assert noise == []
    assert len(result.stderr.splitlines()) < 60, result.stderr
    for text in (result.stdout, result.stderr):  # no secret in what it prints
        assert EMULATOR_KEY not in text
        assert "SharedAccessKey=" not in text
    runs = read_table(tmp_path / ".syphon" / "delta" / RUNS_TABLE).to_pylist()
    assert sum(r["status"] == "done" for r in runs) == 1

    # again, in the same directory: a second run in the same ledger
    from syphon_demo.demo import run_demo

    monkeypatch.chdir(tmp_path)
    levels = {name: logging.getLogger(name).level for name in DEMO_LOGGERS}
    environ = dict(os.environ)  # the demo points its config at its namespaces through it
    said: list[str] = []
    try:
        code = run_demo(spark_factory=lambda: spark, say=said.append)
    finally:
        os.environ.clear()
        os.environ.update(environ)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    assert code == 0, said
    check_story("\n".join(said) + "\n", tmp_path)
    runs = read_table(tmp_path / ".syphon" / "delta" / RUNS_TABLE).to_pylist()
    assert sum(r["status"] == "done" for r in runs) == 2
