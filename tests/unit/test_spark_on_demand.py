"""A run's session on demand (:class:`SparkOnDemand`): started in the background while
the run does what needs no Spark, made once, waited for by whoever asks first, fitted
to what the run knew when it started, and its start's error raised to every caller.

The session here is a stand-in object and the factory a function that records its
calls: what is tested is the start's bookkeeping; a real session's start in the
background is what every cold ``syphon run`` of the job tests does."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from syphon.app.on_demand import SparkOnDemand
from syphon.core.sessions import SessionFit


class Factory:
    """Makes a stand-in session, once ``go`` is set; records the thread and the fit of
    each call."""

    def __init__(self, fails: bool = False) -> None:
        self.go = threading.Event()
        self.go.set()
        self.fails = fails
        self.calls: list[tuple[str, SessionFit]] = []
        self.session = object()

    def __call__(self, fit: SessionFit) -> Any:
        self.calls.append((threading.current_thread().name, fit))
        assert self.go.wait(30)
        if self.fails:
            raise RuntimeError("Java is not installed")
        return self.session


def test_a_session_started_soon_is_made_once_in_a_thread_of_its_own() -> None:
    factory = Factory()
    spark = SparkOnDemand(factory)
    spark.start_soon()
    spark.start_soon()  # nothing more: it is starting
    assert spark() is factory.session
    assert spark() is factory.session
    assert spark.started is factory.session
    ((thread, _),) = factory.calls
    assert thread != threading.current_thread().name


def test_the_first_call_waits_for_a_start_under_way() -> None:
    factory = Factory()
    factory.go.clear()
    spark = SparkOnDemand(factory)
    spark.start_soon()
    got: list[Any] = []
    asker = threading.Thread(target=lambda: got.append(spark()))
    asker.start()
    asker.join(0.2)
    assert asker.is_alive()  # waiting for the JVM, not starting a second
    assert not got
    factory.go.set()
    asker.join(30)
    assert got == [factory.session]
    assert len(factory.calls) == 1


def test_a_start_that_fails_in_the_background_fails_every_call() -> None:
    factory = Factory(fails=True)
    spark = SparkOnDemand(factory)
    spark.start_soon()
    for _ in range(2):  # the run's first need, and any later one (the report's)
        with pytest.raises(RuntimeError, match="Java is not installed"):
            spark()
    assert spark.started is None
    assert len(factory.calls) == 1


def test_a_session_starting_keeps_the_fit_it_started_with() -> None:
    factory = Factory()
    spark = SparkOnDemand(factory)
    known = SessionFit(40_000, waves=True, wave_bytes=40 * 2**20)
    spark.fit(known)
    spark.start_soon()
    spark.fit(SessionFit(24))  # its JVM's settings are fixed at its start
    spark()
    assert [fit for _, fit in factory.calls] == [known]


def test_a_session_never_asked_for_is_not_started() -> None:
    factory = Factory()
    spark = SparkOnDemand(factory)
    assert spark.started is None
    assert factory.calls == []
    assert spark() is factory.session  # asked without start_soon: made by the caller
    ((thread, _),) = factory.calls
    assert thread == threading.current_thread().name


def test_pysparks_packages_are_imported_by_the_runs_thread_before_the_start_begins() -> None:
    """Imported by two threads at once, PySpark's packages can hand one of them a module
    the other has half made (a run on Python 3.12 failed with ``cannot import name
    'SQLContext' from partially initialized module 'pyspark.sql'``): the run's thread
    imports them before the start's thread runs. In a fresh interpreter, where nothing
    of PySpark is imported yet."""
    import subprocess
    import sys

    script = (
        "import sys, threading\n"
        "from syphon.app.on_demand import SparkOnDemand\n"
        "assert 'pyspark.sql' not in sys.modules\n"
        "seen = []\n"
        "def factory(fit):\n"
        "    imported = 'pyspark.sql.functions' in sys.modules\n"
        "    seen.append((threading.current_thread().name, imported))\n"
        "    return 'session'\n"
        "spark = SparkOnDemand(factory)\n"
        "spark.start_soon()\n"
        "print(spark(), seen == [('syphon-spark-start', True)])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["session", "True"]
