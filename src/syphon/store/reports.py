"""The run reports' files: ``<audit.path>/reports/<run_id>.html``, beside the ledger."""

from __future__ import annotations

import os
from pathlib import Path

REPORTS_DIR = "reports"


def report_path(root: str | os.PathLike[str], run_id: str) -> str:
    """Where a run's report is written: ``<audit.path>/reports/<run_id>.html``."""
    return os.path.join(os.fspath(root), REPORTS_DIR, f"{run_id}.html")


def write_page(root: str | os.PathLike[str], run_id: str, page: bytes) -> str:
    """Writes a run's page and returns its path. ``root`` may be a local folder or a URI
    that pyarrow's file systems reach (``abfss://``, ``s3://``, …)."""
    path = report_path(root, run_id)
    if "://" in path and not path.startswith("file://"):
        from pyarrow import fs  # type: ignore[import-untyped]

        filesystem, inner = fs.FileSystem.from_uri(path)
        filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        with filesystem.open_output_stream(inner) as out:
            out.write(page)
        return path
    local = Path(path.removeprefix("file://")).absolute()
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(page)
    return str(local)
