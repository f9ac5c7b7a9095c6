"""A local Azure Service Bus that the unmodified ``azure-servicebus`` SDK talks to.

Test and demo infrastructure: the ``syphon`` package never imports it. AMQP 1.0 on
Apache Qpid Proton, plain TCP on loopback, reached with an emulator connection string
(``UseDevelopmentEmulator=true``). See this package's README for what it implements.
"""

from servicebus_emulator.auth import AccessKey
from servicebus_emulator.clock import ManualClock
from servicebus_emulator.entities import QueueSpec, SubscriptionSpec, TopicSpec, load_entities
from servicebus_emulator.filters import (
    CorrelationFilter,
    FalseFilter,
    RuleSpec,
    SqlAction,
    SqlFilter,
    TrueFilter,
)
from servicebus_emulator.server import Emulator

__all__ = [
    "AccessKey",
    "CorrelationFilter",
    "Emulator",
    "FalseFilter",
    "ManualClock",
    "QueueSpec",
    "RuleSpec",
    "SqlAction",
    "SqlFilter",
    "SubscriptionSpec",
    "TopicSpec",
    "TrueFilter",
    "load_entities",
]
