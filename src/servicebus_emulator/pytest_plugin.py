"""pytest fixtures for the local Service Bus.

Enable with ``pytest_plugins = ["servicebus_emulator.pytest_plugin"]`` in a conftest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from servicebus_emulator.entities import QueueSpec, TopicSpec
from servicebus_emulator.server import Emulator

EmulatorFactory = Callable[..., Emulator]


@pytest.fixture
def servicebus_emulator() -> Iterator[EmulatorFactory]:
    """A factory: ``servicebus_emulator(QueueSpec("q"), TopicSpec("t", …), ...)`` starts
    a fresh local Service Bus with those entities; every one started is stopped after
    the test. Keyword arguments go to :class:`Emulator`."""
    started: list[Emulator] = []

    def start(*entities: QueueSpec | TopicSpec, **kwargs: object) -> Emulator:
        queues = [e for e in entities if isinstance(e, QueueSpec)]
        topics = [e for e in entities if isinstance(e, TopicSpec)]
        emulator = Emulator(queues=queues, topics=topics, **kwargs).start()  # type: ignore[arg-type]
        started.append(emulator)
        return emulator

    yield start
    for emulator in started:
        emulator.stop()
