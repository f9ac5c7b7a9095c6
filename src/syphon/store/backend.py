"""The one place the audit store's backend is chosen, from the config."""

from __future__ import annotations

from syphon.core.config import AuditConfig
from syphon.store.audit import AuditStore, SparkProvider
from syphon.store.location import Location, as_location


def open_store(
    config: AuditConfig, spark: SparkProvider, location: Location | None = None
) -> AuditStore:
    """The audit store the config asks for: delta-rs tables at ``audit.path``, or catalog
    tables through Spark (``audit.engine: spark``). ``spark`` starts the session when the
    store first needs it; ``location`` is ``audit.path`` with its storage settings
    resolved (:func:`syphon.store.location.resolve_location`; without it, the path alone,
    with the object store's default credentials)."""
    where = location if location is not None else as_location(config.path)
    if config.engine == "spark":
        from syphon.store.catalog import CatalogStore

        assert config.table is not None  # the config requires it with this engine
        return CatalogStore(config.table, config.format, where, spark)
    from syphon.store.deltars import DeltaRsStore

    return DeltaRsStore(where, spark)
