"""The source a run drains (``syphon run --source NAME``): where its queues are, how they
are found, and how their messages are restored.

- ``backlog``: the paired-namespace backlog queues in the secondary namespace, found as
  ``backlog`` configures; each message's destination and envelope from its aliases.
- ``dead_letter``: the dead-letter sub-queues of entities of a primary (the named ones,
  each found by a peek; or every queue's and the targeted subscriptions', found by
  listing them); each message goes back to its entity (or the entity's target) in that
  primary.
- ``namespace``: the queues of another namespace (a failed-over primary), their active
  messages and, with ``dead_letters``, their dead-letter sub-queues; each message goes to
  the entity of the same name (or its target) in the configured primary.

Both of the last restore a message from the message itself
(:func:`syphon.job.restore.restore_redriven`). The settle decides by the queue a
message was read from (:func:`syphon.job.settle.actions.settle_actions`): in a dead-letter queue
it completes what was sent and leaves everything else (a dead letter cannot be
dead-lettered again, and one that is not sent is never removed); an active queue is
settled as a backlog queue is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from syphon.core.config import SourceConfig
from syphon.core.errors import ConfigError
from syphon.core.naming import dead_letter_path, transfer_dead_letter_path
from syphon.job.context import RunContext
from syphon.job.restore import Redrive
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import (
    DiscoveredQueue,
    discover_backlog,
    list_entities,
    listed_queues,
    probe_entities,
)


@dataclass(frozen=True)
class RunSource:
    """A configured source with the namespace its queues are in.

    Attributes:
        config: the source's configuration.
        access: the namespace its queues are read from and settled in (never shown).
    """

    config: SourceConfig
    access: Access
    #: the management listings its discoveries took (one entry per discovery)
    listings: list[int] = field(default_factory=list, compare=False)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def redrive(self) -> Redrive | None:
        """Where its messages go (None: a backlog source, whose messages say it)."""
        if self.config.kind == "backlog":
            return None
        assert self.config.namespace is not None
        return Redrive(self.config.namespace, dict(self.config.targets))

    def sends_to(self, ctx: RunContext) -> list[str]:
        """The primaries its messages go to: every configured one for a backlog (each
        message names its own), else the source's namespace."""
        if self.config.kind == "backlog":
            return [p.namespace for p in ctx.config.primaries]
        assert self.config.namespace is not None
        return [self.config.namespace]

    @property
    def reads_active(self) -> bool:
        """Whether it reads entities' active messages (else their dead letters)."""
        return self.config.kind == "namespace"

    @property
    def reads_dead_letters(self) -> bool:
        return self.config.kind == "dead_letter" or self.config.dead_letters

    @property
    def reads_transfer_dead_letters(self) -> bool:
        """Whether it reads entities' transfer dead-letter queues (a dead-letter source,
        unless its config turns them off)."""
        return self.config.kind == "dead_letter" and self.config.transfer_dead_letters

    def paths(self, entities: list[str]) -> list[str]:
        """The queues it reads of ``entities``: each's own, its dead-letter queue (and
        transfer dead-letter queue), or both."""
        out: list[str] = []
        for entity in entities:
            if self.reads_active:
                out.append(entity)
            if self.reads_dead_letters:
                out.append(dead_letter_path(entity))
            if self.reads_transfer_dead_letters:
                out.append(transfer_dead_letter_path(entity))
        return out

    def discover(self, ctx: RunContext) -> list[DiscoveredQueue]:
        """Its queues, empty ones included (no Spark)."""
        if self.config.kind == "backlog":
            primaries = [p.namespace for p in ctx.config.primaries]
            return discover_backlog(self.access, primaries, ctx.config.backlog)
        what = f"the {self.kind.replace('_', '-')} source {self.name}"
        if self.config.entities:
            return probe_entities(self.access, self.paths(list(self.config.entities)), what)
        # every queue and subscription, by listing them with their counts
        listed, calls = list_entities(self.access)
        self.listings.append(calls)
        missing = sorted(set(self.config.targets) - {q.path for q in listed})
        if missing:
            message = f"{what}'s entity {missing[0]!r} does not exist in {self.access.namespace}"
            raise ConfigError(message, fix=f"{message}: correct the source's targets")
        return listed_queues(
            listed,
            self.reads_active,
            self.reads_dead_letters,
            self.access.namespace,
            set(self.config.targets),
            self.reads_transfer_dead_letters,
        )


def run_source(ctx: RunContext, name: str | None = None) -> RunSource:
    """The source ``name`` of the config (None: ``backlog``, or the only one).

    Raises:
        ConfigError: no such source.
        SecretError: a namespace source's secret is unset or malformed.
    """
    config = ctx.config.source_named(name)
    if config.kind == "dead_letter":
        assert config.namespace is not None
        return RunSource(config, ctx.namespaces.primary(config.namespace))
    if config.kind == "namespace":
        return RunSource(config, ctx.namespaces.drained_by(config.name))
    return RunSource(config, ctx.namespaces.backlog_namespace())
