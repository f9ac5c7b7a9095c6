"""The replay's pings of its destinations, against the local Service Bus through the real
SDK, without Spark: each reason a destination is skipped for a run."""

from __future__ import annotations

import pytest

from servicebus_emulator import Emulator, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.core.schema import Detail
from syphon.servicebus.access import Access
from syphon.servicebus.sending import ping_destinations


def primaries(sb: Emulator) -> dict[str, Access]:
    return {"p": Access("p", "primary", "localhost", connection_string=sb.connection_string)}


def test_each_destination_is_pinged_and_a_failing_one_is_skipped_with_its_reason(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"), QueueSpec("paused"), QueueSpec("busy"))
    sb.make_unavailable("paused")
    sb.throttle("busy")
    reasons = ping_destinations(primaries(sb), [("p", d) for d in ("orders", "paused", "busy",
                                                               "nowhere")])  # fmt: skip
    assert reasons == {
        ("p", "orders"): None,
        ("p", "paused"): Detail.DESTINATION_UNAVAILABLE,
        ("p", "busy"): None,  # up, only throttled: the sends back off
        ("p", "nowhere"): Detail.DESTINATION_MISSING,
    }
    assert sb.broker.entity("orders").messages == {}  # a ping is never delivered


def test_a_namespace_that_refuses_connections_fails_its_pings_with_the_error_class(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    sb.make_namespace_unavailable()
    (reason,) = ping_destinations(primaries(sb), [("p", "orders")]).values()
    assert reason is not None
    assert reason.startswith(Detail.PING_FAILED), reason
    assert reason.removeprefix(Detail.PING_FAILED).endswith("Error"), reason


def test_an_error_that_is_not_the_services_is_raised(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.servicebus import ServiceBusSender

    sb = servicebus_emulator(QueueSpec("orders"))

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("a bug, not an outage")

    monkeypatch.setattr(ServiceBusSender, "send_messages", broken)
    with pytest.raises(ZeroDivisionError):
        ping_destinations(primaries(sb), [("p", "orders")])
