"""How big a run's waves are: whether a run drains its source in one wave or in several
(:func:`one_wave`: only sources whose queues are ordered by enqueue time can be cut by
time, see :mod:`syphon.job.read.waves`), and the limit each wave of a run in waves reads
with (:func:`wave_limits`): a small first wave, so that the first messages reach their
primaries in seconds whatever the backlog, then waves growing to ``run.wave_messages``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from syphon.core.naming import PARTITIONED_SEQUENCE, is_dead_letter_path
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import DiscoveredQueue
from syphon.servicebus.peek import first_sequence_number


def time_ordered(paths: Iterable[str], sequence_numbers: Iterable[int] = ()) -> bool:
    """Whether queues can be cut by time: none is a dead-letter queue and no sequence
    number read from them carries a partition."""
    if any(is_dead_letter_path(p) for p in paths):
        return False
    return all(n < PARTITIONED_SEQUENCE for n in sequence_numbers)


def one_wave(
    wave_messages: int, source_kind: str, queues: list[DiscoveredQueue], access: Access
) -> str | None:
    """Why a run drains ``queues`` in one wave, or None when it drains them in waves of
    at most ``wave_messages`` messages. One peek per queue when every other answer is
    no (whether a queue holds a partition's messages)."""
    if wave_messages <= 0:
        return "run.wave_messages is 0"
    if source_kind == "namespace":
        # a live entity counts every receive against its MaxDeliveryCount, and a
        # wave's settle receives again what an earlier wave left at the queue's head
        return "a namespace source's entities count each receive as a delivery"
    paths = [q.path for q in queues]
    if not time_ordered(paths):
        return "a dead-letter queue is not ordered by enqueue time"
    counts = [q.message_count for q in queues]
    if None not in counts and sum(c or 0 for c in counts) <= wave_messages:
        return "the source holds no more than one wave"
    for path in paths:
        if first_sequence_number(access, path, PARTITIONED_SEQUENCE) is not None:
            return f"{path} is partitioned: its sequence numbers are per partition"
    return None


#: Messages the first wave of a run in waves takes at most (fewer when
#: ``run.wave_messages`` is smaller): a small first wave reaches the primaries in seconds.
FIRST_WAVE_MESSAGES = 2_000


#: How many times as many messages each wave takes as the one before, up to
#: ``run.wave_messages`` (the default's waves: 2,000, then 40,000). Four took more waves
#: and 15% longer in all at 100,000 messages (tests/benchmarks/README.md, "Growing waves").
WAVE_GROWTH = 20


def wave_limits(wave_messages: int, queues: int) -> Iterator[int]:
    """The per-queue limit of each wave of a run in waves of at most ``wave_messages``
    over ``queues`` queues: the first wave's from :data:`FIRST_WAVE_MESSAGES`, each next
    one :data:`WAVE_GROWTH` times the one before, up to the limit of ``wave_messages``."""
    queues = max(1, queues)
    most = max(1, -(-wave_messages // queues))
    limit = min(most, max(1, -(-FIRST_WAVE_MESSAGES // queues)))
    while True:
        yield limit
        limit = min(most, limit * WAVE_GROWTH)
