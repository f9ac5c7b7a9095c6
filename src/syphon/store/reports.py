"""The run reports' files: ``<audit.path>/reports/<run_id>.html``, beside the ledger,
written through the audit's object store (:mod:`syphon.store.location`)."""

from __future__ import annotations

import os

from syphon.store.location import Location, as_location

REPORTS_DIR = "reports"


def write_page(root: Location | str | os.PathLike[str], run_id: str, page: bytes) -> str:
    """Writes a run's page and returns where (a local path, or the URI under
    ``audit.path``)."""
    return as_location(root).write_bytes(f"{REPORTS_DIR}/{run_id}.html", page)
