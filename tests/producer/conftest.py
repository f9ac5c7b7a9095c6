"""Fixtures of the producer-side tests."""

from __future__ import annotations

import pytest

from paired_env import Pair, make_pair
from servicebus_emulator.pytest_plugin import EmulatorFactory


@pytest.fixture
def pair(servicebus_emulator: EmulatorFactory) -> Pair:
    """A primary (orders, sessions, topic events) and a provisioned secondary."""
    return make_pair(servicebus_emulator)
