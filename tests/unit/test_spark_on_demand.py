"""The run's Spark session on demand (syphon.job.context.SparkOnDemand): started on first
use, or early in the background so that its start overlaps the run's listings."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from syphon.job.context import SparkOnDemand


class Factory:
    """Counts its calls and the threads they ran in; waits for ``release`` when given."""

    def __init__(self, release: threading.Event | None = None, error: Exception | None = None):
        self.calls: list[str] = []
        self.release = release
        self.error = error
        self.session = object()

    def __call__(self) -> Any:
        self.calls.append(threading.current_thread().name)
        if self.release is not None:
            assert self.release.wait(10)
        if self.error is not None:
            raise self.error
        return self.session


def test_the_session_starts_on_first_use_only_once() -> None:
    factory = Factory()
    spark = SparkOnDemand(factory)
    assert spark.started is None
    assert factory.calls == []
    assert spark() is factory.session
    assert spark() is factory.session
    assert factory.calls == [threading.current_thread().name]
    assert spark.started is factory.session


def test_an_early_start_runs_in_the_background_and_the_first_use_waits_for_it() -> None:
    release = threading.Event()
    factory = Factory(release)
    spark = SparkOnDemand(factory)
    spark.start_early()
    spark.start_early()  # once only
    got: list[Any] = []
    user = threading.Thread(target=lambda: got.append(spark()))
    user.start()
    user.join(0.2)
    assert user.is_alive()  # waiting for the start
    release.set()
    user.join(10)
    assert got == [factory.session]
    assert spark() is factory.session
    assert factory.calls == ["syphon-spark-start"]


def test_a_failed_early_start_is_raised_where_the_session_is_first_used() -> None:
    spark = SparkOnDemand(Factory(error=RuntimeError("no Java")))
    spark.start_early()
    with pytest.raises(RuntimeError, match="no Java"):
        spark()


def test_an_early_start_after_the_session_started_does_nothing() -> None:
    factory = Factory()
    spark = SparkOnDemand(factory)
    spark()
    spark.start_early()
    assert factory.calls == [threading.current_thread().name]
