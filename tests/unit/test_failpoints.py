"""Fail points by wave: ``<name>:<n>@<wave>`` arms a point only the ``wave``-th time the
run reaches it (checked without killing anything: the task side only hands out the
point; the driver side's kill is the crash tests')."""

from __future__ import annotations

import pytest

from syphon.obs import failpoints


def test_a_point_with_a_wave_is_armed_only_at_that_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failpoints, "_reached", {})
    monkeypatch.setenv(failpoints.ENV, "mid_replay:3@2")
    assert failpoints.for_task("mid_settle") is None  # another point: never
    assert failpoints.for_task("mid_replay") is None  # wave 1
    armed = failpoints.for_task("mid_replay")  # wave 2
    assert armed is not None
    assert (armed.name, armed.after) == ("mid_replay", 3)
    assert failpoints.for_task("mid_replay") is None  # wave 3


def test_a_point_without_a_wave_is_armed_at_the_first_reach(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(failpoints, "_reached", {})
    monkeypatch.setenv(failpoints.ENV, "mid_replay")
    armed = failpoints.for_task("mid_replay")
    assert armed is not None
    assert armed.after == 1
    monkeypatch.delenv(failpoints.ENV)
    assert failpoints.for_task("mid_replay") is None
