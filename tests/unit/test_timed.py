"""A stage's time (:func:`syphon.job.request.timed`): added to each name, and the Spark
jobs the block starts described as ``syphon <stage>``, but only on a context that is up:
a run's session starts in another thread while the run lists the primaries
(``SparkOnDemand.start_soon``), and PySpark names a context the active one before it has
its JVM half. The contexts here are stand-ins that record what is asked of them."""

from __future__ import annotations

import pyspark
import pytest

from syphon.core.ledger import Timings
from syphon.job.request import timed

KEY = "spark.job.description"


class UpContext:
    """A context that is up: its local properties, as a thread's in the JVM."""

    _jsc = object()

    def __init__(self) -> None:
        self.properties: dict[str, str | None] = {KEY: "the caller's"}
        self.set: list[str | None] = []

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - PySpark's name
        return self.properties.get(key)

    def setLocalProperty(self, key: str, value: str | None) -> None:  # noqa: N802
        self.set.append(value)
        self.properties[key] = value


class StartingContext:
    """A context PySpark has named active while another thread still starts it: no
    ``_jsc`` yet, so any property call fails (PySpark's own methods read ``_jsc``)."""


def test_a_stage_on_a_context_that_is_up_describes_its_jobs_then_puts_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = UpContext()
    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", sc)
    timings = Timings()
    with timed(timings, "destinations"):
        assert sc.properties[KEY] == "syphon destinations"
    assert sc.set == ["syphon destinations", "the caller's"]
    assert timings.destinations is not None


def test_a_stage_while_the_context_starts_elsewhere_is_timed_and_touches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", StartingContext())
    timings = Timings()
    with timed(timings, "destinations", "snapshot"):
        pass
    assert timings.destinations is not None
    assert timings.snapshot == timings.destinations
