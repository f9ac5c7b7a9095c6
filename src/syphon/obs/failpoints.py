"""Fail points: where the crash tests kill a run, by name.

``SYPHON_FAILPOINT=<name>`` (optionally ``<name>:<n>``) in the driver's environment makes
the run kill its own driver process with SIGKILL when it reaches that point — the
``n``-th time for the points inside Spark tasks, which count batches sent or messages
settled. Nothing is cleaned up, exactly as in a real crash. Unset (always, outside the
crash tests), every check is a dictionary lookup that does nothing.

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


def _armed() -> tuple[str, int] | None:
    value = os.environ.get(ENV)
    if not value:
        return None
    name, _, count = value.partition(":")
    return name, int(count or 1)


def check(name: str) -> None:
    """Kills this process if the armed point is ``name``."""
    armed = _armed()
    if armed is not None and armed[0] == name:
        os.kill(os.getpid(), signal.SIGKILL)


def for_task(name: str) -> FailPoint | None:
    """The point to hand to Spark tasks when ``name`` is armed, else None."""
    armed = _armed()
    if armed is None or armed[0] != name:
        return None
    return FailPoint(name, armed[1], os.getpid())
