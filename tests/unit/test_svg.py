"""The report's charts (syphon.app.svg): well-formed SVG, labels as escaped text, bars
and dots where their figures put them."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syphon.app import svg

NS = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=timezone.utc)


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


@pytest.mark.parametrize(
    ("top", "expected"),
    [
        (0, [0.0, 1.0]),
        (5, [0, 1, 2, 3, 4, 5]),
        (103, [0, 20, 40, 60, 80, 100, 120]),
        (1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (2500, [0, 500, 1000, 1500, 2000, 2500]),
    ],
)
def test_ticks_are_round_and_reach_the_largest_value(top: float, expected: list[float]) -> None:
    assert svg.nice_ticks(top) == pytest.approx(expected)


@given(st.floats(min_value=1e-3, max_value=1e12))
def test_ticks_cover_any_value_in_a_few_steps(top: float) -> None:
    ticks = svg.nice_ticks(top)
    assert ticks[0] == 0
    assert ticks[-1] >= top * (1 - 1e-9)
    assert 2 <= len(ticks) <= 7
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len({round(s / max(steps), 6) for s in steps}) == 1  # evenly spaced


def test_time_ticks_fall_on_round_times_inside_the_span() -> None:
    ticks = svg.time_ticks(T0 + timedelta(seconds=7), T0 + timedelta(minutes=9, seconds=50))
    assert ticks[0] == T0 + timedelta(minutes=2)
    assert [t - ticks[0] for t in ticks] == [timedelta(minutes=2 * i) for i in range(len(ticks))]
    assert ticks[-1] <= T0 + timedelta(minutes=9, seconds=50)
    days = svg.time_ticks(T0, T0 + timedelta(days=30))
    assert 2 <= len(days) <= 7
    assert all(t.hour == 0 and t.minute == 0 for t in days)


def test_bars_are_as_long_as_their_values_and_stacked_in_order() -> None:
    green, blue = "#2b8a3e", "#1c7ed6"
    rows = [
        ("p/orders", [svg.Segment("replay", 60, green), svg.Segment("duplicate", 40, blue)]),
        ("p/empty", [svg.Segment("replay", 0, green), svg.Segment("duplicate", 20, blue)]),
    ]
    root = parse(svg.stacked_bars(rows, "messages", "verdicts"))
    bars = root.findall(f"{NS}rect[@height]")
    bars = [b for b in bars if b.find(f"{NS}title") is not None]
    assert [b.find(f"{NS}title").text for b in bars] == [  # type: ignore[union-attr]
        "p/orders: replay 60",
        "p/orders: duplicate 40",
        "p/empty: duplicate 20",
    ]
    x = [float(b.get("x", "")) for b in bars]
    w = [float(b.get("width", "")) for b in bars]
    assert x[1] == pytest.approx(x[0] + w[0], abs=0.1)  # stacked
    assert w[0] / w[1] == pytest.approx(60 / 40, rel=0.01)
    assert w[2] / w[1] == pytest.approx(20 / 40, rel=0.01)
    assert x[2] == pytest.approx(x[0], abs=0.1)  # a zero segment takes no room
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert {"p/orders", "p/empty", "messages", "replay", "duplicate", "100"} <= set(texts)


def test_labels_are_text_never_markup() -> None:
    evil = '<script>alert(1)</script>"&'
    bars = svg.stacked_bars([(evil, [svg.Segment(evil, 1, "#000")])], evil, evil)
    line = svg.timeline([evil], [(T0, T0 + timedelta(minutes=1))], [], 5, evil, evil)
    for text in (bars, line):
        assert "<script>" not in text
        root = parse(text)
        assert root.find(f".//{NS}script") is None
        assert evil in [t.text for t in root.iter(f"{NS}text")]


def test_the_timeline_puts_each_dot_on_its_row_at_its_time_and_sizes_it_by_class() -> None:
    ten = T0 + timedelta(minutes=10)
    windows = [(T0, ten), (T0 + timedelta(minutes=5), ten)]
    dots = [
        svg.Dot(0, T0, 0),
        svg.Dot(0, T0 + timedelta(minutes=10), 4),
        svg.Dot(1, T0 + timedelta(minutes=5), 2),
    ]
    root = parse(svg.timeline(["a", "b"], windows, dots, 5, "first sent (UTC)", "timeline"))
    circles = {
        (float(c.get("cx", "")), float(c.get("cy", ""))): float(c.get("r", ""))
        for c in root.iter(f"{NS}circle")
    }
    assert len(circles) == 3
    start, middle, end = sorted(circles)  # by time
    assert middle[1] > start[1] == end[1]  # the second row is below the first
    assert middle[0] - start[0] == pytest.approx((end[0] - start[0]) / 2, abs=0.1)
    assert circles[start] < circles[middle] < circles[end]  # class 0 < class 2 < class 4
    labels = [t.text for t in root.iter(f"{NS}text")]
    assert "08:00:00" in labels
    assert "08:10:00" in labels
