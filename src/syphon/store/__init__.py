"""The storage boundary: the only package that imports ``deltalake`` or ``pyarrow.fs``.
The audit store (one interface, two backends), the run ledger, the lease, the reports'
files."""
