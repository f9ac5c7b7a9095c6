"""Links opened through :func:`syphon.servicebus.raw.lean`, against the local Service Bus
through the real SDK: they open without the SDK's sleeps between readiness polls, a
receiver without prefetch starts no keep-alive thread, and otherwise they behave as the
SDK's own (they receive, settle and fail the same way). Each check has a control on a
plain link, so that an SDK upgrade that changes what ``lean`` relies on fails here."""

from __future__ import annotations

import time
import types

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus import _servicebus_receiver as sdk_receiver
from azure.servicebus import _servicebus_sender as sdk_sender
from azure.servicebus.exceptions import ServiceBusError

from servicebus_emulator import QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.sdk_threads import keep_alive_threads
from syphon.servicebus.raw import COMPLETED, lean, settle_tokens


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps the SDK's receiver and sender modules ask for (their ``_open`` polls
    for readiness and sleeps between polls), recorded and still slept."""
    asked: list[float] = []

    def sleep(seconds: float) -> None:
        asked.append(seconds)
        time.sleep(seconds)

    for module in (sdk_receiver, sdk_sender):
        monkeypatch.setattr(module, "time", types.SimpleNamespace(**{**vars(time), "sleep": sleep}))
    return asked


def test_links_open_without_sleeping_between_polls(
    servicebus_emulator: EmulatorFactory, sleeps: list[float]
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender("q", keep_alive=None) as plain:
            plain.send_messages(ServiceBusMessage(b"plain"))
        assert sleeps, "the SDK's own open no longer sleeps: lean has nothing to remove"
        sleeps.clear()
        with lean(client.get_queue_sender("q", keep_alive=None)) as sender:
            sender.send_messages(ServiceBusMessage(b"lean"))
        with lean(client.get_queue_receiver("q")) as receiver:
            got = receiver.receive_messages(5, max_wait_time=2)
            settle_tokens(receiver, [m.lock_token for m in got], COMPLETED)
    assert sleeps == []
    assert sorted(b"".join(m.body) for m in got) == [b"lean", b"plain"]
    assert sb.broker.entity("q").messages == {}


def test_a_receiver_without_prefetch_starts_no_keep_alive_and_locks_only_what_it_receives(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        with client.get_queue_sender("q", keep_alive=None) as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}".encode()) for i in range(6)])
        before = keep_alive_threads()
        with client.get_queue_receiver("q") as plain:  # the control: the SDK starts one
            plain.peek_messages(1)
            assert len(keep_alive_threads() - before) == 1
        before = keep_alive_threads()  # the control's close joined its thread
        with lean(client.get_queue_receiver("q")) as receiver:
            first = receiver.receive_messages(2, max_wait_time=2)
            second = receiver.receive_messages(2, max_wait_time=2)
            assert keep_alive_threads() - before == set()
            locked = {m.seq for m in sb.broker.entity("q").messages.values() if m.lock_token}
            settle_tokens(receiver, [m.lock_token for m in first + second], COMPLETED)
    assert [b"".join(m.body) for m in first + second] == [b"m0", b"m1", b"m2", b"m3"]
    assert locked == {int(m.sequence_number or 0) for m in first + second}
    # the two not received are neither locked nor taken (the first four are gone)
    left = sb.broker.entity("q").messages.values()
    assert [(m.seq, m.lock_token) for m in left] == [
        (max(locked) + 1, None),
        (max(locked) + 2, None),
    ]


def test_a_lean_link_fails_as_the_sdks_own(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        errors = []
        for wrap in (lambda link: link, lean):
            with (
                pytest.raises(ServiceBusError) as raised,
                wrap(client.get_queue_sender("missing", keep_alive=None)) as sender,
            ):
                sender.send_messages(ServiceBusMessage(b"x"))
            errors.append(type(raised.value).__name__)
    assert errors[0] == errors[1]
