"""The storage boundary: the only package that imports ``deltalake`` or ``pyarrow.fs``.

The audit store (one interface, :class:`~syphon.store.audit.AuditStore`, two backends
chosen once by :func:`syphon.store.backend.open_store`), the run ledger, the lease and
the reports' files.
"""
