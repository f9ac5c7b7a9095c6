"""The Spark 4.0 leg's environment: .venv's packages behind the leg's own
(tests/versions/overlay.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "versions"))

import overlay  # noqa: E402


def test_the_spark_4_0_leg_pins_only_pyspark_with_its_hash() -> None:
    text = overlay.LEG_LOCK.read_text(encoding="utf-8")
    assert overlay.pinned(text) == ["pyspark"]
    assert "pyspark==4.0.5 \\\n    --hash=sha256:" in text


def test_the_link_adds_the_base_site_and_its_own_pth_files_after_the_legs(
    tmp_path: Path,
) -> None:
    base, other = tmp_path / "base", tmp_path / "other"
    base.mkdir()
    other.mkdir()
    (base / "probe_in_base.py").write_text("WHERE = 'base'\n")
    (other / "probe_in_other.py").write_text("")
    (base / "editable.pth").write_text(f"{other}\n")  # as syphon's editable install
    line = overlay.pth_line(base)
    code = f"{line}import sys, probe_in_base, probe_in_other; print(sys.path.index({str(base)!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0  # appended, behind what was there


def test_a_requirement_the_base_does_not_meet_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert overlay.unmet(["pyspark"]) == []  # the lock meets its PySpark's requirements
    real = overlay.version
    monkeypatch.setattr(overlay, "version", lambda n: "0.0.1" if n == "py4j" else real(n))
    (problem,) = overlay.unmet(["pyspark"])
    assert problem.startswith("py4j")
    assert problem.endswith(": 0.0.1")
