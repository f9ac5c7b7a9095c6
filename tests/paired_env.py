"""Two local Service Bus namespaces, a primary and a secondary with provisioned backlog
queues, for the producer-side tests (the fixture ``pair`` in tests/producer/conftest.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from azure.servicebus import ServiceBusClient
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import Emulator, QueueSpec, SubscriptionSpec, TopicSpec
from syphon.provision import provision_backlog
from syphon.sender import PairedNamespaceClient, SendAvailabilityOptions

PRIMARY = "contoso-primary"
BACKLOG_QUEUES = 4


@dataclass
class Pair:
    primary: Emulator
    secondary: Emulator

    def client(self, rng_seed: int | None = 7, **options: Any) -> PairedNamespaceClient:
        """A paired client with fresh SDK clients (no retries, so faults show at once)."""
        return PairedNamespaceClient(
            ServiceBusClient.from_connection_string(self.primary.connection_string, retry_total=0),
            ServiceBusClient.from_connection_string(
                self.secondary.connection_string, retry_total=0
            ),
            PRIMARY,
            SendAvailabilityOptions(backlog_queue_count=BACKLOG_QUEUES, **options),
            rng=None if rng_seed is None else random.Random(rng_seed),
        )

    def backlog(self) -> dict[str, list[Any]]:
        """Every backlog message, peeked through the SDK, by (non-empty) queue."""
        out = {}
        with ServiceBusClient.from_connection_string(self.secondary.connection_string) as sb:
            for i in range(BACKLOG_QUEUES):
                path = f"{PRIMARY}/x-servicebus-transfer/{i}"
                if not self.secondary.broker.entity(path).messages:
                    continue
                with sb.get_queue_receiver(path) as receiver:
                    out[path] = receiver.peek_messages(250)
        return out


def make_pair(servicebus_emulator: Callable[..., Emulator]) -> Pair:
    primary = servicebus_emulator(
        QueueSpec("orders"),
        QueueSpec("sessions", requires_session=True),
        TopicSpec("events", subscriptions=(SubscriptionSpec("all"),)),
    )
    secondary = servicebus_emulator()
    admin = ServiceBusAdministrationClient.from_connection_string(
        secondary.admin_connection_string, connection_verify=secondary.ca_bundle
    )
    provision_backlog(admin, PRIMARY, count=BACKLOG_QUEUES)
    return Pair(primary, secondary)
