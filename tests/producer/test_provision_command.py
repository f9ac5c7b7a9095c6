"""``syphon provision`` against the local Service Bus, configured like a real namespace."""

from __future__ import annotations

import logging

import pytest

from servicebus_emulator import QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from syphon.app.cli import main

pytestmark = pytest.mark.timeout(120)


def test_provision_command(
    servicebus_emulator: EmulatorFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    secondary = servicebus_emulator()
    monkeypatch.setenv("SYPHON_SECONDARY_CONNECTION_STRING", secondary.connection_string)
    # every command reads and checks every secret first, the primary's too
    monkeypatch.setenv("SYPHON_PRIMARY_CONNECTION_STRING", secondary.connection_string)
    monkeypatch.setenv("SYPHON__SECONDARY__MANAGEMENT_ENDPOINT", secondary.admin_endpoint)
    monkeypatch.setenv("SYPHON__SECONDARY__CA_BUNDLE", secondary.ca_bundle)
    monkeypatch.setenv("SYPHON__BACKLOG__QUEUE_COUNT", "3")
    with caplog.at_level(logging.DEBUG):
        assert main(["provision"]) == 0
        first = capsys.readouterr().out
        secondary.broker.declare(QueueSpec("syphon-primary/x-servicebus-transfer/5"))
        assert main(["provision"]) == 0
        second = capsys.readouterr().out
    assert "syphon-primary: 3 created" in first
    assert "created syphon-primary/x-servicebus-transfer/2" in first
    assert "syphon-primary: 0 created, 3 already there, 1 extra" in second
    assert "warning: syphon-primary/x-servicebus-transfer/5: extra backlog queue" in second
    assert "done: 1 warning(s)" in second
    # never a secret in the output or the log
    key = "SAS_KEY_VALUE"
    assert key not in first + second + caplog.text
    assert secondary.connection_string not in first + second + caplog.text


def test_provision_reports_an_unreachable_management_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "Endpoint=sb://127.0.0.1:9;SharedAccessKeyName=k;SharedAccessKey=TOPSECRET;"
    monkeypatch.setenv("SYPHON_SECONDARY_CONNECTION_STRING", secret)
    monkeypatch.setenv("SYPHON_PRIMARY_CONNECTION_STRING", secret)
    monkeypatch.setenv("SYPHON__SECONDARY__MANAGEMENT_ENDPOINT", "127.0.0.1:9")
    assert main(["provision"]) == 7
    err = capsys.readouterr().err
    assert "syphon provision: failed (ServiceRequestError: " in err  # and its own words
    assert (
        "fix: the secondary namespace syphon-secondary cannot be reached at 127.0.0.1:9: check "
        "the Endpoint of secondary.connection_string or secondary.management_endpoint "
        "(127.0.0.1:9), DNS, the network and the firewall"
    ) in err
    assert "TOPSECRET" not in err
