"""An upper bound of the bytes a replayed message adds to a ``ServiceBusMessageBatch``,
from the backlog message's encoded size: no message is rebuilt, no byte is read.

The replay sends :func:`syphon.core.rebuild.rebuild` of the backlog message, and the SDK
counts each message of a batch as its encoded size plus 5 or 8 bytes. The rebuild
only removes (the aliases, the service's annotations, the backlog copy's header and
delivery annotations) and re-encodes what stays in the smallest encoding, except for
three additions, each bounded here at its widest:

- a header holding the TTL: descriptor (3), list8 (3), two nulls and a ``uint`` (7);
- the scheduled time's annotation: its entry (the symbol, 30; the timestamp, 9), the
  map's header grown to a map32 (6) or a new section (descriptor 3 and map32 9);
- the session id in the properties' group-id: the string (its UTF-8 bytes plus 5), up
  to ten nulls before it, the list's header grown to a list32 (6) or a new section
  (descriptor 3, list32 9).

So the bound is never below the SDK's count of the replayed message (a property test
checks it against the rebuild) and is about as far above it as the service's own
annotations on the backlog copy (a hundred bytes or so). Packing by the bound, within
the destination's limit less :data:`ENVELOPE_RESERVE`, means a planned batch always fits
the destination's limit as the service measures it; a message over the limit by the
bound is measured exactly by the batch plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Batch overhead per message (the SDK's 5 or 8 by encoded size: the larger).
BATCH_OVERHEAD = 8
#: The header with a TTL: descriptor, list8 header, durable and priority nulls, a uint.
TTL_HEADER = 3 + 3 + 2 + 5
#: The scheduled time's annotation: entry, and a grown or new map section.
SCHEDULE = (2 + len("x-opt-scheduled-enqueue-time")) + 9 + 3 + 9
#: The session id's group-id, besides the id's UTF-8 bytes: string header, nulls before
#: it, and a grown or new properties section.
SESSION = 5 + 10 + 3 + 9

#: What a batch's envelope adds that the SDK's count leaves out (it counts the messages
#: only): the first message's id and session id in a properties section (descriptor 3,
#: list32 9, the id and the group-id each at most 128 characters of up to 4 bytes plus 5,
#: nine nulls between) and its partition key in an annotations section (descriptor 3,
#: map32 9, the key's name 21, its value at most 517). The service measures the whole
#: batch against the entity's limit, so the batch plan keeps this much room.
ENVELOPE_RESERVE = (3 + 9 + 2 * (5 + 4 * 128) + 9) + (3 + 9 + 21 + (5 + 4 * 128))

#: The size the SDK gives an empty ``ServiceBusMessageBatch`` (a test checks it against
#: the SDK).
EMPTY_BATCH_BYTES = 0


def message_bytes_bound_col(
    encoded: Column, session_id: Column, time_to_live_ticks: Column, scheduled: Column
) -> Column:
    """The bound (see the module docstring) as a Spark column, from the backlog message's
    bytes (only their length is read) and its restored envelope."""
    from pyspark.sql import functions as F

    def when_set(col: Column, size: Column | int) -> Column:
        return F.when(col.isNotNull(), size).otherwise(F.lit(0))

    return (
        F.lit(EMPTY_BATCH_BYTES + BATCH_OVERHEAD)
        + F.coalesce(F.octet_length(encoded), F.lit(0))
        + when_set(time_to_live_ticks, TTL_HEADER)
        + when_set(scheduled, SCHEDULE)
        + when_set(session_id, F.lit(SESSION) + F.octet_length(session_id))
    ).cast("long")
