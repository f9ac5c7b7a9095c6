"""The outage scenario helper leaves exactly the backlog it reports."""

from __future__ import annotations

from datetime import timedelta

import pytest
from azure.servicebus import ServiceBusClient
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.envelope import restore_from_backlog
from syphon.provision import provision_backlog
from syphon.scenario import Destination, run_outage_scenario
from syphon.sender import PairedNamespaceClient, SendAvailabilityOptions

pytestmark = pytest.mark.timeout(180)
PRIMARY = "contoso-primary"


def test_outage_scenario(servicebus_emulator: EmulatorFactory) -> None:
    primary = servicebus_emulator(
        QueueSpec("orders"),
        QueueSpec("sessions", requires_session=True),
        TopicSpec("events", subscriptions=(SubscriptionSpec("all"),)),
    )
    secondary = servicebus_emulator()
    admin = ServiceBusAdministrationClient.from_connection_string(
        secondary.admin_connection_string, connection_verify=secondary.ca_bundle
    )
    provision_backlog(admin, PRIMARY, count=3)
    options = SendAvailabilityOptions(
        backlog_queue_count=3,
        failover_interval=timedelta(seconds=0.3),
        ping_primary_interval=timedelta(seconds=0.2),
    )

    def make_client() -> PairedNamespaceClient:
        return PairedNamespaceClient(
            ServiceBusClient.from_connection_string(primary.connection_string, retry_total=0),
            ServiceBusClient.from_connection_string(secondary.connection_string, retry_total=0),
            PRIMARY,
            options,
        )

    result = run_outage_scenario(
        make_client,
        [
            Destination("orders"),
            Destination("sessions", sessions=True),
            Destination("events", kind="topic"),
        ],
        start_outage=lambda: primary.make_unavailable("*"),
        end_outage=primary.clear_faults,
        producers=2,
        messages_per_phase=8,
        outage_seconds=0.5,
    )
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
