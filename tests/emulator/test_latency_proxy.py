"""The benchmarks' delay proxy (tests/support/latency_proxy.py): bytes arrive whole and in
order in both directions, and the real SDK works through it against the local Service
Bus. (How long it delays is the benchmarks' business: no timed assert here.)"""

from __future__ import annotations

import socket
import threading

from azure.servicebus import ServiceBusMessage

from servicebus_emulator import QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.latency_proxy import DelayProxy
from support.quick_client import QuickClient


def test_chunks_arrive_whole_and_in_order_both_ways() -> None:
    upstream = socket.create_server(("127.0.0.1", 0))
    received = bytearray()

    def echo() -> None:
        conn, _ = upstream.accept()
        with conn:
            while data := conn.recv(65536):
                received.extend(data)
                conn.sendall(data[::-1])

    threading.Thread(target=echo, daemon=True).start()
    proxy = DelayProxy("127.0.0.1", upstream.getsockname()[1], delay=0.002).start()
    sent = [bytes([i % 251]) * (1 + i * 37 % 4000) for i in range(300)]
    back = bytearray()
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        for chunk in sent:  # in flight together: none may overtake another
            client.sendall(chunk)
        client.shutdown(socket.SHUT_WR)
        while data := client.recv(65536):
            back.extend(data)
    proxy.stop()
    upstream.close()
    assert bytes(received) == b"".join(sent)
    assert len(back) == len(received)  # every answer came back, whatever its chunking


def test_the_sdk_sends_and_receives_through_it(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(QueueSpec("q"))
    proxy = DelayProxy("127.0.0.1", sb.port, delay=0.005).start()
    through = sb.connection_string.replace(f":{sb.port};", f":{proxy.port};")
    try:
        with QuickClient.from_connection_string(through) as client:
            with client.get_queue_sender("q") as sender:
                sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(20)])
            with client.get_queue_receiver("q", max_wait_time=5) as receiver:
                got = []
                while len(got) < 20 and (page := receiver.receive_messages(20, max_wait_time=5)):
                    for m in page:
                        got.append(str(m))
                        receiver.complete_message(m)
    finally:
        proxy.stop()
    assert got == [f"m{i}" for i in range(20)]
    assert not sb.broker.entity("q").messages
