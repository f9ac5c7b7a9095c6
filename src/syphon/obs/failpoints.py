"""Fail points: where the crash tests kill a run, by name.

``SYPHON_FAILPOINT=<name>`` (optionally ``<name>:<n>``, and ``@<wave>``) in the driver's
environment makes the run kill its own driver process with SIGKILL when it reaches that
point — the ``n``-th time for the points inside Spark tasks, which count batches sent or
messages settled; with ``@<wave>``, only when the run reaches the point for the
``wave``-th time (a run of several waves reaches each point once per wave:
``after_plan@2``, ``mid_replay:3@2``). Nothing is cleaned up, exactly as in a real
crash. Unset (always, outside the crash tests), every check is a dictionary lookup that
does nothing.

Points on the driver: ``after_lease`` (the lease taken, nothing planned), ``after_plan``
(plan committed), ``after_replaying`` (ledger says
replaying, nothing sent), ``after_replay_commit`` (outcomes committed, ledger not yet
replayed), ``after_replayed``, ``after_settle_commit`` (settlements committed, final
status not yet recorded). Inside tasks: ``mid_replay:<batches>``, ``mid_settle:<messages>``.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

ENV = "SYPHON_FAILPOINT"


@dataclass(frozen=True)
class FailPoint:
    """A point armed in a task: kill ``driver_pid`` when the count reaches ``after``."""

    name: str
    after: int
    driver_pid: int

    def reached(self, count: int) -> None:
        if count >= self.after:
            os.kill(self.driver_pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)


#: How many times this process reached each armed point (only counted when armed).
_reached: dict[str, int] = {}


def _armed() -> tuple[str, int, int] | None:
    """The armed point: (name, count, wave)."""
    value = os.environ.get(ENV)
    if not value:
        return None
    point, _, wave = value.partition("@")
    name, _, count = point.partition(":")
    return name, int(count or 1), int(wave or 1)


def _reaches(name: str) -> int | None:
    """The count of the armed point when this reach of ``name`` is the one it waits for,
    else None."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return None
    _reached[name] = _reached.get(name, 0) + 1
    return armed[1] if _reached[name] == armed[2] else None


def check(name: str) -> None:
    """Kills this process if the armed point is ``name`` (at its wave)."""
    if _reaches(name) is not None:
        os.kill(os.getpid(), signal.SIGKILL)


def for_task(name: str) -> FailPoint | None:
    """The point to hand to Spark tasks when ``name`` is armed (at its wave), else None."""
    count = _reaches(name)
    if count is None:
        return None
    return FailPoint(name, count, os.getpid())
