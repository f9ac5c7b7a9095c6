"""A command closes its Spark Connect client's channel as it ends
(:func:`syphon.core.sessions.close_client`); a classic session is left to its JVM's exit.

The sessions here are stand-ins named as PySpark names its Connect session: what the
close does to a real client is exercised by every ``syphon`` process of
tests/job/test_connect_runs.py, whose commands end through it."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from syphon.core.sessions import close_client, is_connect


class _Client:
    def __init__(self, fails: bool = False) -> None:
        self.closed = 0
        self.fails = fails

    def close(self) -> None:
        self.closed += 1
        if self.fails:
            raise RuntimeError("the channel is gone")


def _connect_session(client: _Client) -> Any:
    kind = type("SparkSession", (), {"__module__": "pyspark.sql.connect.session"})
    session = kind()
    session.client = client
    return session


def _classic_session(client: _Client) -> Any:
    kind = type("SparkSession", (), {"__module__": "pyspark.sql.session"})
    session = kind()
    session.client = client  # a classic session has none: never reached for
    return session


def test_a_connect_sessions_channel_is_closed() -> None:
    client = _Client()
    session = _connect_session(client)
    assert is_connect(session)
    close_client(session)
    assert client.closed == 1


def test_a_classic_session_and_no_session_are_left_alone() -> None:
    client = _Client()
    close_client(_classic_session(client))
    close_client(None)
    assert client.closed == 0


def test_a_channel_that_does_not_close_cleanly_ends_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _Client(fails=True)
    with caplog.at_level(logging.DEBUG, logger="syphon.core.sessions"):
        close_client(_connect_session(client))  # no exception: the command's outcome stands
    assert client.closed == 1
    assert "did not close cleanly: RuntimeError" in caplog.text


def test_the_command_closes_the_session_it_started(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``syphon provision`` with a stand-in context whose session was started: the
    command's end closes it, whatever the command did."""
    from syphon.app import cli

    client = _Client()
    session = _connect_session(client)

    class _Started:
        started = session

    class _Context:
        spark = _Started()

    monkeypatch.setattr(cli, "_config", lambda args: object())
    monkeypatch.setattr(cli, "build_context", lambda config, dbutils_get: _Context())
    monkeypatch.setattr(cli, "_provision", lambda ctx, count: 0)
    assert cli.main(["provision"]) == 0
    assert client.closed == 1

    def fails(ctx: Any, count: Any) -> int:
        raise RuntimeError("provisioning failed")

    monkeypatch.setattr(cli, "_provision", fails)
    assert cli.main(["provision"]) != 0
    assert client.closed == 2
