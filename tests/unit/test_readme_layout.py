"""The README's Layout names every module of the product: a module added without a word
there fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _layout() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Layout")
    return text[start : text.index("\n## ", start + 1)]


def test_the_layout_names_every_module_of_every_layer() -> None:
    layout = _layout()
    named = set(re.findall(r"`([a-z_0-9]+)(?:\.py)?`", layout))
    missing = sorted(
        f"{module.parent.name}/{module.stem}"
        for module in (ROOT / "src" / "syphon").glob("*/*.py")
        if module.stem != "__init__" and module.stem not in named
    )
    assert missing == []


def test_the_layout_names_no_module_that_is_gone() -> None:
    layout = _layout()
    modules = {m.stem for m in (ROOT / "src" / "syphon").glob("*/*.py")}
    # the modules the layout names as `name.py`
    cited = set(re.findall(r"`([a-z_0-9]+)\.py`", layout))
    assert cited - modules - {"pack_env", "runtime_lock", "notebook_sync", "paired_env"} == set()
