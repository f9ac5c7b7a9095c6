"""pytest fixtures for the local Service Bus.

Enable with ``pytest_plugins = ["servicebus_emulator.pytest_plugin"]`` in a conftest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from servicebus_emulator.entities import QueueSpec
from servicebus_emulator.server import Emulator

EmulatorFactory = Callable[..., Emulator]


@pytest.fixture
def servicebus_emulator() -> Iterator[EmulatorFactory]:
    """A factory: ``servicebus_emulator(QueueSpec("q"), ...)`` starts a fresh local
    Service Bus with those queues; every one started is stopped after the test."""
    started: list[Emulator] = []

    def start(*queues: QueueSpec, auto_create: bool = False) -> Emulator:
        emulator = Emulator(queues=queues, auto_create=auto_create).start()
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()
