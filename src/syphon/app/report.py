"""The run report: one self-contained HTML page per run, beside the run ledger.

Written at the end of every run to ``<audit.path>/reports/<run_id>.html``: the run's
status, counts by verdict per destination, the outage window (when the parked messages
were first sent, per destination), the groups spread over several backlog queues, the
operations and estimated credits, and what was left for the next run. Charts are inline
SVG drawn by matplotlib, with their text drawn as paths: the page loads nothing, so it
opens anywhere, offline.

It holds counts, names of destinations and partition keys, and times — never a body, a
property value, a key or a connection string. Gathering reads the run's audit rows with
Spark (a few aggregations whose results are small); rendering is plain Python.
"""

from __future__ import annotations

import html
import io
import logging
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syphon.core.config import AuditConfig
from syphon.store.audit import AuditRoot, read_audit, spread_groups

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from syphon.job.run import RunResult

log = logging.getLogger(__name__)

REPORTS_DIR = "reports"
#: Destinations drawn in a chart (the tables list them all).
CHART_DESTINATIONS = 30
#: Spread groups listed (the largest spread first); the count says how many there are.
SPREAD_ROWS = 50
#: Time buckets of the outage timeline.
TIMELINE_BUCKETS = 60

#: A colour per verdict (the others: grey).
VERDICT_COLOURS = {
    "replay": "#2b8a3e",
    "duplicate": "#1c7ed6",
    "conflict": "#e8590c",
    "expired": "#868e96",
    "ping": "#ced4da",
    "invalid": "#c92a2a",
}


@dataclass
class ReportData:
    """What a report shows; ``by_destination`` and the rest are empty when the run
    recorded no audit rows (an empty run, a busy one, one that failed before its plan)."""

    run_id: str
    status: str
    detail: str | None
    hint: str | None
    generated_at: datetime
    counts: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    operations: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: (primary, destination) -> verdict -> messages
    by_destination: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    #: (primary, destination) -> (first, last) original enqueue time
    windows: dict[tuple[str, str], tuple[datetime, datetime]] = field(default_factory=dict)
    #: (primary, destination, bucket start) -> messages
    timeline: dict[tuple[str, str, datetime], int] = field(default_factory=dict)
    spread_groups: int = 0
    #: the largest spread groups: primary, destination, partition_key_effective, messages,
    #: backlog_queues, span_seconds
    spread: list[dict[str, Any]] = field(default_factory=list)
    #: what the run did not finish: stage, outcome, detail, messages
    left: list[dict[str, Any]] = field(default_factory=list)


def report_path(root: str | os.PathLike[str], run_id: str) -> str:
    """Where a run's report is written: ``<audit.path>/reports/<run_id>.html``."""
    return os.path.join(os.fspath(root), REPORTS_DIR, f"{run_id}.html")


def gather(result: RunResult, spark: SparkSession | None, root: AuditRoot) -> ReportData:
    """The report's figures: the run's result, and its audit rows when Spark ran."""
    data = ReportData(
        result.run_id,
        result.status,
        result.detail,
        result.hint,
        datetime.now(timezone.utc),
        dict(result.counts),
        dict(result.outcomes),
        dict(result.operations),
        dict(result.timings),
    )
    if spark is None:
        return data
    audit = read_audit(spark, root)
    if audit is None:
        return data
    from pyspark.sql import functions as F

    rows = audit.where(F.col("run_id") == result.run_id).localCheckpoint(eager=True)
    plan = rows.where(F.col("stage") == "plan")
    place = [
        F.coalesce(F.col("primary"), F.lit("?")).alias("primary"),
        F.coalesce(F.col("destination"), F.lit("")).alias("destination"),
    ]
    for r in plan.groupBy(*place, "verdict").count().collect():
        data.by_destination.setdefault((r["primary"], r["destination"]), {})[r["verdict"]] = int(
            r["count"]
        )
    timed = plan.where(F.col("backlog_enqueued_time").isNotNull())
    bounds = timed.agg(
        F.min("backlog_enqueued_time").cast("double").alias("lo"),
        F.max("backlog_enqueued_time").cast("double").alias("hi"),
    ).first()
    if bounds is not None and bounds["lo"] is not None:
        lo, hi = float(bounds["lo"]), float(bounds["hi"])
        width = max((hi - lo) / TIMELINE_BUCKETS, 1e-3)
        bucket = F.floor((F.col("backlog_enqueued_time").cast("double") - lo) / width)
        start = (F.lit(lo) + F.least(bucket, F.lit(TIMELINE_BUCKETS - 1)) * width).cast("timestamp")
        for r in timed.groupBy(*place, start.alias("at")).count().collect():
            key = (r["primary"], r["destination"], _utc(r["at"]))
            data.timeline[key] = int(r["count"])
        windows = timed.groupBy(*place).agg(
            F.min("backlog_enqueued_time").alias("first"),
            F.max("backlog_enqueued_time").alias("last"),
        )
        for r in windows.collect():
            data.windows[(r["primary"], r["destination"])] = (_utc(r["first"]), _utc(r["last"]))
    groups = spread_groups(plan).localCheckpoint(eager=True)
    data.spread_groups = groups.count()
    top = groups.limit(SPREAD_ROWS)
    data.spread = [r.asDict() for r in top.collect()]
    unfinished = rows.where(
        ((F.col("stage") == "replay") & (F.col("outcome") != "sent"))
        | ((F.col("stage") == "settle") & (F.col("outcome") == "left"))
    )
    left = unfinished.groupBy("stage", "outcome", "detail").count()
    data.left = [r.asDict() for r in left.orderBy("stage", "outcome", "detail").collect()]
    return data


def _utc(value: datetime) -> datetime:
    """Spark hands back naive local times; the report speaks UTC."""
    if value.tzinfo is None:
        value = value.astimezone()  # naive = the session's (the process's) local time
    return value.astimezone(timezone.utc)


def write_report(data: ReportData, root: str | os.PathLike[str]) -> str:
    """Writes the page and returns its path. ``root`` may be a local folder or a URI that
    pyarrow's file systems reach (``abfss://``, ``s3://``, …)."""
    page = render_html(data).encode("utf-8")
    path = report_path(root, data.run_id)
    if "://" in path and not path.startswith("file://"):
        from pyarrow import fs  # type: ignore[import-untyped]

        filesystem, inner = fs.FileSystem.from_uri(path)
        filesystem.create_dir(inner.rsplit("/", 1)[0], recursive=True)
        with filesystem.open_output_stream(inner) as out:
            out.write(page)
        return path
    local = Path(path.removeprefix("file://")).absolute()
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(page)
    return str(local)


def write_run_report(result: RunResult, spark: SparkSession | None, root: AuditRoot) -> str | None:
    """Gathers and writes a run's report (into ``audit.path`` whatever the engine); a
    report that cannot be written is logged and never fails the run (its outcomes are in
    the audit already)."""
    folder = root.path if isinstance(root, AuditConfig) else os.fspath(root)
    try:
        return write_report(gather(result, spark, root), folder)
    except Exception as exc:
        log.warning("run %s: no report written (%s)", result.run_id, type(exc).__name__)
        log.debug("run %s: report failed", result.run_id, exc_info=exc)
        return None


# --- rendering -------------------------------------------------------------------------


def render_html(data: ReportData) -> str:
    """The whole page, self-contained."""
    e = html.escape
    title = f"syphon run {data.run_id}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        _summary(data),
        _verdicts(data),
        _timeline(data),
        _spread(data),
        _operations(data),
        _left(data),
        f'<p class="foot">Generated {data.generated_at:%Y-%m-%d %H:%M:%S} UTC by syphon. '
        "Times are UTC. No message body, property value or secret is part of this page.</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


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


def _table(header: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    e = html.escape

    def cell(tag: str, i: int, value: Any) -> str:
        cls = ' class="n"' if i in numeric else ""
        return f"<{tag}{cls}>{e('' if value is None else str(value))}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _place(primary: str, destination: str) -> str:
    return f"{primary}/{destination or '(no destination)'}"


def _summary(d: ReportData) -> str:
    e = html.escape
    status = f'<span class="status status-{e(d.status)}">{e(d.status)}</span>'
    lines = [f"<p>Status: {status}" + (f" ({e(d.detail)})" if d.detail else "") + "</p>"]
    if d.hint:
        lines.append(f"<p>Fix: {e(d.hint)}</p>")
    total = sum(d.counts.values())
    rows = [
        ["messages planned", total],
        *[[f"verdict {k}", v] for k, v in sorted(d.counts.items())],
        *[[f"outcome {k}", v] for k, v in sorted(d.outcomes.items())],
    ]
    lines.append(_table(["", "messages"], rows, {1}))
    if d.timings:
        timing_rows = [[k, f"{v:.1f}"] for k, v in sorted(d.timings.items())]
        lines.append(_table(["stage", "seconds"], timing_rows, {1}))
    return '<section id="summary"><h2>Summary</h2>' + "".join(lines) + "</section>"


def _verdicts(d: ReportData) -> str:
    body = '<section id="verdicts"><h2>Verdicts by destination</h2>'
    if not d.by_destination:
        return body + '<p class="none">No message was planned in this run.</p></section>'
    verdicts = sorted(
        {v for counts in d.by_destination.values() for v in counts}, key=_verdict_order
    )
    places = sorted(d.by_destination, key=lambda p: -sum(d.by_destination[p].values()))
    rows = [
        [
            _place(*p),
            *[d.by_destination[p].get(v, 0) for v in verdicts],
            sum(d.by_destination[p].values()),
        ]
        for p in places
    ]
    body += _chart(_verdict_chart(d, places[:CHART_DESTINATIONS], verdicts))
    body += _more(len(places))
    body += _table(["destination", *verdicts, "total"], rows, set(range(1, len(verdicts) + 2)))
    return body + "</section>"


def _verdict_order(verdict: str) -> tuple[int, str]:
    order = list(VERDICT_COLOURS)
    return (order.index(verdict) if verdict in order else len(order), verdict)


def _timeline(d: ReportData) -> str:
    body = '<section id="timeline"><h2>Outage window</h2>'
    if not d.windows:
        return body + '<p class="none">No parked message in this run.</p></section>'
    first = min(w[0] for w in d.windows.values())
    last = max(w[1] for w in d.windows.values())
    body += (
        f"<p>Messages were first sent between {first:%Y-%m-%d %H:%M:%S} and "
        f"{last:%Y-%m-%d %H:%M:%S} UTC ({(last - first).total_seconds():.0f} s): each "
        "dot is the messages parked in one time slice, by destination.</p>"
    )
    places = sorted(d.windows, key=lambda p: d.windows[p][0])
    body += _chart(_timeline_chart(d, places[:CHART_DESTINATIONS]))
    body += _more(len(places))
    rows = [
        [
            _place(*p),
            f"{d.windows[p][0]:%Y-%m-%d %H:%M:%S}",
            f"{d.windows[p][1]:%Y-%m-%d %H:%M:%S}",
            f"{(d.windows[p][1] - d.windows[p][0]).total_seconds():.0f}",
        ]
        for p in places
    ]
    return body + _table(["destination", "first", "last", "span (s)"], rows, {3}) + "</section>"


def _spread(d: ReportData) -> str:
    body = '<section id="spread"><h2>Groups spread over several backlog queues</h2>'
    if not d.spread_groups:
        return (
            body + '<p class="none">No group was spread: every key sat in one queue.</p></section>'
        )
    body += (
        f"<p>{d.spread_groups} group(s) of the same destination and partition key sat in "
        "several backlog queues; syphon replayed each in its original order.</p>"
    )
    rows = [
        [
            _place(g["primary"], g["destination"]),
            g["partition_key_effective"] or "(no key)",
            g["messages"],
            g["backlog_queues"],
            "" if g["span_seconds"] is None else f"{g['span_seconds']:.1f}",
        ]
        for g in d.spread
    ]
    if d.spread_groups > len(d.spread):
        body += f"<p>The {len(d.spread)} spread over the most queues:</p>"
    header = ["destination", "partition key", "messages", "backlog queues", "span (s)"]
    return body + _table(header, rows, {2, 3, 4}) + "</section>"


def _operations(d: ReportData) -> str:
    body = '<section id="operations"><h2>Operations and estimated credits</h2>'
    if not d.operations:
        return body + '<p class="none">No operation was recorded.</p></section>'
    credits = d.operations.get("credits_estimated")
    if credits is not None:
        sent = d.operations.get("replay.messages_sent", 0)
        per = f" ({credits / sent:.2f} per message replayed)" if sent else ""
        body += (
            f"<p>Estimated credits: <b>{credits}</b>{per}. One per message peeked, sent, "
            "received, completed or dead-lettered, per ping and per probe peek.</p>"
        )
    rows = [[k, v] for k, v in sorted(d.operations.items())]
    return body + _table(["operation", "count"], rows, {1}) + "</section>"


def _left(d: ReportData) -> str:
    body = '<section id="left"><h2>Left for the next run</h2>'
    if not d.left:
        if d.status in ("done", "empty"):
            return body + '<p class="none">Nothing: every message was settled.</p></section>'
        return (
            body
            + f'<p class="none">No message outcome was recorded (run {d.status}).</p></section>'
        )
    rows = [[r["stage"], r["outcome"], r["detail"] or "", r["count"]] for r in d.left]
    body += (
        "<p>These messages stay in their backlog queues (or were not sent) and are "
        "taken up by the next run; messages that arrived after the snapshot are "
        "simply the next run's work.</p>"
    )
    return body + _table(["stage", "outcome", "detail", "messages"], rows, {3}) + "</section>"


def _more(count: int) -> str:
    if count <= CHART_DESTINATIONS:
        return ""
    return f"<p>The chart shows {CHART_DESTINATIONS} of {count} destinations; the table, all.</p>"


def _chart(svg: str) -> str:
    return f'<div class="chart">{svg}</div>'


def _figure(rows: int) -> Any:
    from matplotlib.figure import Figure  # no pyplot: no backend, no global state

    return Figure(figsize=(10, max(1.8, 0.35 * rows + 1.2)), layout="constrained")


def _svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element: text drawn as paths, no metadata,
    stable element ids (one run's page is the same bytes when drawn again)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "path", "svg.hashsalt": "syphon"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.DOTALL)
    return text[text.index("<svg") :]


def _verdict_chart(d: ReportData, places: list[tuple[str, str]], verdicts: list[str]) -> str:
    fig = _figure(len(places))
    ax = fig.add_subplot()
    labels = [_place(*p) for p in reversed(places)]
    left = [0] * len(labels)
    for verdict in verdicts:
        values = [d.by_destination[p].get(verdict, 0) for p in reversed(places)]
        ax.barh(
            labels, values, left=left, label=verdict, color=VERDICT_COLOURS.get(verdict, "#adb5bd")
        )
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_xlabel("messages")
    ax.legend(loc="lower right", fontsize="small")
    ax.spines[["top", "right"]].set_visible(False)
    return _svg(fig)


def _timeline_chart(d: ReportData, places: list[tuple[str, str]]) -> str:
    fig = _figure(len(places))
    ax = fig.add_subplot()
    rows = {p: i for i, p in enumerate(reversed(places))}
    peak = max(d.timeline.values(), default=1)
    for p, y in rows.items():
        first, last = d.windows[p]
        ax.plot([first, last], [y, y], color="#adb5bd", linewidth=1, zorder=1)
    xs, ys, sizes = [], [], []
    for (primary, destination, at), count in sorted(d.timeline.items()):
        row = rows.get((primary, destination))
        if row is not None:
            xs.append(at)
            ys.append(row)
            sizes.append(12 + 140 * count / peak)
    ax.scatter(xs, ys, s=sizes, color="#1c7ed6", alpha=0.7, zorder=2)
    ax.set_yticks(list(rows.values()), [_place(*p) for p in rows])
    ax.set_xlabel("first sent (UTC)")
    ax.spines[["top", "right"]].set_visible(False)
    fig.autofmt_xdate()
    return _svg(fig)
