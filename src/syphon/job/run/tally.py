"""What a stage's results add up to. The driver holds a wave's results (one small row per
message, an Arrow table), so counting them takes no Spark job."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]


@dataclass(frozen=True)
class Line:
    """Messages with one (outcome, detail), and the sums of the counted columns."""

    outcome: str
    detail: str | None
    count: int
    sums: tuple[int, ...]


@dataclass(frozen=True)
class Tally:
    """A stage's results by (outcome, detail)."""

    columns: tuple[str, ...]
    lines: tuple[Line, ...]

    def by_outcome(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for line in self.lines:
            out[line.outcome] = out.get(line.outcome, 0) + line.count
        return out

    def count(self, outcome: str, except_details: Iterable[str | None] = ()) -> int:
        """Messages with ``outcome``, leaving out those with one of ``except_details``."""
        skip = set(except_details)
        return sum(x.count for x in self.lines if x.outcome == outcome and x.detail not in skip)

    def total(self, column: str) -> int:
        i = self.columns.index(column)
        return sum(line.sums[i] for line in self.lines)

    def any_detail(self, details: Iterable[str]) -> bool:
        wanted = set(details)
        return any(line.detail in wanted for line in self.lines)


def tally(results: pa.Table, *summed: str) -> Tally:
    """Per (outcome, detail) of a stage's results (in the driver's memory), the count and
    the sums of ``summed``."""
    keys = ["outcome", "detail"]
    rows = results.select([*keys, *summed]).group_by(keys, use_threads=False)
    grouped = rows.aggregate([([], "count_all"), *[(c, "sum") for c in summed]])
    lines = tuple(
        Line(r["outcome"], r["detail"], r["count_all"], tuple(r[f"{c}_sum"] or 0 for c in summed))
        for r in grouped.to_pylist()
    )
    return Tally(tuple(summed), lines)


def combined(tallies: Iterable[Tally], columns: tuple[str, ...] = ()) -> Tally:
    """The tallies of a stage's waves as one: per (outcome, detail), counts and sums
    added (``columns``: the counted columns when there is no tally at all)."""
    tallies = list(tallies)
    columns = tallies[0].columns if tallies else columns
    out: dict[tuple[str, str | None], Line] = {}
    for t in tallies:
        if t.columns != columns:
            raise ValueError(f"tallies of {t.columns} and {columns} do not add up")
        for line in t.lines:
            key = (line.outcome, line.detail)
            had = out.get(key)
            if had is None:
                out[key] = line
            else:
                sums = tuple(a + b for a, b in zip(had.sums, line.sums, strict=True))
                out[key] = Line(line.outcome, line.detail, had.count + line.count, sums)
    return Tally(columns, tuple(out.values()))
