""".NET TimeSpan ticks, the unit the backlog form uses for time-to-live.

A tick is 100 ns. `TimeSpan.MaxValue` (Int64.MaxValue ticks) means "infinite" in the
.NET SDK and in the Service Bus management API.
"""

from __future__ import annotations

from datetime import timedelta

TICKS_PER_SECOND = 10_000_000
TICKS_PER_MICROSECOND = 10
TIMESPAN_MAX_TICKS = 2**63 - 1

#: `TimeSpan.MaxValue` as the nearest Python timedelta (microsecond precision).
TIMESPAN_MAX = timedelta(microseconds=TIMESPAN_MAX_TICKS // TICKS_PER_MICROSECOND)


def timedelta_to_ticks(value: timedelta) -> int:
    """Converts a timedelta to .NET ticks, exactly (timedeltas hold whole microseconds).

    Args:
        value: a duration; negative durations are converted as they are.

    Returns:
        The number of 100 ns ticks, capped at ``TIMESPAN_MAX_TICKS``.
    """
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    return min(micros * TICKS_PER_MICROSECOND, TIMESPAN_MAX_TICKS)


def is_infinite(value: timedelta) -> bool:
    """True for a timedelta at or above `TimeSpan.MaxValue` (Python's max included)."""
    return value >= TIMESPAN_MAX
