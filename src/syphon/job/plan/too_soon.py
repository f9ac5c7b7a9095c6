"""The classify's step for re-driven dead letters that their destination would drop as
duplicates (:mod:`syphon.core.dedupe` says why and what is done instead).

:func:`with_window` adds ``_window_until``: for a message read from a
dead-letter queue and re-driven to the entity that accepted its MessageId (the entity
whose dead-letter queue holds it, or a subscription's topic), when that entity detects
duplicates (or its settings are unknown), the time its window passes for the message;
null when it has passed, and for every other message. ``_window_known`` says whether the
window is the destination's own (false: the longest the service allows, assumed). The
verdicts (:func:`syphon.job.plan.classify.verdict_rules`) make such a message ``too_soon``,
or a ``replay`` under a new MessageId when the operator asks for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from syphon.core.dedupe import LONGEST_WINDOW_SECONDS, UNKNOWN, WINDOW, new_message_id_col
from syphon.core.naming import is_dead_letter_col

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: The columns the step adds (dropped once the verdicts are given).
COLUMNS = ("_window_until", "_window_known")


def with_window(df: DataFrame, now: Column, judged: bool) -> DataFrame:
    """Restored rows (with their destination's settings) with :data:`COLUMNS`, as of the
    run's reference time ``now``; both null unless ``judged`` (a dead-letter source, whose
    messages go back to the entities that accepted them)."""
    from pyspark.sql import functions as F

    if not judged:
        return df.withColumns(
            {
                "_window_until": F.lit(None).cast("timestamp"),
                "_window_known": F.lit(None).cast("boolean"),
            }
        )
    entity = F.col("source_entity")
    topic = F.regexp_extract(entity, r"^(.+)/(?i:subscriptions)/[^/]+$", 1)
    accepted_by = F.when(topic != "", topic).otherwise(entity)
    detects = F.col("requires_duplicate_detection")
    known = detects.isNotNull() & F.col("duplicate_detection_window_seconds").isNotNull()
    seconds = F.when(known, F.col("duplicate_detection_window_seconds")).otherwise(
        F.lit(float(LONGEST_WINDOW_SECONDS))
    )
    until = F.col("enqueued_time") + F.make_dt_interval(secs=seconds)
    applies = (
        is_dead_letter_col(F.col("backlog_queue"))
        & (F.lower(F.col("destination")) == F.lower(accepted_by))
        & F.coalesce(detects, F.lit(True))
        & F.col("message_id").isNotNull()
        & F.col("enqueued_time").isNotNull()
        & (until > now)
    )
    return df.withColumns(
        {"_window_until": F.when(applies, until), "_window_known": F.when(applies, known)}
    )


def too_soon(new_ids: bool) -> Column:
    """Whether a row waits for its destination's window (``new_ids``: the operator asked
    for new MessageIds instead)."""
    from pyspark.sql import functions as F

    return F.col("_window_until").isNotNull() & F.lit(not new_ids)


def renamed(new_ids: bool) -> Column:
    """Whether a row is sent under a new MessageId (``new_ids``: the operator asked)."""
    from pyspark.sql import functions as F

    return F.col("_window_until").isNotNull() & F.lit(new_ids)


def reason() -> Column:
    """A ``too_soon`` row's reason: the window is the destination's, or assumed."""
    from pyspark.sql import functions as F

    return F.when(F.col("_window_known"), F.lit(WINDOW)).otherwise(F.lit(UNKNOWN))


def detail(verdict: Column, new_ids: bool) -> Column:
    """The plan row's ``detail`` this step gives, by the row's ``verdict``: a
    ``too_soon`` row's time the window passes (UTC, ISO 8601: the session's time zone is
    UTC), a replay's new MessageId when it is sent under one."""
    from pyspark.sql import functions as F

    from syphon.core.schema import Verdict

    until = F.date_format(F.col("_window_until"), "yyyy-MM-dd'T'HH:mm:ss'Z'")
    return F.when(verdict == Verdict.TOO_SOON, until).when(
        (verdict == Verdict.REPLAY) & renamed(new_ids), new_message_id_col(F.col("message_id"))
    )
