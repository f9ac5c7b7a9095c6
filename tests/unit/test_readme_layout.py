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


def _entry(layout: str, package: str) -> str:
    """The Layout's entry of ``package`` (``- `job/` — …``), up to the next entry."""
    start = layout.index(f"`{package}/`")
    ends = [m.start() for m in re.finditer(r"\n\s*- `", layout) if m.start() > start]
    return layout[start : min(ends, default=len(layout))]


def test_the_layout_names_every_module_of_every_layer_in_its_own_packages_entry() -> None:
    layout = _layout()
    missing = []
    for package in sorted(p for p in (ROOT / "src" / "syphon").iterdir() if p.is_dir()):
        if package.name.startswith("__"):
            continue
        named = set(re.findall(r"`([a-z_0-9]+)(?:\.py)?`", _entry(layout, package.name)))
        missing += [
            f"{package.name}/{module.stem}"
            for module in sorted(package.glob("*.py"))
            if module.stem != "__init__" and module.stem not in named
        ]
    assert missing == []


def test_a_module_named_in_another_packages_entry_only_is_found_missing() -> None:
    layout = "- `a/` — `one`, `two`\n- `b/` — `three`\n"
    assert "three" not in _entry(layout, "a")
    assert "one" in _entry(layout, "a")
    assert _entry(layout, "b").startswith("`b/`")


def test_the_layout_names_no_module_that_is_gone() -> None:
    layout = _layout()
    modules = {m.stem for m in (ROOT / "src" / "syphon").glob("*/*.py")}
    # the modules the layout names as `name.py`
    cited = set(re.findall(r"`([a-z_0-9]+)\.py`", layout))
    assert cited - modules - {"pack_env", "runtime_lock", "notebook_sync", "paired_env"} == set()
