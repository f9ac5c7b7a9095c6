"""The run report's charts as inline SVG, written directly from the figures.

Two kinds: stacked horizontal bars (messages per destination and verdict) and a
timeline of dots (messages per destination and time slice). Every label is escaped
text in an SVG ``<text>`` element; nothing is loaded, nothing runs. A chart of 30 rows
is a few tens of KB and takes milliseconds to write; a plotting library took about a
second of every run to import and draw the same two charts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

#: The drawing's width and the label column's (the plot takes the rest).
WIDTH = 1000
LABELS = 280
#: A row's height, and the space above the rows and below them (the axis).
ROW = 22
TOP = 12
AXIS = 48
#: The font of every label.
FONT = 'font-family="system-ui,-apple-system,\'Segoe UI\',sans-serif" font-size="12"'
INK = "#343a40"
GRID = "#dee2e6"


@dataclass(frozen=True)
class Segment:
    """One part of a bar: its series, its value and its colour."""

    series: str
    value: int
    colour: str


@dataclass(frozen=True)
class Dot:
    """A point of the timeline: its row, its time and its size class (0 the smallest)."""

    row: int
    at: datetime
    size: int


def _num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return (
        f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" fill="{INK}"'
        f"{' ' + extra if extra else ''}>{escape(text)}</text>"
    )


def _svg(height: float, parts: list[str], title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{_num(height)}" '
        f'viewBox="0 0 {WIDTH} {_num(height)}" role="img" {FONT}>'
        f"<title>{escape(title)}</title>{''.join(parts)}</svg>"
    )


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``top`` (1, 2 or 5 times a power of ten apart),
    at most ``most`` + 1 of them."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(top / step - 1e-9)
    return [i * step for i in range(count + 1)]


def stacked_bars(rows: Sequence[tuple[str, Sequence[Segment]]], axis_label: str, title: str) -> str:
    """Horizontal stacked bars, one row per ``(label, segments)`` from the top, an axis of
    round values below and a legend of the series (in their first appearance's order)."""
    ticks = nice_ticks(max((sum(s.value for s in segs) for _, segs in rows), default=0))
    span = ticks[-1] or 1.0
    plot = WIDTH - LABELS - 20
    legend: dict[str, str] = {}
    bottom = TOP + len(rows) * ROW
    parts = [_axis(bottom, [(LABELS + plot * t / span, _num(t)) for t in ticks])]
    for i, (label, segments) in enumerate(rows):
        y = TOP + i * ROW
        parts.append(_text(LABELS - 8, y + ROW * 0.68, label, "end"))
        left = 0
        for s in segments:
            legend.setdefault(s.series, s.colour)
            if s.value <= 0:
                continue
            x, w = LABELS + plot * left / span, plot * s.value / span
            parts.append(
                f'<rect x="{_num(x)}" y="{_num(y + 3)}" width="{_num(max(w, 0.5))}" '
                f'height="{ROW - 6}" fill="{s.colour}"><title>{escape(label)}: '
                f"{escape(s.series)} {s.value}</title></rect>"
            )
            left += s.value
    parts.append(_text(LABELS + plot / 2, bottom + 36, axis_label, "middle"))
    x = LABELS
    for series, colour in legend.items():
        parts.append(f'<rect x="{x}" y="{bottom + 47}" width="10" height="10" fill="{colour}"/>')
        parts.append(_text(x + 14, bottom + 56, series))
        x += 24 + 7 * len(series)
    return _svg(bottom + AXIS + 20, parts, title)


def _axis(y: float, ticks: list[tuple[float, str]]) -> str:
    """A horizontal axis at ``y`` with its ticks (position, label) and their grid lines."""
    parts = [f'<line x1="{LABELS}" y1="{y}" x2="{WIDTH - 20}" y2="{y}" stroke="{INK}"/>']
    for x, label in ticks:
        parts.append(
            f'<line x1="{_num(x)}" y1="{TOP}" x2="{_num(x)}" y2="{y + 4}" stroke="{GRID}"/>'
        )
        parts.append(_text(x, y + 16, label, "middle"))
    return "".join(parts)


def time_ticks(first: datetime, last: datetime, most: int = 6) -> list[datetime]:
    """Round times from ``first`` to ``last`` (whole seconds, minutes, hours or days
    apart), at most ``most`` + 1 of them."""
    span = (last - first).total_seconds()
    steps = [
        1,
        2,
        5,
        10,
        15,
        30,
        60,
        120,
        300,
        600,
        900,
        1800,
        3600,
        7200,
        10800,
        21600,
        43200,
        86400,
    ]
    step = next((s for s in steps if span / s <= most), 86400 * math.ceil(span / 86400 / most))
    epoch = first.timestamp()
    start = math.ceil(epoch / step) * step
    return [
        first + timedelta(seconds=t - epoch)
        for t in range(int(start), int(epoch + span) + 1, int(step))
    ]


def timeline(
    labels: Sequence[str],
    windows: Sequence[tuple[datetime, datetime]],
    dots: Sequence[Dot],
    classes: int,
    axis_label: str,
    title: str,
) -> str:
    """One row per label (from the top): a grey line over its window (first, last) and its
    dots, their area by size class (``classes`` of them); a time axis below."""
    first = min((w[0] for w in windows), default=datetime.min)
    last = max((w[1] for w in windows), default=datetime.min)
    span = max((last - first).total_seconds(), 1e-3)
    plot = WIDTH - LABELS - 60  # room for the last time label
    left = LABELS + 10

    def x_of(at: datetime) -> float:
        return left + plot * (at - first).total_seconds() / span

    bottom = TOP + len(labels) * ROW
    fmt = "%H:%M:%S" if span < 86400 else "%m-%d %H:%M"
    parts = [_axis(bottom, [(x_of(t), f"{t:{fmt}}") for t in time_ticks(first, last)])]
    for i, (label, (start, end)) in enumerate(zip(labels, windows, strict=True)):
        y = TOP + i * ROW + ROW / 2
        parts.append(_text(LABELS - 8, y + 4, label, "end"))
        parts.append(
            f'<line x1="{_num(x_of(start))}" y1="{_num(y)}" x2="{_num(x_of(end))}" '
            f'y2="{_num(y)}" stroke="#adb5bd"/>'
        )
    for size in range(classes):
        radius = math.sqrt((12 + 140 * (size + 1) / classes) / math.pi)
        circles = [
            f'<circle cx="{_num(x_of(d.at))}" cy="{_num(TOP + d.row * ROW + ROW / 2)}" '
            f'r="{_num(radius)}"/>'
            for d in dots
            if d.size == size
        ]
        if circles:
            parts.append(f'<g fill="#1c7ed6" fill-opacity="0.7">{"".join(circles)}</g>')
    parts.append(_text(left + plot / 2, bottom + 36, axis_label, "middle"))
    return _svg(bottom + AXIS, parts, title)
