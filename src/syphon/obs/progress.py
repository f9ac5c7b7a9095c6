"""Progress on the terminal: the stage a run is in and, while Spark works, how many of
the stage's tasks are done (the snapshot and the settle run one task per backlog queue,
so that count is per backlog queue).

Quiet unless a reporter is installed, and the command installs one only when standard
error is a terminal: logs, pipes and schedulers see nothing of it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

from syphon.core.sessions import is_connect

_reporter: Reporter | None = None


class Reporter:
    """Writes ``stage`` lines, and a task counter refreshed in place while Spark runs."""

    def __init__(self, stream: TextIO, interval: float = 0.5) -> None:
        self.stream = stream
        self.interval = interval
        self.stage: str | None = None
        self.started = time.monotonic()
        self.spark_context: Any = None
        self._counting = False  # a task counter line is open (no newline yet)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._poll, name="syphon-progress", daemon=True)
        self._thread.start()

    def step(self, stage: str) -> None:
        with self._lock:
            self._end_line()
            self.stage, self.started = stage, time.monotonic()
            self.stream.write(f"syphon: {stage}\n")
            self.stream.flush()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with self._lock:
            self._end_line()

    def _end_line(self) -> None:
        if self._counting:
            self.stream.write("\n")
            self._counting = False

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            sc = self.spark_context
            if sc is None or self.stage is None:
                continue
            stages = _active_stages(sc)
            if not stages:
                continue
            done = sum(s.numCompletedTasks for s in stages)
            total = sum(s.numTasks for s in stages)
            seconds = time.monotonic() - self.started
            with self._lock:
                self.stream.write(f"\r  {self.stage}: {done}/{total} tasks, {seconds:.0f} s ")
                self.stream.flush()
                self._counting = True


def _active_stages(sc: Any) -> list[Any]:
    try:
        tracker = sc.statusTracker()
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
    except Exception:  # the context is stopping: nothing to show
        return []
    return [s for s in stages if s is not None]


def install(stream: TextIO, *, force: bool = False) -> Reporter | None:
    """Installs a reporter on ``stream`` if it is a terminal (or ``force``)."""
    global _reporter
    if not (force or stream.isatty()):
        return None
    _reporter = Reporter(stream)
    return _reporter


def uninstall() -> None:
    global _reporter
    if _reporter is not None:
        _reporter.close()
    _reporter = None


def step(stage: str) -> None:
    """Announces a stage (nothing without a reporter)."""
    if _reporter is not None:
        _reporter.step(stage)


def watch(spark: Any) -> None:
    """Counts the tasks of ``spark``'s active stages from now on (without a reporter:
    nothing)."""
    if _reporter is not None and not is_connect(spark):  # a Connect client has no tracker
        _reporter.spark_context = spark.sparkContext
