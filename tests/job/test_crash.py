"""Crash safety, first half: runs killed after the plan, after ``replaying`` is recorded,
in the middle of the replay and after its commit (these two resumed at once with
``syphon replay --run-id``), then a run that finishes (see tests/support/crash_scenario.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.crash_scenario import POINTS, kill_at_each_then_finish

pytestmark = pytest.mark.timeout(600)


def test_runs_killed_up_to_the_replay_commit_lose_nothing_and_mark_every_resend(
    servicebus_emulator: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = POINTS[: POINTS.index("after_replay_commit") + 1]
    assert "mid_replay:3" in points
    kill_at_each_then_finish(
        points,
        servicebus_emulator,
        spark,
        tmp_path,
        monkeypatch,
        resume=("mid_replay:3", "after_replay_commit"),
    )
