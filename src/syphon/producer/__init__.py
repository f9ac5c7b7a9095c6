"""The producer half: the paired-namespace sender.

:class:`PairedNamespaceClient` (in :mod:`syphon.producer.client`) hands out
:class:`PairedSender` objects; the backlog form of a message is built by
:func:`syphon.servicebus.backlog_messages.to_backlog_message`.
"""

from syphon.producer.client import PairedNamespaceClient
from syphon.producer.options import (
    BacklogMessageTooLargeError,
    BacklogUnavailableError,
    PairedClientClosedError,
    PairedCounters,
    PairedNamespaceError,
    SendAvailabilityOptions,
    SendRoute,
)
from syphon.producer.sender import PairedSender

__all__ = [
    "BacklogMessageTooLargeError",
    "BacklogUnavailableError",
    "PairedClientClosedError",
    "PairedCounters",
    "PairedNamespaceClient",
    "PairedNamespaceError",
    "PairedSender",
    "SendAvailabilityOptions",
    "SendRoute",
]
