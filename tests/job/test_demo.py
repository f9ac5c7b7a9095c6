"""``syphon demo`` end to end, twice, from an empty working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jvm import SMALL_DATA_CONF, java_options
from servicebus_emulator.server import EMULATOR_KEY
from syphon.store.audit import RUNS_TABLE
from syphon.store.delta import read_table

pytestmark = pytest.mark.timeout(420)

SYPHON = Path(sys.executable).parent / "syphon"
#: the tests' quick JVM for the demo's Spark session (an override of conf/local.yaml)
QUICK_JVM = "SYPHON__SPARK__CONF__spark.driver.extraJavaOptions"
SMALL_DATA = {f"SYPHON__SPARK__CONF__{k}": v for k, v in SMALL_DATA_CONF.items()}


def test_the_demo_runs_the_whole_story_and_can_run_again(tmp_path: Path) -> None:
    for attempt in (1, 2):
        result = subprocess.run(
            [sys.executable, "-m", "syphon_demo"], cwd=tmp_path, capture_output=True, text=True,
            env={**os.environ, QUICK_JVM: java_options(), **SMALL_DATA},
            timeout=400, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        out = result.stdout
        assert "parked in the backlog" in out
        assert ": done" in out
        assert "verdicts: invalid 3, replay " in out
        assert "settle_dead_lettered 3" in out
        assert "fix: a destination does not exist: create nowhere on " in out
        assert str(tmp_path / ".syphon" / "delta") in out
        report = out.split("report: ", 1)[1].split("\n", 1)[0]
        assert Path(report).parent == tmp_path / ".syphon" / "delta" / "reports"
        assert "Verdicts by destination" in Path(report).read_text(encoding="utf-8")
        assert "proton" not in result.stdout + result.stderr  # no emulator chatter
        # the operator's stderr: the stages, warnings and no library chatter
        noise = [line for line in result.stderr.splitlines()
                 if "azure." in line or (" INFO " in line and " syphon" not in line)]  # fmt: skip
        assert noise == []
        assert len(result.stderr.splitlines()) < 60, result.stderr
        for text in (result.stdout, result.stderr):  # no secret in what it prints
            assert EMULATOR_KEY not in text
            assert "SharedAccessKey=" not in text
        runs = read_table(tmp_path / ".syphon" / "delta" / RUNS_TABLE).to_pylist()
        assert sum(r["status"] == "done" for r in runs) == attempt
