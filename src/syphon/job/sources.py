"""The source a run drains (``syphon run --source NAME``): where its queues are, how they
are found, and how their messages are restored (DESIGN.md, "Sources").

- ``backlog``: the paired-namespace backlog queues in the secondary namespace, found as
  ``backlog`` configures; each message's destination and envelope from its aliases.
- ``dead_letter``: the dead-letter sub-queues of named entities of a primary, found by a
  peek each; each message goes back to its entity (or the entity's target) in that
  primary (:func:`syphon.job.reconcile.restore_redriven`). The settle completes
  what was sent and leaves everything else where it is: a dead-letter queue's message
  cannot be dead-lettered again, and one that is not sent is never removed.
"""

from __future__ import annotations

from dataclasses import dataclass

from syphon.core.config import SourceConfig
from syphon.job.context import RunContext
from syphon.job.reconcile import Redrive
from syphon.servicebus.access import Access
from syphon.servicebus.discovery import (
    DiscoveredQueue,
    discover_backlog,
    discover_dead_letters,
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

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def redrive(self) -> Redrive | None:
        """Where its messages go, for a dead-letter source (None: a backlog source)."""
        if self.config.kind != "dead_letter":
            return None
        assert self.config.namespace is not None
        return Redrive(self.config.namespace, dict(self.config.targets))

    def discover(self, ctx: RunContext) -> list[DiscoveredQueue]:
        """Its queues, empty ones included (no Spark)."""
        if self.config.kind == "dead_letter":
            return discover_dead_letters(self.access, self.config.entities)
        primaries = [p.namespace for p in ctx.config.primaries]
        return discover_backlog(self.access, primaries, ctx.config.backlog)


def run_source(ctx: RunContext, name: str | None = None) -> RunSource:
    """The source ``name`` of the config (None: ``backlog``, or the only one).

    Raises:
        ConfigError: no such source.
    """
    config = ctx.config.source_named(name)
    if config.kind == "dead_letter":
        assert config.namespace is not None
        return RunSource(config, ctx.namespaces.primary(config.namespace))
    return RunSource(config, ctx.namespaces.secondary)
