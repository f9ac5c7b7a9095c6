"""The run report's page, from figures alone (no Spark): sections, tables, charts, and
nothing it would have to fetch."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from support.python_rules import report_path
from support.report_html import parse_report, table_dict
from syphon.app.report import TABLE_ROWS, render_html
from syphon.job.run.report import SPREAD_ROWS, ReportData
from syphon.store.reports import write_page

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def figures(**changes: object) -> ReportData:
    data = ReportData(
        run_id="r-1",
        status="partial",
        detail=None,
        fix=None,
        generated_at=T0 + timedelta(hours=2),
        counts={"replay": 7, "invalid": 1, "duplicate": 2},
        outcomes={"replay_sent": 6, "replay_skipped": 1, "settle_left": 1},
        operations={"credits_estimated": 30, "replay.messages_sent": 6},
        timings={"snapshot": 3.25},
        by_destination={
            ("contoso", "orders"): {"replay": 5, "duplicate": 2},
            ("contoso", "<script>alert(1)</script>"): {"replay": 2},
            ("contoso", ""): {"invalid": 1},
        },
        windows={
            ("contoso", "orders"): (T0, T0 + timedelta(minutes=9)),
            ("contoso", "<script>alert(1)</script>"): (T0 + timedelta(minutes=3),) * 2,
        },
        timeline={
            ("contoso", "orders", T0): 4,
            ("contoso", "orders", T0 + timedelta(minutes=9)): 3,
            ("contoso", "<script>alert(1)</script>", T0 + timedelta(minutes=3)): 2,
        },
        spread_groups=1,
        spread=[
            {
                "primary": "contoso",
                "destination": "orders",
                "partition_key_effective": "k1",
                "messages": 4,
                "backlog_queues": 2,
                "span_seconds": 540.0,
            }
        ],
        left=[
            {"stage": "replay", "outcome": "skipped", "detail": "destination_missing", "count": 1},
            {"stage": "settle", "outcome": "left", "detail": None, "count": 1},
        ],
        source="orders-dlq",
        by_entity={"orders": dict(planned=10, replay_sent=6, completed=8, left=1, dead_lettered=1)},
        entity_reasons={"orders": {"left: too_large": 1, "duplicate: already_replayed": 2}},
    )
    for key, value in changes.items():
        setattr(data, key, value)
    return data


def test_the_page_has_every_section_with_the_figures_it_was_given() -> None:
    page = parse_report(render_html(figures()))

    verdicts = table_dict(page.sections["verdicts"][0])
    assert verdicts["contoso/orders"] == {
        "replay": "5",
        "duplicate": "2",
        "invalid": "0",
        "total": "7",
    }
    assert verdicts["contoso/(no destination)"]["invalid"] == "1"
    assert page.svgs["verdicts"] == 1
    assert page.svgs["timeline"] == 1
    windows = table_dict(page.sections["timeline"][0])
    assert windows["contoso/orders"] == {
        "first": "2026-11-20 08:00:00",
        "last": "2026-11-20 08:09:00",
        "span (s)": "540",
    }
    spread = table_dict(page.sections["spread"][0])
    assert spread["contoso/orders"] == {
        "partition key": "k1",
        "messages": "4",
        "backlog queues": "2",
        "span (s)": "540.0",
    }
    operations = table_dict(page.sections["operations"][0])
    assert operations["credits_estimated"]["count"] == "30"
    assert "5.00 per message replayed" in page.text["operations"]
    left = page.sections["left"][0]
    assert left[1:] == [
        ["replay", "skipped", "destination_missing", "1"],
        ["settle", "left", "", "1"],
    ]
    summary = table_dict(page.sections["summary"][0])
    assert summary["messages planned"]["messages"] == "10"
    entities = table_dict(page.sections["entities"][0])
    assert entities["orders"] == {
        "planned": "10",
        "sent": "6",
        "completed": "8",
        "dead-lettered": "1",
        "left": "1",
        "why": "duplicate: already_replayed (2); left: too_large (1)",
    }
    assert "source orders-dlq" in page.text["entities"]


def test_the_page_loads_nothing_and_runs_no_script() -> None:
    text = render_html(figures())
    page = parse_report(text)
    outside = [ref for ref in page.references if not ref[2].startswith("#")]
    assert outside == []  # only links inside the page (the charts' glyphs and markers)
    assert all(f'id="{ref[2][1:]}"' in text for ref in page.references)
    assert not page.tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert "<script>alert" not in text  # a name is text, never markup
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    names = re.sub(r'xmlns(:\w+)?="[^"]*"', "", text)  # XML namespace names are not links
    assert "http://" not in names
    assert "https://" not in names


def test_a_run_without_audit_rows_still_says_what_happened() -> None:
    data = figures(
        status="busy",
        detail="another run holds the lease: r-0",
        counts={},
        outcomes={},
        operations={},
        timings={},
        by_destination={},
        windows={},
        timeline={},
        spread_groups=0,
        spread=[],
        left=[],
    )
    page = parse_report(render_html(data))
    assert "another run holds the lease" in page.text["summary"]
    assert "No message was planned" in page.text["verdicts"]
    assert "No parked message" in page.text["timeline"]
    assert "No group was spread" in page.text["spread"]
    assert "No message outcome was recorded (run busy)" in page.text["left"]
    assert sum(page.svgs.values()) == 0


def test_many_spread_groups_are_counted_and_the_largest_listed() -> None:
    groups = [
        {
            "primary": "p",
            "destination": "d",
            "partition_key_effective": f"k{i}",
            "messages": 2,
            "backlog_queues": 2,
            "span_seconds": None,
        }
        for i in range(SPREAD_ROWS)
    ]
    page = parse_report(render_html(figures(spread_groups=SPREAD_ROWS + 7, spread=groups)))
    assert f"{SPREAD_ROWS + 7} group(s)" in page.text["spread"]
    assert f"The {SPREAD_ROWS} spread over the most queues" in page.text["spread"]
    assert len(page.sections["spread"][0]) == SPREAD_ROWS + 1


def busy_run(destinations: int, entities: int) -> ReportData:
    """Figures of a large run: every destination busy in every slice of the timeline."""
    places = [("contoso", f"destination-{i:04d}") for i in range(destinations)]
    return figures(
        by_destination={p: {"replay": 100 + i, "invalid": 1} for i, p in enumerate(places)},
        windows={
            p: (T0 + timedelta(seconds=i), T0 + timedelta(hours=3)) for i, p in enumerate(places)
        },
        timeline={
            (*p, T0 + timedelta(minutes=3 * b)): 1 + (i * b) % 97
            for i, p in enumerate(places)
            for b in range(60)
        },
        by_entity={f"queue-{i:04d}": {"planned": 10 + i, "left": i % 3} for i in range(entities)},
        entity_reasons={f"queue-{i:04d}": {"left: not_received": i % 3} for i in range(entities)},
    )


def test_a_large_run_lists_the_largest_rows_and_counts_the_rest() -> None:
    page = parse_report(render_html(busy_run(TABLE_ROWS + 40, TABLE_ROWS + 5)))
    verdicts = page.sections["verdicts"][0]
    assert len(verdicts) == TABLE_ROWS + 1  # and the header
    listed = [row[0] for row in verdicts[1:]]
    # the busiest first: destination i holds 101 + i messages
    assert listed[0] == f"contoso/destination-{TABLE_ROWS + 39:04d}"
    assert f"contoso/destination-{39:04d}" not in listed
    left_out = sum(101 + i for i in range(40))
    assert f"40 more destinations with {left_out} messages are not listed" in page.text["verdicts"]
    windows = page.sections["timeline"][0]
    assert len(windows) == TABLE_ROWS + 1
    assert "40 more destinations" in page.text["timeline"]
    entities = page.sections["entities"][0]
    assert len(entities) == TABLE_ROWS + 1
    # those with messages left first
    assert all(int(row[5]) == 2 for row in entities[1:60])
    assert "5 more source entities" in page.text["entities"]
    assert "the audit has every message's row" in page.text["entities"]


def test_a_small_run_lists_every_row_and_says_nothing_is_left_out() -> None:
    page = parse_report(render_html(busy_run(3, 2)))
    assert len(page.sections["verdicts"][0]) == 4
    assert "not listed" not in page.text["verdicts"] + page.text["entities"]


def test_the_page_stays_small_whatever_the_run_size() -> None:
    """A page of a run over 2,000 destinations and entities, every timeline slice busy,
    stays well below the 1 MiB it once passed at 20,000 messages over 50 destinations."""
    sizes = [len(render_html(busy_run(n, n)).encode()) for n in (50, 2000)]
    assert max(sizes) < 700_000, sizes


def test_the_same_figures_draw_the_same_page(tmp_path: Path) -> None:
    first = write_page(tmp_path, "r-1", render_html(figures()).encode("utf-8"))
    again = render_html(figures())
    assert first == report_path(tmp_path.absolute(), "r-1")
    assert Path(first).read_text(encoding="utf-8") == again


def test_a_report_that_fails_says_where_and_never_the_errors_text(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from syphon.app import report
    from syphon.job.ledger import RunResult

    def broken(_: ReportData) -> str:
        raise TypeError("a value the page must not quote")

    monkeypatch.setattr(report, "render_html", broken)
    store = SimpleNamespace(write_report=lambda *_: "page", runs=lambda: [])
    ctx = SimpleNamespace(store=store, spark=SimpleNamespace(started=None))
    result = RunResult("r-1", "done", {}, {})
    with caplog.at_level(logging.WARNING, logger="syphon.app.report"):
        assert report.write_run_report(ctx, result) is None  # type: ignore[arg-type]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith("run r-1: no report written (TypeError at test_report.py:")
    assert "must not quote" not in line


def test_a_run_of_several_waves_shows_each_wave_and_messages_home_over_time() -> None:
    from syphon.core.ledger import Operations, RunRecord
    from syphon.job.run.report import waves_of

    def row(status: str, wave: int | None, at: int, sent: int = 0, planned: int = 0) -> RunRecord:
        return RunRecord(
            "r-1",
            status,
            T0,
            counts={"replay": planned} if planned else {},
            operations=Operations(replay_messages_sent=sent),
            recorded_at=T0 + timedelta(seconds=at),
            wave=wave,
            watermark=T0 - timedelta(hours=1, minutes=-wave) if wave else None,
        )

    records = [
        row("planned", 1, 5, planned=4),
        row("replaying", 1, 6),
        row("replayed", 1, 9, sent=4),
        row("planned", 2, 12, planned=3),
        row("replaying", 2, 13),
        row("replayed", 2, 20, sent=6),
        row("planned", 3, 22, planned=2),
        row("replaying", 3, 23),
        row("done", None, 30),
    ]
    waves = waves_of(records)
    assert [(w.number, w.planned, w.home, w.planned_seconds, w.seconds) for w in waves] == [
        (1, 4, 4, 5.0, 9.0),
        (2, 3, 6, 12.0, 20.0),
        (3, 2, None, 22.0, None),
    ]
    assert waves_of([row("planned", None, 5, planned=4), row("done", None, 9)]) == []

    page = parse_report(render_html(figures(waves=waves)))
    table = table_dict(page.sections["waves"][0])
    assert table["1"] == {
        "watermark (UTC)": "2026-11-20 07:01:00.000",
        "planned": "4",
        "planned at (s)": "5",
        "home so far": "4",
        "replayed at (s)": "9",
    }
    assert table["3"]["replayed at (s)"] == "not replayed"
    assert page.svgs["waves"] == 1
    assert "waves" not in parse_report(render_html(figures())).sections


def test_the_stages_and_their_operations_are_listed_in_the_order_they_ran() -> None:
    timings = {"settle": 1.0, "audit": 2.0, "discover": 0.5, "replay.sends": 3.0, "replay": 4.0}
    operations = {
        "settle.receives": 3,
        "credits_estimated": 9,
        "discover.peeks": 1,
        "snapshot.messages_peeked": 3,
        "replay.messages_sent": 2,
    }
    page = parse_report(
        render_html(figures(timings={**timings, "snapshot": 3.25}, operations=operations))
    )
    stages = [row[0] for row in page.sections["summary"][1][1:]]
    assert stages == ["discover", "snapshot", "audit", "replay", "replay.sends", "settle"]
    listed = list(table_dict(page.sections["operations"][0]))
    assert listed == [
        "discover.peeks",
        "snapshot.messages_peeked",
        "replay.messages_sent",
        "settle.receives",
        "credits_estimated",
    ]
