"""The ``.ipynb`` notebook is made from its Databricks source twin, cell for cell.

``python tests/support/notebook_sync.py`` rewrites ``notebooks/rerun_after_outage.ipynb`` from
``notebooks/rerun_after_outage.py``; ``tests/job/test_notebook.py`` fails when they
differ. The code cell that starts with ``# Parameters`` carries papermill's
``parameters`` tag.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOURCE = NOTEBOOKS / "rerun_after_outage.py"
IPYNB = NOTEBOOKS / "rerun_after_outage.ipynb"

HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"
MAGIC_MD = "# MAGIC %md"


def cells_of(source: str) -> list[tuple[str, str]]:
    """The Databricks source's cells as (kind, text): kind ``markdown`` or ``code``."""
    lines = source.splitlines()
    if not lines or lines[0] != HEADER:
        raise ValueError(f"not a Databricks notebook source: no {HEADER!r} line")
    cells: list[tuple[str, str]] = []
    for chunk in "\n".join(lines[1:]).split(SEPARATOR):
        text = chunk.strip("\n")
        if not text.strip():
            continue
        if text.startswith(MAGIC_MD):
            body = [line.removeprefix("# MAGIC").removeprefix(" ") for line in text.splitlines()]
            cells.append(("markdown", "\n".join(body[1:])))
        else:
            cells.append(("code", text))
    return cells


def notebook_of(source: str) -> Any:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, text) in enumerate(cells_of(source)):
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(text)
        else:
            cell = nbformat.v4.new_code_cell(text)
            if text.startswith("# Parameters"):
                cell.metadata["tags"] = ["parameters"]
        cell["id"] = f"cell-{i:02d}"  # stable ids: the file changes only when a cell does
        nb.cells.append(cell)
    return nb


def rendered(source: str) -> str:
    import nbformat

    return str(nbformat.writes(notebook_of(source))) + "\n"


if __name__ == "__main__":
    IPYNB.write_text(rendered(SOURCE.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {IPYNB}", file=sys.stderr)
