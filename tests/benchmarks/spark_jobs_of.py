"""The Spark jobs of a run, read from its event log: where a run's Spark time goes, job by
job, and which line of syphon asked for each.

Turn the event log on for the runs measured, e.g.::

    .venv/bin/python tests/benchmarks/bench_run.py --messages 5000 --delays 0 \\
        --syphon-only --spark-conf spark.eventLog.enabled=true \\
        --spark-conf spark.eventLog.dir=/tmp/events \\
        --spark-conf spark.eventLog.compress=false
    .venv/bin/python tests/benchmarks/spark_jobs_of.py /tmp/events

Printed per application (a process's Spark session): each job in order, with the line
that asked for it (PySpark's call site: the innermost frame outside PySpark; for a
Dataset's own action, a checkpoint, its stage's name) and the stage of the run it ran in
(``syphon snapshot``: the job description syphon sets), its wall
time from submission to end, and the executor time of its tasks; then the jobs by line,
and the time between the application's start and its first job, and after its last.

``--by-line`` prints only the jobs of every log added up by line, e.g. over the test
suite's (``SYPHON_TEST_EVENTS=DIR ./dev.sh test``, see tests/support/jvm.py).

Usage: spark_jobs_of.py [--by-line] EVENT_LOG_DIR_OR_FILE...
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Job:
    """One Spark job: who asked for it, when it ran, and what its tasks spent."""

    job_id: int
    site: str
    submitted: int  # ms since the epoch
    ended: int | None = None
    stages: list[int] = field(default_factory=list)
    run_ms: int = 0
    cpu_ms: float = 0.0

    @property
    def wall_ms(self) -> int:
        return 0 if self.ended is None else self.ended - self.submitted


@dataclass
class Application:
    """One event log: the session's start, its end, and its jobs in order."""

    name: str
    started: int = 0
    ended: int | None = None
    jobs: list[Job] = field(default_factory=list)


def short_site(site: str) -> str:
    """``collect at /path/to/syphon/job/plan.py:154`` as ``collect at job/plan/planning.py:154``."""
    action, _, where = site.partition(" at ")
    parts = Path(where).parts
    if "syphon" in parts:
        where = "/".join(parts[len(parts) - parts[::-1].index("syphon") :])
    return f"{action} at {where}" if where else site


def lines(path: Path) -> list[str]:
    """An event log's lines: a file, or a rolling log's folder of ``events_<n>_*``
    files (uncompressed: ``spark.eventLog.compress=false``)."""
    if not path.is_dir():
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    parts = sorted(path.glob("events_*"), key=lambda p: int(p.name.split("_")[1]))
    return [line for p in parts for line in lines(p)]


def read(path: Path) -> Application:
    """An event log (a file or a rolling log's folder) as an :class:`Application`."""
    app = Application(path.name)
    by_stage: dict[int, Job] = {}
    for line in lines(path):
        event = json.loads(line)
        kind = event.get("Event")
        if kind == "SparkListenerApplicationStart":
            app.started = event["Timestamp"]
        elif kind == "SparkListenerApplicationEnd":
            app.ended = event["Timestamp"]
        elif kind == "SparkListenerJobStart":
            props = event.get("Properties") or {}
            infos = event.get("Stage Infos") or [{}]
            # a Dataset's own action (a checkpoint) has no Python call site: its stage's
            # name, and the stage of the run syphon named the job for
            site = props.get("callSite.short") or infos[-1].get("Stage Name", "?")
            described = props.get("spark.job.description")
            site = short_site(site) + (f" [{described}]" if described else "")
            job = Job(event["Job ID"], site, event["Submission Time"])
            job.stages = [s["Stage ID"] for s in event.get("Stage Infos", [])]
            for stage in job.stages:
                by_stage[stage] = job
            app.jobs.append(job)
        elif kind == "SparkListenerJobEnd":
            for job in app.jobs:
                if job.job_id == event["Job ID"]:
                    job.ended = event["Completion Time"]
        elif kind == "SparkListenerTaskEnd":
            owner = by_stage.get(event.get("Stage ID", -1))
            metrics = event.get("Task Metrics") or {}
            if owner is not None:
                owner.run_ms += int(metrics.get("Executor Run Time", 0))
                owner.cpu_ms += int(metrics.get("Executor CPU Time", 0)) / 1e6
    return app


def report(app: Application) -> None:
    print(f"{app.name}: {len(app.jobs)} jobs")
    for job in app.jobs:
        print(
            f"  job {job.job_id:>3}  {job.wall_ms:>6} ms wall  {job.run_ms:>6} ms in tasks "
            f"({job.cpu_ms:>6.0f} ms CPU)  {job.site}"
        )
    by_site: dict[str, list[Job]] = defaultdict(list)
    for job in app.jobs:
        by_site[job.site].append(job)
    print("  by line:")
    for site, jobs in sorted(by_site.items(), key=lambda kv: -sum(j.wall_ms for j in kv[1])):
        print(f"    {len(jobs):>3} jobs {sum(j.wall_ms for j in jobs):>7} ms  {site}")
    if app.jobs:
        first, last = app.jobs[0], app.jobs[-1]
        in_jobs = sum(j.wall_ms for j in app.jobs)
        print(
            f"  start to first job {first.submitted - app.started} ms; in jobs {in_jobs} ms; "
            + (
                f"last job to end {app.ended - (last.ended or last.submitted)} ms"
                if app.ended is not None
                else "no end recorded"
            )
        )


def by_line(apps: list[Application]) -> None:
    """Every application's jobs added up by the line that asked for them."""
    jobs = [j for app in apps for j in app.jobs]
    sites: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        sites[job.site].append(job)
    print(
        f"{len(apps)} applications, {len(jobs)} jobs, {sum(j.wall_ms for j in jobs) / 1e3:.1f} s "
        "of job wall time"
    )
    print(f"{'jobs':>6} {'wall s':>8} {'task CPU s':>10}  line [stage]")
    for site, mine in sorted(sites.items(), key=lambda kv: -sum(j.wall_ms for j in kv[1])):
        wall = sum(j.wall_ms for j in mine) / 1e3
        cpu = sum(j.cpu_ms for j in mine) / 1e3
        print(f"{len(mine):>6} {wall:>8.1f} {cpu:>10.1f}  {site}")


def main() -> None:
    args = sys.argv[1:]
    summed = "--by-line" in args
    args = [a for a in args if a != "--by-line"]
    if not args:
        sys.exit(__doc__)
    files: list[Path] = []
    for arg in args:
        path = Path(arg)
        logs = path.is_dir() and not any(path.glob("events_*"))
        files += sorted(path.iterdir()) if logs else [path]
    if summed:
        by_line([read(path) for path in files])
        return
    for path in files:
        report(read(path))


if __name__ == "__main__":
    main()
