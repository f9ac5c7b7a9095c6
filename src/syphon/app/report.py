"""The run report: one self-contained HTML page per run, beside the run ledger.

Written at the end of every ``run`` and ``replay`` to ``<audit.path>/reports/<run_id>.html``:
the run's status, counts by verdict per destination, the outage window (when the parked
messages were first sent, per destination), the groups spread over several backlog
queues, the operations and estimated credits, and what was left for the next run. The
figures come from :mod:`syphon.job.run.report`; the page is a Jinja2 template
(``templates/report.html.j2``, autoescaped). Charts are inline SVG written by
:mod:`syphon.app.svg`, every label escaped: the page loads nothing, so it opens anywhere,
offline.

It holds counts, names of destinations and partition keys, and times — never a body, a
property value, a key or a connection string.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from syphon.app import svg
from syphon.job.context import RunContext
from syphon.job.ledger import RunResult
from syphon.job.run.report import ReportData, gather

log = logging.getLogger(__name__)

#: Destinations drawn in a chart.
CHART_DESTINATIONS = 30

#: Rows a table lists (the largest first); the page says how many it leaves out and how
#: many messages they hold: the audit has every row. Keeps the page quick to open
#: whatever the run's size.
TABLE_ROWS = 200

#: Sizes of the outage timeline's dots: a few classes, one drawing each (a size per dot
#: wrote every dot as a path of its own: 1.3 MB for 30 destinations of 60 slices).
DOT_CLASSES = 5

#: A colour per verdict (the others: grey).
VERDICT_COLOURS = {
    "replay": "#2b8a3e",
    "duplicate": "#1c7ed6",
    "conflict": "#e8590c",
    "expired": "#868e96",
    "ping": "#ced4da",
    "invalid": "#c92a2a",
    "discarded": "#7048e8",
}


def write_run_report(ctx: RunContext, result: RunResult) -> str | None:
    """Gathers, draws and writes a run's report (into ``audit.path`` whatever the
    engine); a report that cannot be written is logged and never fails the run (its
    outcomes are in the audit already)."""
    try:
        data = gather(result, ctx.store, read_audit=ctx.spark.started is not None)
        return ctx.store.write_report(result.run_id, render_html(data).encode("utf-8"))
    except Exception as exc:
        # where it failed (a file and line of syphon's or a library's), never the error's
        # text: it could quote a value
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        log.warning("run %s: no report written (%s%s)", result.run_id, type(exc).__name__, at)
        log.debug("run %s: report failed", result.run_id, exc_info=exc)
        return None


def _entity_row(d: ReportData, entity: str) -> list[Any]:
    """A source entity's line: messages planned, sent, completed, dead-lettered and left,
    and why some were not sent or not removed (most first)."""
    c = d.by_entity[entity]
    reasons = sorted(d.entity_reasons.get(entity, {}).items(), key=lambda kv: (-kv[1], kv[0]))
    why = "; ".join(f"{r} ({n})" for r, n in reasons)
    return [
        entity,
        c.get("planned", 0),
        c.get("replay_sent", 0),
        c.get("completed", 0),
        c.get("dead_lettered", 0),
        c.get("left", 0),
        why,
    ]


def render_html(data: ReportData) -> str:
    """The whole page, self-contained."""
    from jinja2 import Environment, PackageLoader, select_autoescape
    from markupsafe import Markup

    env = Environment(
        loader=PackageLoader("syphon.app", "templates"),
        autoescape=select_autoescape(["html", "j2"], default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    d = data
    verdicts = sorted({v for c in d.by_destination.values() for v in c}, key=_verdict_order)
    places = sorted(d.by_destination, key=lambda p: (-sum(d.by_destination[p].values()), p))
    windows = sorted(d.windows, key=lambda p: (d.windows[p][0], p))
    entities = sorted(d.by_entity, key=lambda e: _entity_rank(d.by_entity[e], e))
    credits = d.operations.get("credits_estimated")
    sent = d.operations.get("replay.messages_sent", 0)
    context: dict[str, Any] = {
        "d": d,
        # trusted markup: the page's own style, and the charts' SVG (syphon.app.svg
        # escapes every label)
        "css": Markup(_CSS),  # noqa: S704
        "chart_limit": CHART_DESTINATIONS,
        "generated": f"{d.generated_at:%Y-%m-%d %H:%M:%S}",
        "summary_rows": [
            ["messages planned", sum(d.counts.values())],
            *[[f"verdict {k}", v] for k, v in sorted(d.counts.items())],
            *[[f"outcome {k}", v] for k, v in sorted(d.outcomes.items())],
        ],
        "timing_rows": [[k, f"{d.timings[k]:.1f}"] for k in in_run_order(d.timings)],
        "verdicts": verdicts,
        "verdict_header": ["destination", *verdicts, "total"],
        "destinations": len(places),
        "verdict_rows": [_verdict_row(d, p, verdicts) for p in places[:TABLE_ROWS]],
        "verdicts_left_out": _left_out(
            places[TABLE_ROWS:], lambda p: sum(d.by_destination[p].values()), "destinations"
        ),
        "windows": len(windows),
        "window_rows": [_window_row(d, p) for p in windows[:TABLE_ROWS]],
        "windows_left_out": _left_out(
            windows[TABLE_ROWS:],
            lambda p: sum(d.by_destination.get(p, {}).values()),
            "destinations",
        ),
        "spread_rows": [_spread_row(g) for g in d.spread],
        "operation_rows": [[k, d.operations[k]] for k in in_run_order(d.operations)],
        "left_rows": [[r["stage"], r["outcome"], r["detail"] or "", r["count"]] for r in d.left],
        "entity_rows": [_entity_row(d, e) for e in entities[:TABLE_ROWS]],
        "entities_left_out": _left_out(
            entities[TABLE_ROWS:], lambda e: d.by_entity[e].get("planned", 0), "source entities"
        ),
        "credits": credits,
        "per_message": f"{credits / sent:.2f}" if credits is not None and sent else None,
    }
    if d.waves:
        context["wave_rows"] = [_wave_row(w) for w in d.waves]
        context["waves_chart"] = Markup(_waves_chart(d))  # noqa: S704
    if places:
        chart = _verdict_chart(d, places[:CHART_DESTINATIONS], verdicts)
        context["verdict_chart"] = Markup(chart)  # noqa: S704
    if windows:
        first = min(w[0] for w in d.windows.values())
        last = max(w[1] for w in d.windows.values())
        context["first"] = f"{first:%Y-%m-%d %H:%M:%S}"
        context["last"] = f"{last:%Y-%m-%d %H:%M:%S}"
        context["span"] = f"{(last - first).total_seconds():.0f}"
        chart = _timeline_chart(d, windows[:CHART_DESTINATIONS])
        context["timeline_chart"] = Markup(chart)  # noqa: S704
    return str(env.get_template("report.html.j2").render(**context))


#: The stages of a run (and of each of its waves) in the order they run.
RUN_ORDER = ("discover", "destinations", "snapshot", "reconcile", "audit", "replay", "settle")


def in_run_order(figures: Mapping[str, Any]) -> list[str]:
    """The keys of per-stage figures (``stage`` or ``stage.what``) in the order the
    stages run, a stage's total before its parts (otherwise in the order given), anything
    else last."""

    def rank(key: str) -> tuple[int, bool]:
        stage = key.split(".", 1)[0]
        return (RUN_ORDER.index(stage) if stage in RUN_ORDER else len(RUN_ORDER), "." in key)

    return sorted(figures, key=rank)


def _wave_row(w: Any) -> list[Any]:
    mark = f"{w.watermark:%Y-%m-%d %H:%M:%S.%f}"[:-3] if w.watermark else "the queues' ends"
    planned = f"{w.planned_seconds:.0f}" if w.planned_seconds is not None else ""
    seconds = f"{w.seconds:.0f}" if w.seconds is not None else "not replayed"
    return [w.number, mark, w.planned, planned, w.home, seconds]


def _waves_chart(d: ReportData) -> str:
    """Messages home at the end of each wave's replay: a bar per wave, labelled with the
    time since the run started."""
    rows = []
    for w in d.waves:
        at = f" at {w.seconds:.0f} s" if w.seconds is not None else ""
        rows.append((f"wave {w.number}{at}", [svg.Segment("home", w.home or 0, "#2b8a3e")]))
    return svg.stacked_bars(
        rows, "messages home (sent to their primaries)", "messages home over the run's waves"
    )


def _entity_rank(counts: dict[str, int], entity: str) -> tuple[int, int, str]:
    """Source entities with the most messages left first, then the most planned."""
    return (-counts.get("left", 0), -counts.get("planned", 0), entity)


def _left_out(rest: list[Any], messages: Any, what: str) -> str | None:
    """The line that stands for the rows a table leaves out (None: it lists them all)."""
    if not rest:
        return None
    total = sum(messages(r) for r in rest)
    return (
        f"{len(rest)} more {what} with {total} messages are not listed here; the audit "
        "has every message's row."
    )


def _verdict_row(d: ReportData, place: tuple[str, str], verdicts: list[str]) -> list[Any]:
    counts = d.by_destination[place]
    return [_place(*place), *[counts.get(v, 0) for v in verdicts], sum(counts.values())]


def _window_row(d: ReportData, place: tuple[str, str]) -> list[Any]:
    first, last = d.windows[place]
    return [
        _place(*place),
        f"{first:%Y-%m-%d %H:%M:%S}",
        f"{last:%Y-%m-%d %H:%M:%S}",
        f"{(last - first).total_seconds():.0f}",
    ]


def _spread_row(g: dict[str, Any]) -> list[Any]:
    span = "" if g["span_seconds"] is None else f"{g['span_seconds']:.1f}"
    return [
        _place(g["primary"], g["destination"]),
        g["partition_key_effective"] or "(no key)",
        g["messages"],
        g["backlog_queues"],
        span,
    ]


def _place(primary: str, destination: str) -> str:
    return f"{primary}/{destination or '(no destination)'}"


def _verdict_order(verdict: str) -> tuple[int, str]:
    order = list(VERDICT_COLOURS)
    return (order.index(verdict) if verdict in order else len(order), verdict)


_CSS = (
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;"
    "max-width:1100px;color:#212529;padding:0 1em}"
    "h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #dee2e6}"
    "table{border-collapse:collapse;margin:.5em 0}"
    "th,td{padding:.25em .7em;border-bottom:1px solid #e9ecef;text-align:left}"
    "td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".status{font-weight:bold;padding:.1em .5em;border-radius:.3em;background:#e9ecef}"
    ".status-done,.status-empty{background:#d3f9d8}.status-partial{background:#fff3bf}"
    ".status-failed,.status-busy{background:#ffe3e3}"
    ".chart svg{max-width:100%;height:auto}.foot{color:#868e96;font-size:.85em;margin-top:3em}"
    ".none{color:#868e96}"
)


def _verdict_chart(d: ReportData, places: list[tuple[str, str]], verdicts: list[str]) -> str:
    rows = [
        (
            _place(*p),
            [
                svg.Segment(v, d.by_destination[p].get(v, 0), VERDICT_COLOURS.get(v, "#adb5bd"))
                for v in verdicts
            ],
        )
        for p in places
    ]
    return svg.stacked_bars(rows, "messages", "messages per destination and verdict")


def _timeline_chart(d: ReportData, places: list[tuple[str, str]]) -> str:
    rows = {p: i for i, p in enumerate(places)}
    peak = max(d.timeline.values(), default=1)
    dots = [
        svg.Dot(
            rows[(primary, destination)],
            at,
            min(DOT_CLASSES - 1, (DOT_CLASSES * count - 1) // peak),
        )
        for (primary, destination, at), count in sorted(d.timeline.items())
        if (primary, destination) in rows
    ]
    return svg.timeline(
        [_place(*p) for p in places],
        [d.windows[p] for p in places],
        dots,
        DOT_CLASSES,
        "first sent (UTC)",
        "messages parked over time",
    )
