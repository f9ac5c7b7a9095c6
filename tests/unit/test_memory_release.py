"""Between waves a run gives memory back (a full collection in Python and the JVM) only
when its waves are large enough for it to matter: :data:`RELEASE_FROM_BYTES`.

The session here is a stand-in object and the release is recorded, not run: what is
tested is the decision; the collection itself is Spark's and the JVM's."""

from __future__ import annotations

from typing import Any

import pytest

from syphon.app import on_demand as context
from syphon.app.on_demand import RELEASE_FROM_BYTES, SparkOnDemand
from syphon.core.sessions import SessionFit


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(context, "release_memory", calls.append)
    return calls


def test_a_session_never_started_has_nothing_to_give_back(released: list[Any]) -> None:
    spark = SparkOnDemand(lambda fit: object())
    spark.fit(SessionFit(10**6, waves=True, wave_bytes=RELEASE_FROM_BYTES * 4))
    spark.release()
    assert released == []


@pytest.mark.parametrize(
    ("wave_bytes", "gives_back"),
    [
        (RELEASE_FROM_BYTES - 1, False),  # a small wave leaves nothing worth a collection
        (RELEASE_FROM_BYTES, True),
        (None, True),  # waves of unknown size: as before, always
    ],
)
def test_waves_give_memory_back_from_a_size_on(
    released: list[Any], wave_bytes: int | None, gives_back: bool
) -> None:
    session = object()
    spark = SparkOnDemand(lambda fit: session)
    spark.fit(SessionFit(1000, waves=True, wave_bytes=wave_bytes))
    assert spark() is session
    spark.release()
    assert released == ([session] if gives_back else [])


def test_a_session_started_before_the_run_knew_its_size_still_knows_its_waves(
    released: list[Any],
) -> None:
    """A notebook's (or a test's) session is running before the run's discovery: the
    session keeps its settings, and the release still follows the run's waves."""
    session = object()
    started_with: list[SessionFit] = []
    spark = SparkOnDemand(lambda fit: started_with.append(fit) or session)
    spark()
    spark.fit(SessionFit(24, waves=True, wave_bytes=24 * 1024))
    spark.release()
    assert released == []
    assert spark() is session
    assert started_with == [SessionFit()]  # started once, with what it knew then
    spark.fit(SessionFit(10**6, waves=True, wave_bytes=RELEASE_FROM_BYTES * 2))
    spark.release()
    assert released == [session]
