"""Backlog provisioning against the local Service Bus's management API."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import Emulator
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.core.naming import TIMESPAN_MAX, backlog_queue_path
from syphon.servicebus.provision import provision_backlog

pytestmark = pytest.mark.timeout(120)
PRIMARY = "contoso-primary"


def admin_for(sb: Emulator) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        sb.admin_connection_string, connection_verify=sb.ca_bundle, retry_total=0
    )


def test_creates_the_seed_queues_then_changes_nothing(
    servicebus_emulator: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sb = servicebus_emulator()
    admin = admin_for(sb)
    first = provision_backlog(admin, PRIMARY, count=4)
    assert first.created == [backlog_queue_path(PRIMARY, i) for i in range(4)]
    assert (first.existing, first.extras, first.mismatched) == ([], [], {})
    queue = admin.get_queue(f"{PRIMARY}/x-servicebus-transfer/2")
    assert queue.max_size_in_megabytes == 5120
    assert queue.max_delivery_count == 2**31 - 1
    assert queue.lock_duration == timedelta(minutes=1)
    assert queue.dead_lettering_on_message_expiration is True
    assert queue.enable_batched_operations is True
    assert queue.default_message_time_to_live >= TIMESPAN_MAX - timedelta(seconds=1)
    assert queue.auto_delete_on_idle >= TIMESPAN_MAX - timedelta(seconds=1)

    again = provision_backlog(admin, PRIMARY, count=4)
    assert again.created == []
    assert again.existing == first.created
    assert again.warnings == []
    assert "0 created, 4 already there" in again.summary()


def test_reports_extras_and_differences_and_deletes_nothing(
    servicebus_emulator: EmulatorFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sb = servicebus_emulator()
    admin = admin_for(sb)
    admin.create_queue(f"{PRIMARY}/x-servicebus-transfer/1", lock_duration=timedelta(seconds=30))
    admin.create_queue(f"{PRIMARY}/x-servicebus-transfer/7")
    admin.create_queue(f"{PRIMARY}/x-servicebus-transfer/12")
    admin.create_queue("other-namespace/x-servicebus-transfer/9")
    with caplog.at_level(logging.WARNING, logger="syphon.servicebus.provision"):
        result = provision_backlog(admin, PRIMARY, count=5)
    assert len(result.created) == 4
    assert result.extras == [
        f"{PRIMARY}/x-servicebus-transfer/7",
        f"{PRIMARY}/x-servicebus-transfer/12",
    ]
    (problems,) = result.mismatched.values()
    assert any(p.startswith("lock_duration") for p in problems)
    assert any("max_delivery_count" in p for p in problems)
    assert len(result.warnings) == 2 + len(problems)
    assert "extra backlog queue" in caplog.text
    # nothing was changed or deleted
    assert admin.get_queue(f"{PRIMARY}/x-servicebus-transfer/1").lock_duration == timedelta(
        seconds=30
    )
    names = {q.name for q in admin.list_queues()}
    assert {f"{PRIMARY}/x-servicebus-transfer/12", "other-namespace/x-servicebus-transfer/9"} <= (
        names
    )


def test_bad_counts_are_refused(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator()
    with pytest.raises(ValueError, match="count"):
        provision_backlog(admin_for(sb), PRIMARY, count=0)
