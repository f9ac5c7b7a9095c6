"""A fault inside the emulator never takes the whole server down."""

from __future__ import annotations

import socket

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError

from servicebus_emulator import QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient

pytestmark = pytest.mark.timeout(60)


def test_a_failing_handler_closes_only_its_link(
    servicebus_emulator: EmulatorFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))

    def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom")

    with QuickClient.from_connection_string(sb.connection_string, retry_total=0) as client:
        monkeypatch.setattr(sb.broker, "send", explode)
        with pytest.raises(ServiceBusError):
            client.get_queue_sender("q").send_messages(ServiceBusMessage("x"))
        monkeypatch.undo()
    assert "handler on_delivery failed" in caplog.text
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("after"))
        with client.get_queue_receiver("q") as receiver:
            assert [str(m) for m in receiver.receive_messages(1, max_wait_time=2)] == ["after"]


def test_garbage_on_the_socket_does_not_stop_the_server(
    servicebus_emulator: EmulatorFactory,
) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    with socket.create_connection(("127.0.0.1", sb.port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)))
        raw.recv(1024)
    with QuickClient.from_connection_string(sb.connection_string) as client:
        client.get_queue_sender("q").send_messages(ServiceBusMessage("still here"))
        with client.get_queue_receiver("q") as receiver:
            assert [str(m) for m in receiver.receive_messages(1, max_wait_time=2)] == ["still here"]


def test_a_taken_free_port_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    from servicebus_emulator import server

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    picks = iter([busy])
    real = server.free_port
    monkeypatch.setattr(
        server, "free_port", lambda host="127.0.0.1": next(picks, None) or real(host)
    )
    try:
        with server.Emulator() as sb:
            assert sb.port != busy
        with pytest.raises(RuntimeError, match="in use"):
            server.Emulator(port=busy).start()
    finally:
        taken.close()


def test_a_stopped_emulator_refuses_connections_like_a_namespace_that_is_down(
    servicebus_emulator: EmulatorFactory,
) -> None:
    # a listening socket left open would accept and never answer: a client would hang
    # instead of failing over
    sb = servicebus_emulator(QueueSpec("q"))
    socket.create_connection(("127.0.0.1", sb.port), timeout=5).close()
    sb.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", sb.port), timeout=5).close()


def test_both_listeners_queue_many_connections_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # proton listens with a backlog of 10 and the standard library's HTTP server with 5:
    # a job opening 50 links side by side would wait a second and more for SYN
    # retransmissions, which the service never makes it do
    from servicebus_emulator import Emulator

    backlogs: dict[int, int] = {}
    listen = socket.socket.listen

    def recording(sock: socket.socket, backlog: int = 128) -> None:
        backlogs[sock.getsockname()[1]] = backlog  # the last listen of a socket counts
        listen(sock, backlog)

    monkeypatch.setattr(socket.socket, "listen", recording)
    with Emulator(queues=[QueueSpec("q")]) as sb:
        assert backlogs[sb.port] >= 512
        assert backlogs[sb.admin_port] >= 512
