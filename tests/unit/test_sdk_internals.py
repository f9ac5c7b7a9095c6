"""``servicebus/raw.py`` and ``servicebus/raw_batch.py`` reach below the SDK's public
surface; each one's docstring lists every internal it uses. This test fails when a module
uses one it does not list, or when the installed SDK no longer has one it lists (an
upgrade renamed or removed it): the place an SDK upgrade looks first. No other module of
the product reaches for an SDK internal (``test_architecture.py``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

SERVICEBUS = Path(__file__).parents[2] / "src" / "syphon" / "servicebus"
RAWS = {p.stem: p for p in sorted(SERVICEBUS.glob("raw*.py"))}


def _module(raw: str) -> ast.Module:
    return ast.parse(RAWS[raw].read_text(encoding="utf-8"))


def _docstring(raw: str) -> str:
    doc = ast.get_docstring(_module(raw))
    assert doc is not None
    return doc


def test_both_modules_below_the_surface_are_checked() -> None:
    assert set(RAWS) == {"raw", "raw_batch"}


def listed(raw: str) -> list[str]:
    """The internals the module's docstring lists, each as a full dotted name
    (``.name``, or a ``PREFIX_*`` family, after a full one on the same item belongs to
    the owner named before it)."""
    doc = _docstring(raw)
    section = doc[doc.index("SDK internals this module uses") :]
    names: list[str] = []
    for item in re.split(r"\n- ", section)[1:]:
        owner = ""
        for name in re.findall(r"``([A-Za-z_.*]+)``", item):
            if name.startswith("azure."):
                owner = name.rsplit(".", 1)[0]
                names.append(name)
            elif name.startswith(".") and owner:
                names.append(owner + name)
            elif "*" in name and owner:  # a family of names in the owner module
                names.append(f"{owner}.{name}")
    return names


def used(raw: str) -> set[str]:
    """The private names a module reaches for: attributes and imports from private
    modules."""
    out: set[str] = set()
    for node in ast.walk(_module(raw)):
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_") and not node.attr.startswith("__"):
                out.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module and "._" in node.module:
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _resolve(dotted: str) -> tuple[Any, str]:
    """(owner object, attribute) of a listed name."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:-1]:
            owner = getattr(owner, part)
        return owner, parts[-1]
    raise AssertionError(f"{dotted}: no importable module")


def _has(owner: Any, attr: str) -> bool:
    if hasattr(owner, attr):
        return True
    if not inspect.isclass(owner):
        return False
    sources = "".join(
        inspect.getsource(c) for c in owner.__mro__ if c.__module__.startswith("azure")
    )
    return re.search(rf"self\.{re.escape(attr)}\s*[:=]", sources) is not None


@pytest.mark.parametrize("raw", sorted(RAWS))
def test_every_internal_a_module_uses_is_listed_in_its_docstring(raw: str) -> None:
    names = listed(raw)
    tails = {n.rsplit(".", 1)[1] for n in names}
    patterns = [n for n in names if "*" in n]
    unlisted = sorted(
        u
        for u in used(raw)
        if u.rsplit(".", 1)[-1] not in tails
        and u not in names
        and not any(n.startswith(u + ".") for n in names)  # a private module listed names
        and not any(re.fullmatch(p.replace(".", r"\.").replace("*", ".*"), u) for p in patterns)
    )
    assert unlisted == []


@pytest.mark.parametrize("name", [n for r in sorted(RAWS) for n in listed(r) if "*" not in n])
def test_the_installed_sdk_has_each_listed_internal(name: str) -> None:
    owner, attr = _resolve(name)
    assert _has(owner, attr), f"{name} is gone from the installed azure-servicebus"


def test_the_listed_names_are_checked_against_something() -> None:
    # a docstring that lost its list would make the tests above vacuous
    assert len(listed("raw")) >= 15
    assert len(listed("raw_batch")) >= 4
    assert "_settle_message_via_mgmt_link" in used("raw")
    assert "_BATCH_MESSAGE_OVERHEAD_COST" in str(used("raw_batch"))
