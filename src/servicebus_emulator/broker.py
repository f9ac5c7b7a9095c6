"""The broker: a namespace's queues, topics and subscriptions, their messages and every
rule Service Bus applies to them.

Pure Python and protocol-free: the AMQP layer (``amqp.py``) turns frames into calls on
:class:`Broker` and :class:`~servicebus_emulator.model.BrokerError` into AMQP error
conditions. One re-entrant lock guards all state, so any thread may call in (the fault
API does), and one :class:`~servicebus_emulator.clock.Clock` tells the time.

The broker is built in layers, one module each, every layer using only those below it:
:mod:`~servicebus_emulator.namespace` (entities, rules, faults),
:mod:`~servicebus_emulator.sending` (partitions, quotas, duplicates, fan-out,
forwarding, scheduling), :mod:`~servicebus_emulator.settlement` (receive, locks,
settlement, expiry, dead-lettering, peek, deferral) and
:mod:`~servicebus_emulator.sessions`. What it stores lives in
:mod:`~servicebus_emulator.store` and :mod:`~servicebus_emulator.model`.
"""

from __future__ import annotations

from servicebus_emulator.sessions import Sessions


class Broker(Sessions):
    """All entities of one namespace and the operations on them.

    Args:
        queues: the queues that exist from the start.
        auto_create: create unknown queues on first use instead of failing like the
            service does.
        topics: the topics (with their subscriptions and rules) that exist from the start.
        keys: the namespace's shared access keys.
        clock: what the broker reads the time from (the wall clock by default; a
            :class:`~servicebus_emulator.clock.ManualClock` in tests that move time).
    """
