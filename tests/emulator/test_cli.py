"""The emulator as its own process: start, use, inject faults from outside, stop."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityDisabledError, OperationTimeoutError
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator.model import partition_for_key
from support.quick_client import QuickClient

pytestmark = pytest.mark.timeout(60)


def fault(control: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servicebus_emulator", "fault", "--control", control, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_command_serves_declared_queues_and_takes_faults_from_another_process(
    tmp_path: Path,
) -> None:
    config = tmp_path / "entities.yaml"
    config.write_text(
        "queues:\n  - name: orders\n    lock_duration: 5\n"
        "  - name: parts\n    enable_partitioning: true\n"
        "topics:\n  - name: events\n    subscriptions: [{name: all}]\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "servicebus_emulator", "--port", "0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = {}
        for _ in range(6):
            key, _, value = proc.stdout.readline().strip().partition(": ")
            lines[key] = value
        conn, control = lines["connection string"], lines["control"]
        assert f"127.0.0.1:{lines['port']}" in conn
        assert "UseDevelopmentEmulator=true" in conn
        admin = ServiceBusAdministrationClient.from_connection_string(
            lines["admin connection string"], connection_verify=lines["ca bundle"]
        )
        assert sorted(q.name for q in admin.list_queues()) == ["orders", "parts"]
        assert [s.name for s in admin.list_subscriptions("events")] == ["all"]
        assert lines["admin port"] in lines["admin connection string"]

        with QuickClient.from_connection_string(conn, retry_total=0) as client:
            client.get_queue_sender("orders").send_messages(ServiceBusMessage("one"))
            assert fault(control, "unavailable", "orders").returncode == 0
            with pytest.raises(MessagingEntityDisabledError):
                client.get_queue_sender("orders").send_messages(ServiceBusMessage("two"))
            assert fault(control, "clear").returncode == 0
            client.get_queue_sender("orders").send_messages(ServiceBusMessage("three"))
            with client.get_queue_receiver("orders") as receiver:
                got = receiver.receive_messages(5, max_wait_time=2)
                assert [str(m) for m in got] == ["one", "three"]
            down = partition_for_key("k")
            assert (
                fault(control, "partition-down", "parts", "--partition", str(down)).returncode == 0
            )
            with pytest.raises(OperationTimeoutError):
                client.get_queue_sender("parts").send_messages(
                    ServiceBusMessage("x", partition_key="k")
                )
            client.get_queue_sender("parts").send_messages(ServiceBusMessage("keyless"))
        bad = fault(control, "explode")
        assert bad.returncode != 0
        assert fault(control, "partition-down", "parts").returncode != 0  # needs --partition
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0


def test_a_bad_entity_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "entities.yaml"
    config.write_text("queues:\n  - name: q\n    colour: red\n")
    result = subprocess.run(
        [sys.executable, "-m", "servicebus_emulator", "--port", "0", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown queue properties: ['colour']" in result.stderr
