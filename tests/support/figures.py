"""The report's questions asked of both engines (:mod:`syphon.store.figures`): Spark over
the rows as Spark reads them, SQL on delta-rs's engine over the same Delta table."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from syphon.job.rows import utc
from syphon.store.audit import AUDIT_TABLE
from syphon.store.deltars import DeltaRsStore
from syphon.store.figures import DeltaRsFigures, SparkFigures, TimeSlices
from syphon.store.location import as_location


def _plain(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows as sorted-key tuples, times in UTC (Spark hands back naive local times)."""
    return [
        tuple((k, utc(v) if isinstance(v, datetime) else v) for k, v in sorted(r.items()))
        for r in rows
    ]


def both_answers(
    spark: Any, audit: str | Path, run_id: str, slices: TimeSlices, spread: int = 50
) -> dict[str, Any]:
    """Each engine's answers to the three questions about one run of the Delta audit at
    ``audit`` (per-entity rows sorted, the spread groups in the engine's own order);
    asserts they are the same and returns them."""
    store = DeltaRsStore(str(audit), lambda: spark)
    rows = store.run_rows(run_id)
    assert rows is not None, "no audit rows to ask about"
    engines = {
        "spark": SparkFigures(rows, run_id),
        "delta-rs": DeltaRsFigures(as_location(Path(audit) / AUDIT_TABLE), run_id),
    }
    answers = {
        name: {
            "per_entity": sorted(_plain(f.per_entity()), key=repr),
            "timeline": sorted(_plain(f.timeline(slices)), key=repr),
            "spread": _plain(f.spread(spread)),
        }
        for name, f in engines.items()
    }
    assert answers["delta-rs"] == answers["spark"]
    return answers["spark"]
