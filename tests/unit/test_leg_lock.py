"""A version leg's lock is the project's lock with the leg's own pins in their place."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "tests" / "versions"))

from leg_lock import entries, merged  # noqa: E402

BASE = """#
# a header
#
py4j==0.10.9.9 \\
    --hash=sha256:aa
    # via pyspark
pyspark==4.2.0 \\
    --hash=sha256:bb
    # via syphon
zstandard==0.23.0 \\
    --hash=sha256:cc
"""
LEG = """# the leg
pyspark==4.0.5 \\
    --hash=sha256:dd
"""


def test_the_legs_pins_replace_the_locks_and_the_rest_stays_hashed() -> None:
    out = merged(BASE, LEG)
    assert [name for name, _ in entries(out)] == ["py4j", "zstandard", "pyspark"]
    assert "pyspark==4.2.0" not in out
    assert "pyspark==4.0.5 \\\n    --hash=sha256:dd" in out
    assert "--hash=sha256:aa" in out
    assert "--hash=sha256:cc" in out


def test_the_spark_4_0_leg_pins_only_pyspark_and_the_lock_has_everything_else() -> None:
    leg = (ROOT / "requirements-spark4.0.lock").read_text(encoding="utf-8")
    base = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    assert [name for name, _ in entries(leg)] == ["pyspark"]
    out = merged(base, leg)
    assert len(entries(out)) == len(entries(base))
    assert all(any("--hash=" in line for line in lines) for _, lines in entries(out))
