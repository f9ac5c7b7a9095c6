"""Progress: stages and task counts on a terminal, nothing elsewhere."""

from __future__ import annotations

import io
import time
from typing import Any

from syphon.obs import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_is_installed_when_stderr_is_not_a_terminal() -> None:
    quiet = io.StringIO()
    assert progress.install(quiet) is None
    progress.step("snapshot")
    progress.uninstall()
    assert quiet.getvalue() == ""


def test_a_terminal_sees_each_stage_and_the_tasks_of_a_running_spark_stage(spark: Any) -> None:
    term = Terminal()
    reporter = progress.install(term)
    assert reporter is not None
    reporter.interval = 0.1
    try:
        progress.watch(spark)
        progress.step("snapshot: peeking 4 backlog queues")

        def slow(rows: Any) -> Any:
            time.sleep(1.5)
            return rows

        spark.sparkContext.parallelize(range(4), 4).mapPartitions(slow).count()
        progress.step("reconcile")
    finally:
        progress.uninstall()
    text = term.getvalue()
    assert "syphon: snapshot: peeking 4 backlog queues\n" in text
    assert "syphon: reconcile\n" in text
    assert "\r  snapshot: peeking 4 backlog queues: " in text
    assert "/4 tasks" in text
