"""The SDK's client for tests, its senders and receivers opened and closed at the pace of
their frames.

The SDK's sync open sleeps 50 ms between polls of its handler and a poll reads one frame:
the handshake's nine frames make about 0.46 s per link. Its close waits for the link's
keep-alive thread, which sleeps in one-second steps: up to a second more (a receiver
without prefetch always has one). A test that opens a few dozen links waited most of its
time on these sleeps, not on the local Service Bus: ten receivers opened, used and closed
took 20.1 s with the plain client and 6.2 s with this one, on less CPU.
:class:`QuickClient`'s links are made with syphon's own
:func:`syphon.servicebus.raw.lean`, as the job's are: the same frames in the same order,
without the sleeps and without the keep-alive thread (which only listens between receive
calls).

Tests of the SDK's own behaviour keep the plain client: the official samples
(tests/emulator/test_sdk_samples.py) run the SDK unchanged, the async tests use the async
client, and tests/job/test_lean_links.py and tests/job/test_peek_receiver.py compare the
plain SDK's links with syphon's. The producer's own tests run it over the plain client
(``support.paired_env.Pair.client``), as its users build it; a test that only parks an
outage's backlog for a run (``support.paired_env.park_outage``) runs it over this one.
"""

from __future__ import annotations

from typing import Any

from azure.servicebus import ServiceBusClient

from syphon.servicebus.raw import lean


class QuickClient(ServiceBusClient):
    """A ``ServiceBusClient`` whose senders and receivers are :func:`lean`."""

    def get_queue_sender(self, *args: Any, **kwargs: Any) -> Any:
        return lean(super().get_queue_sender(*args, **kwargs))

    def get_topic_sender(self, *args: Any, **kwargs: Any) -> Any:
        return lean(super().get_topic_sender(*args, **kwargs))

    def get_queue_receiver(self, *args: Any, **kwargs: Any) -> Any:
        return lean(super().get_queue_receiver(*args, **kwargs))

    def get_subscription_receiver(self, *args: Any, **kwargs: Any) -> Any:
        return lean(super().get_subscription_receiver(*args, **kwargs))
