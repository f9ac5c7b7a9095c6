"""The replay's probes of its destinations, against the local Service Bus through the
real SDK, without Spark: each reason a destination is skipped for a run, and that a probe
never puts a message on the destination."""

from __future__ import annotations

import pytest

from servicebus_emulator import Emulator, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.core.schema import Detail
from syphon.servicebus.access import Access
from syphon.servicebus.sending import probe_destinations


def primaries(sb: Emulator) -> dict[str, Access]:
    return {"p": Access("p", "primary", "localhost", connection_string=sb.connection_string)}


def test_each_destination_is_probed_and_a_missing_one_is_skipped_with_its_reason(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"), QueueSpec("busy"))
    sb.throttle("busy")
    reasons = probe_destinations(primaries(sb), [("p", d) for d in ("orders", "busy", "nowhere")])
    assert reasons == {
        ("p", "orders"): None,
        ("p", "busy"): None,  # up, only throttled: the sends back off
        ("p", "nowhere"): Detail.DESTINATION_MISSING,
    }


def test_a_probe_sends_nothing_a_live_consumer_could_receive(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.servicebus import ServiceBusSender

    # the local Service Bus drops pings as the service does, so the queue alone cannot
    # tell a probe from a ping: every send the SDK is asked for is recorded too
    sent: list[object] = []
    send = ServiceBusSender.send_messages

    def recording(self: ServiceBusSender, message: object, *args: object, **kwargs: object) -> None:
        sent.append(message)
        send(self, message, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ServiceBusSender, "send_messages", recording)
    sb = servicebus_emulator(QueueSpec("orders"))
    assert probe_destinations(primaries(sb), [("p", "orders")]) == {("p", "orders"): None}
    assert sent == []
    assert sb.broker.entity("orders").messages == {}


def test_a_probe_attaches_a_sender_so_a_key_without_send_rights_fails_it(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    listen = {
        "p": Access(
            "p", "primary", "localhost", connection_string=sb.connection_string_for("listen-only")
        )
    }
    reasons = probe_destinations(listen, [("p", "orders")])
    assert reasons == {("p", "orders"): f"{Detail.PROBE_FAILED}ServiceBusAuthorizationError"}


def test_a_namespace_that_refuses_connections_fails_its_probes_with_the_error_class(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("orders"))
    sb.make_namespace_unavailable()
    (reason,) = probe_destinations(primaries(sb), [("p", "orders")]).values()
    assert reason is not None
    assert reason.startswith(Detail.PROBE_FAILED), reason
    assert reason.removeprefix(Detail.PROBE_FAILED).endswith("Error"), reason


def test_an_error_that_is_not_the_services_is_raised(
    servicebus_emulator: EmulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.servicebus import ServiceBusSender

    sb = servicebus_emulator(QueueSpec("orders"))

    def broken(*_: object, **__: object) -> None:
        raise ZeroDivisionError("a bug, not an outage")

    monkeypatch.setattr(ServiceBusSender, "_open_with_retry", broken)
    with pytest.raises(ZeroDivisionError):
        probe_destinations(primaries(sb), [("p", "orders")])
