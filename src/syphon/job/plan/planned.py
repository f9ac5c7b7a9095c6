"""A wave ready to send, as one value: what a new plan made or a resumed run read back,
and what the run holds back from it (what earlier waves left)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from syphon.core.schema import Verdict
from syphon.servicebus.sending import Destination

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import DataFrame


@dataclass(frozen=True)
class PlannedWave:
    """A planned wave, as its replay and settle take it.

    Attributes:
        rows: its plan's audit rows (checkpointed, or a projection of a checkpoint).
        audit: the same rows in the driver's memory (:data:`syphon.core.schema.AUDIT`'s
            columns): the settle's actions and the outcomes' audit rows are made from
            them (:mod:`syphon.job.plan.facts`).
        messages: its messages as the replay sends them, bytes included (restored and
            repaired: :func:`syphon.job.plan.reconcile.wave_messages`).
        counts: how many rows of each verdict (they size the replay's and the settle's
            tasks).
        earlier: what an earlier attempt of the run recorded as replayed (None:
            nothing; a resumed run's).
        more: later waves of the run may follow (what this one leaves unsent is then
            held back by them).
        unknown: the destinations the plan found no entity for (None: read from
            ``rows``).
        sending_to: the destinations it replays to (None: read from ``rows``).
    """

    rows: DataFrame
    audit: pa.Table
    messages: DataFrame
    counts: Mapping[str, int]
    earlier: DataFrame | None = None
    more: bool = False
    unknown: frozenset[Destination] | None = None
    sending_to: frozenset[Destination] | None = None

    @property
    def replays(self) -> int:
        """How many of its rows are to be sent."""
        return self.counts.get(Verdict.REPLAY, 0)

    @property
    def size(self) -> int:
        """How many rows its plan holds."""
        return sum(self.counts.values())


@dataclass(frozen=True)
class HeldBack:
    """What a wave's replay does not send, or sends marked: the destinations skipped
    (with why; None: it answered), the lanes (primary, destination, partition key) the
    run holds back, each with why (an earlier wave left one of its messages unsent, or
    the run could not read one), and the messages earlier runs left in doubt (sent again
    marked ``resent_in_doubt``; None: none)."""

    skipped: Mapping[Destination, str | None]
    broken: Mapping[tuple[str, str, str], str]
    in_doubt: DataFrame | None
