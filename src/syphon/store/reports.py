"""The run reports' files: ``<audit.path>/reports/<run_id>.html``, beside the ledger,
written through the audit's object store (:mod:`syphon.store.location`)."""

from __future__ import annotations

import os

from syphon.store.location import Location, as_location

REPORTS_DIR = "reports"


def report_path(root: Location | str | os.PathLike[str], run_id: str) -> str:
    """Where a run's report is written, as shown: ``<audit.path>/reports/<run_id>.html``."""
    return as_location(root).child(REPORTS_DIR, f"{run_id}.html").shown


def write_page(root: Location | str | os.PathLike[str], run_id: str, page: bytes) -> str:
    """Writes a run's page and returns where (a local path, or the URI under
    ``audit.path``)."""
    return as_location(root).write_bytes(f"{REPORTS_DIR}/{run_id}.html", page)
