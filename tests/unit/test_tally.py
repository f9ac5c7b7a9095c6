"""What a stage's results add up to, counted in the driver from the Arrow table of its
rows (no Spark job)."""

from __future__ import annotations

import pyarrow as pa

from syphon.core.render import arrow_schema
from syphon.core.schema import REPLAY_RESULT, SETTLE_ACTION, SETTLE_RESULT
from syphon.job.rows import arrow_rows
from syphon.job.run.tally import Line, combined, tally


def test_a_tally_counts_each_outcome_and_detail_and_sums_the_counted_columns() -> None:
    rows = [
        ("q/0", 1, "sent", None, 1, 0),
        ("q/0", 2, "sent", None, 2, 1),
        ("q/1", 3, "skipped", "namespace_fault", 0, 0),
        ("q/1", 4, "failed", None, None, 3),  # a null sum counts as nothing
    ]
    counted = tally(arrow_rows(rows, REPLAY_RESULT), "transfers", "busy_retries")
    assert sorted(counted.lines, key=lambda x: x.outcome) == [
        Line("failed", None, 1, (0, 3)),
        Line("sent", None, 2, (3, 1)),
        Line("skipped", "namespace_fault", 1, (0, 0)),
    ]
    assert counted.count("sent") == 2
    assert counted.total("transfers") == 3
    assert counted.by_outcome() == {"failed": 1, "sent": 2, "skipped": 1}


def test_no_rows_tally_to_nothing_and_add_up_with_others() -> None:
    empty = tally(pa.Table.from_pylist([], schema=arrow_schema(SETTLE_RESULT)), "received")
    assert empty.lines == ()
    one = tally(arrow_rows([("q", 1, "completed", None, 1, 0, 1)], SETTLE_RESULT), "received")
    assert combined([empty, one]).lines == (Line("completed", None, 1, (1,)),)


def test_rows_become_a_table_of_their_schema_even_when_there_are_none() -> None:
    table = arrow_rows([("q", 7, "complete", None, "replay")], SETTLE_ACTION)
    assert table.schema == arrow_schema(SETTLE_ACTION)
    assert table.to_pylist() == [
        {
            "backlog_queue": "q",
            "sequence_number": 7,
            "action": "complete",
            "reason": None,
            "verdict": "replay",
        }
    ]
    assert arrow_rows([], SETTLE_ACTION).num_rows == 0
