"""The outage scenario helper leaves exactly the backlog it reports."""

from __future__ import annotations

import pytest

from support.paired_env import Pair, park_outage
from support.python_rules import restore_from_backlog

pytestmark = pytest.mark.timeout(180)


def test_outage_scenario(pair: Pair) -> None:
    primary, secondary = pair.primary, pair.secondary
    result = park_outage(pair, producers=2, messages_per_phase=8, quick=False)
    assert len(result.messages) == 2 * 3 * 8
    assert {m.target for m in result.messages if m.phase != "during"} == {"primary"}
    assert {m.target for m in result.messages if m.phase == "during"} == {"backlog"}
    assert result.refused_sends > 0  # sends inside the failover interval were refused
    assert sum(c.failovers for c in result.counters) >= 2
    assert all(c.recoveries >= 1 for c in result.counters)

    # the backlog holds exactly the messages reported there, each with its destination
    backlog: dict[str, str | None] = {}
    for entity in secondary.broker.entities.values():
        for stored in entity.messages.values():
            props = stored.parsed.get_application_properties()
            backlog[str(stored.parsed.message_id)] = restore_from_backlog(props).destination
    assert backlog == {m.message_id: m.destination for m in result.to_backlog()}
    # and the primary holds the others
    on_primary = {
        str(m.parsed.message_id)
        for path in ("orders", "sessions", "events/Subscriptions/all")
        for m in primary.broker.entity(path).messages.values()
    }
    assert on_primary == {m.message_id for m in result.to_primary()}
    assert any(m.session_id for m in result.to_backlog())
    assert any(m.scheduled_enqueue_time_utc for m in result.messages)
