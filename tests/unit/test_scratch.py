"""A local session's scratch folder against another session's clean-up starting at the
same moment (two runs at once, or the test workers): the clean-up never finds a new
folder before its lock is held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from syphon.app import spark as spark_module


def test_a_clean_up_running_while_a_folder_is_made_leaves_it_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spark_module, "_kept", [])
    monkeypatch.setattr(spark_module.atexit, "register", lambda *_: None)
    made = Path.mkdir

    def mkdir_then_clean(self: Path, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        spark_module.clean_stale_scratch(tmp_path)  # another session starts right now

    monkeypatch.setattr(Path, "mkdir", mkdir_then_clean)
    folder = spark_module.new_scratch(tmp_path)
    monkeypatch.setattr(Path, "mkdir", made)
    try:
        assert folder.is_dir()
        assert folder.name.startswith("session-")
        assert spark_module.clean_stale_scratch(tmp_path) == []  # its lock is held
        assert [p.name for p in tmp_path.iterdir()] == [folder.name]
    finally:
        for handle in spark_module._kept:
            handle.close()
