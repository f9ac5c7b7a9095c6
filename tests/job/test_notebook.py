"""The rerun-after-outage notebook, run headless (papermill, a real Python kernel)
against the local Service Bus: status, plan, verdicts, spread groups, replay, and one
message followed through the audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.notebook_run import check_the_notebook
from support.notebook_sync import IPYNB, SOURCE, cells_of, rendered
from support.paired_env import Pair

pytestmark = pytest.mark.timeout(420)


def test_the_ipynb_is_the_databricks_source_cell_for_cell() -> None:
    assert IPYNB.read_text(encoding="utf-8") == rendered(SOURCE.read_text(encoding="utf-8")), (
        "notebooks/rerun_after_outage.ipynb is stale: run python tests/support/notebook_sync.py"
    )
    kinds = [kind for kind, _ in cells_of(SOURCE.read_text(encoding="utf-8"))]
    assert kinds.count("code") == 8


def test_the_notebook_plans_inspects_replays_and_finds_a_message_in_the_audit(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a classic local session (and as a Spark Connect client in
    tests/job/test_connect_runs.py)."""
    check_the_notebook(pair, tmp_path, monkeypatch)
