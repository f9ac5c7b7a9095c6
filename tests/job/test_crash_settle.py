"""Crash safety, second half: runs killed after ``replayed`` is recorded, in the middle
of the settle and after its commit, then a run that finishes (see
tests/support/crash_scenario.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.crash_scenario import POINTS, kill_at_each_then_finish

pytestmark = pytest.mark.timeout(600)


def test_runs_killed_after_the_replay_lose_nothing(
    servicebus_emulator: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = POINTS[POINTS.index("after_replayed") :]
    assert points == ["after_replayed", "mid_settle:2", "after_settle_commit"]
    kill_at_each_then_finish(points, servicebus_emulator, spark, tmp_path, monkeypatch)
