"""What a stage's results add up to, read in one Spark job per stage."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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


def tally(results: DataFrame, *summed: str) -> Tally:
    """One Spark job: per (outcome, detail), the count and the sums of ``summed``."""
    from pyspark.sql import functions as F

    rows = results.groupBy("outcome", "detail").agg(
        F.count(F.lit(1)).alias("count"), *[F.sum(c).alias(c) for c in summed]
    )
    lines = tuple(
        Line(r["outcome"], r["detail"], int(r["count"]), tuple(int(r[c] or 0) for c in summed))
        for r in rows.collect()
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
