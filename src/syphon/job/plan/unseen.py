"""The keys a run holds back because it could not read one of their messages.

A read once under lock (:mod:`syphon.job.read.once`) finds, by peeking the gaps in what it
received (:mod:`syphon.job.read.gaps`), the messages another receiver keeps locked. Their
keys' later messages must not reach a primary before them, so the run holds those keys
back: this module gives each unseen message the lane (primary, destination, partition
key) the plan would give it. Its messages are restored and repaired as a wave's are
(:func:`syphon.job.plan.reconcile.wave_messages`), and keyed by the same rule and the same
destination settings (:func:`syphon.job.plan.classify.with_partition_key`), so that a lane
held back here is the lane the replay meets. A message without a key holds nothing back
(the promise is order per key), nor does one whose key the rules reject (it would be
``invalid``, never sent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from syphon.job.context import RunContext
from syphon.job.plan.classify import with_destination_settings, with_partition_key
from syphon.job.plan.planning import Listed, against
from syphon.job.plan.reconcile import wave_messages
from syphon.job.read.handoff import snapshot_frame
from syphon.job.replay.lanes import Lane
from syphon.job.request import RunRequest

if TYPE_CHECKING:
    from collections.abc import Sequence


def unseen_lanes(
    ctx: RunContext, request: RunRequest, listed: Listed, messages: Sequence[tuple[str, bytes]]
) -> frozenset[Lane]:
    """The lanes of ``messages`` ((queue, encoded message), as the service holds them).
    One Spark job; none without messages."""
    if not messages:
        return frozenset()
    spark = ctx.spark()
    pages = [(queue, [encoded]) for queue, encoded in messages]
    frame = snapshot_frame(spark, pages, ctx.spark.give_back)
    restored = wave_messages(frame, request.source.redrive, request.repair)
    judged = against(ctx, request, listed)
    keyed = with_partition_key(with_destination_settings(restored, judged), judged)
    found = keyed.select("primary", "destination", "_key.key").distinct().collect()
    return frozenset(
        (str(r[0]), str(r[1]), str(r[2]))
        for r in found
        if r[0] is not None and r[1] is not None and r[2] is not None
    )
