"""The one place the audit store's backend is chosen, from the config."""

from __future__ import annotations

from syphon.core.config import AuditConfig
from syphon.store.audit import AuditStore, SparkProvider


def open_store(config: AuditConfig, spark: SparkProvider) -> AuditStore:
    """The audit store the config asks for: delta-rs tables at ``audit.path``, or catalog
    tables through Spark (``audit.engine: spark``). ``spark`` starts the session when the
    store first needs it."""
    if config.engine == "spark":
        from syphon.store.catalog import CatalogStore

        assert config.table is not None  # the config requires it with this engine
        return CatalogStore(config.table, config.format, config.path, spark)
    from syphon.store.deltars import DeltaRsStore

    return DeltaRsStore(config.path, spark)
