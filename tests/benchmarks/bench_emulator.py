"""Throughput of the local Service Bus through the real SDK, 1 KB messages, loopback.

Prints messages per second for batched sends, receive-and-delete, and peek-lock receive
with completion. Usage: bench_emulator.py [--messages N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

BODY = b"x" * 1024


def build_batches(sender: object, count: int) -> list[object]:
    batches = []
    made = 0
    while made < count:
        batch = sender.create_message_batch()  # type: ignore[attr-defined]
        while made < count:
            try:
                batch.add_message(ServiceBusMessage(BODY))
            except ValueError:
                break
            made += 1
        batches.append(batch)
    return batches


def send_all(client: ServiceBusClient, queue: str, count: int, prebuilt: bool = False) -> float:
    """Seconds to send ``count`` messages in full batches. With ``prebuilt`` the SDK's
    own batch building (client CPU) is left out of the time, so the figure is what the
    emulator sustains on the wire."""
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(BODY))  # the link is up before timing
        started = time.perf_counter()
        if prebuilt:
            batches = build_batches(sender, count)
            started = time.perf_counter()
        else:
            batches = []
        if not prebuilt:
            for batch in build_batches(sender, count):
                sender.send_messages(batch)
        for batch in batches:
            sender.send_messages(batch)
        return time.perf_counter() - started


def receive_all(client: ServiceBusClient, queue: str, count: int, peek_lock: bool) -> float:
    mode = (
        ServiceBusReceiveMode.PEEK_LOCK if peek_lock else ServiceBusReceiveMode.RECEIVE_AND_DELETE
    )
    with client.get_queue_receiver(queue, receive_mode=mode, prefetch_count=500) as receiver:
        got = len(receiver.receive_messages(1, max_wait_time=5))  # the link is up
        started = time.perf_counter()
        while got < count:
            batch = receiver.receive_messages(500, max_wait_time=5)
            if not batch:
                raise RuntimeError(f"only {got} of {count} messages came back")
            for message in batch:
                if peek_lock:
                    receiver.complete_message(message)
            got += len(batch)
    return time.perf_counter() - started


@contextmanager
def emulator_process() -> Iterator[str]:
    """The emulator in its own process (as the job meets it), yielding its connection string."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
        config.write("queues:\n  - name: a\n  - name: b\n")
        config.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "servicebus_emulator", "--port", "0", "--config", config.name],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            yield line.split(": ", 1)[1].strip()
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    n = parser.parse_args().messages
    with emulator_process() as conn:
        with ServiceBusClient.from_connection_string(conn) as client:
            send_all(client, "a", 1000)  # warm up
            receive_all(client, "a", 1000, peek_lock=False)
            rows = [
                ("send, SDK builds batches", send_all(client, "a", n)),
                ("receive and delete", receive_all(client, "a", n, peek_lock=False)),
                ("send, batches prebuilt", send_all(client, "b", n, prebuilt=True)),
                ("peek-lock receive + complete", receive_all(client, "b", n, peek_lock=True)),
            ]
    print(f"{n} messages of 1 KB, local Service Bus in its own process, on loopback")
    for name, seconds in rows:
        print(f"  {name:30s} {seconds:7.2f} s  {n / seconds:9.0f} msg/s")
    print(
        "  (the prebuilt figure is the emulator's own send rate; the first includes the\n"
        "   SDK's batch building on the client, which any sender pays)"
    )


if __name__ == "__main__":
    main()
