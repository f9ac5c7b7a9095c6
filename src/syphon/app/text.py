"""What the commands print: plain text, no body, no secret."""

from __future__ import annotations

from syphon.core.errors import action_of
from syphon.job.ledger import RunResult
from syphon.job.plan.planning import PlanResult, unread
from syphon.job.run.status import StatusReport


def format_run(result: RunResult) -> str:
    """What ``syphon run`` prints: the status, the fix, counts by verdict and by outcome,
    the operations the ledger recorded and where the report is."""
    detail = f"{result.detail}: {result.why}" if result.detail and result.why else result.detail
    lines = [f"run {result.run_id}: {result.status}" + (f" ({detail})" if detail else "")]
    fix = result.fix or (None if result.exit_code == 0 else action_of(result.exit_code))
    if fix:
        lines.append(f"fix: {fix}")
    if result.counts:
        lines.append("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items())))
    if result.outcomes:
        lines.append(
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items()))
        )
    operations = result.operations.as_map()
    if operations:
        lines.append("operations: " + ", ".join(f"{k} {v}" for k, v in sorted(operations.items())))
    if result.report:
        lines.append(f"report: {result.report}")
    return "\n".join(lines)


def format_status(report: StatusReport) -> str:
    """What ``syphon status`` prints: each queue's depth, then the source's last runs."""
    lines = [f"source {report.source}", f"{'queue':<60} {'messages':>9}"]
    for q in report.queues:
        depth = "?" if q.message_count is None else str(q.message_count)
        note = "  (extra)" if q.extra else ""
        if q.unreadable:
            note += f"  (not read: {q.unreadable})"
        lines.append(f"{q.path:<60} {depth:>9}{note}")
    lines.append("")
    lines.append(f"{'run':<28} {'status':<10} {'started':<20} counts")
    for r in report.runs:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(r.counts.items()))
        lines.append(f"{r.run_id:<28} {r.status:<10} {r.started_at:%Y-%m-%d %H:%M:%S} {counts}")
    if not report.runs:
        lines.append("(no runs recorded)")
    return "\n".join(lines)


def format_summary(result: PlanResult) -> str:
    """The plan's summary table, as ``syphon plan`` prints it."""
    lines = [
        f"run {result.run_id}: {sum(result.counts.values())} messages in "
        f"{sum(1 for q in result.queues if not q.empty)} of {len(result.queues)} backlog queues",
    ]
    for path, why in sorted(unread(result.queues).items()):
        lines.append(f"not read: {path} ({why}; its messages stay where they are)")
    if result.selection is not None:
        lines.append(
            f"selection: {result.selection.describe()} (the rest: unselected, left where it is)"
        )
    if result.discard is not None:
        lines.append(
            f"{result.discard.describe()}: the disc column; a run removes them without sending them"
        )
    if result.repair is not None:
        lines.append(
            f"repair: {'; '.join(result.repair.describe())} (under each destination: how "
            "many of its replays each change alters)"
        )
    lines.append(
        f"{'primary':<20} {'destination':<28} {'replay':>7} {'dup':>5} {'confl':>5} "
        f"{'exp':>5} {'ping':>5} {'inval':>5} {'unsel':>5} {'disc':>5} {'spread':>6}"
        "  outage span"
    )
    for d in result.per_destination:
        span = "-"
        if d["first"] is not None and d["last"] is not None:
            span = f"{d['first']:%Y-%m-%d %H:%M:%S} .. {d['last']:%H:%M:%S}"
        lines.append(
            f"{d['primary'] or '?':<20} {d['destination'] or '(no destination)':<28} "
            f"{d['replay']:>7} {d['duplicate']:>5} {d['conflict']:>5} {d['expired']:>5} "
            f"{d['ping']:>5} {d['invalid']:>5} {d['unselected']:>5} {d['discarded']:>5}"
            f" {d['spread_groups']:>6}  {span}"
        )
        if d.get("too_soon"):
            lines.append(
                f"{'':<20} too soon: {d['too_soon']} would be dropped by its duplicate "
                f"detection; they wait until {d.get('too_soon_until')} (or --new-message-ids)"
            )
        if d.get("repaired"):
            changed = ", ".join(f"{c} {n}" for c, n in sorted(d["repaired"].items()))
            lines.append(f"{'':<20} repaired: {changed}")
        elif "repaired" in d:
            lines.append(f"{'':<20} repaired: none")
    return "\n".join(lines)
