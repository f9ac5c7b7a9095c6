"""Where the audit, the ledger, the lease and the reports are kept, and how to reach it.

One abstraction serves all four: delta-rs's object store, configured by its
``storage_options``. The Delta commits (the audit's, the ledger's and the lease's, whose
guarantee rests on the store's atomic create-if-absent) must go through delta-rs anyway;
the data files and the reports go through the same object store, as a pyarrow file
system (:class:`deltalake.fs.DeltaStorageHandler`), so a location is configured once —
one URI grammar, one set of credentials — and reached the same way by the driver and by
every executor, with no Hadoop connector on the cluster. pyarrow's own Azure file system
was the alternative: it needs the ADLS endpoint even for Blob storage, knows only Azure
AD credentials of its own making, and a process ending with one open can abort.

A :class:`Location` carries its storage options, secrets included: it is built at the
entry point (:func:`syphon.app.storage.resolve_location`) and handed to Spark's tasks
with them, but its ``repr`` shows none, and nothing writes them anywhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from syphon.core.storage_uri import StorageUri, parse_storage_path

if TYPE_CHECKING:
    from pyarrow import fs as pafs  # type: ignore[import-untyped]

#: The scope of an Azure AD token for Azure Storage.
STORAGE_SCOPE = "https://storage.azure.com/.default"

#: A token is asked for again when it has less than this left (seconds).
_TOKEN_MARGIN = 300

#: The buffer between a write and the object store's stream, and the largest piece
#: handed to it at once (below the buffer: see :meth:`Location.write_bytes`).
_WRITE_BUFFER = 1 << 20
_WRITE_PIECE = 1 << 18

#: Returns a bearer token for storage (an Azure AD credential's, cached until near expiry).
TokenSource = Callable[[], str]


@dataclass(frozen=True)
class Location:
    """A folder: local, or on object storage.

    Attributes:
        uri: what delta-rs is given (an absolute local path, or a URI).
        shown: the location as configured, for messages and printed paths.
        options: delta-rs storage options, secrets included (never shown).
        token: with an Azure AD credential, where a fresh bearer token comes from.
    """

    uri: str
    shown: str
    options: Mapping[str, str] = field(default_factory=dict, repr=False)
    token: TokenSource | None = field(default=None, repr=False, compare=False)

    @property
    def local(self) -> bool:
        return "://" not in self.uri

    def child(self, *parts: str) -> Location:
        """The folder ``parts`` below this one."""
        tail = "/".join(p.strip("/") for p in parts)
        return replace(
            self, uri=_join(self.uri, tail, local=self.local), shown=_join(self.shown, tail)
        )

    def storage_options(self) -> dict[str, str]:
        """The options to give delta-rs now (with a current token, when there is one)."""
        options = dict(self.options)
        if self.token is not None:
            options["bearer_token"] = self.token()
        return options

    def for_tasks(self) -> Location:
        """This location as Spark's tasks get it: the options with the current token
        (a task runs minutes, a token lasts an hour or more), and nothing unpicklable."""
        return Location(self.uri, self.shown, self.storage_options())

    def filesystem(self) -> pafs.FileSystem:
        """A pyarrow file system rooted at this folder (paths below are relative)."""
        from deltalake.fs import DeltaStorageHandler
        from pyarrow import fs as pafs

        if self.local:
            os.makedirs(self.uri, exist_ok=True)  # the local object store wants its root
        return pafs.PyFileSystem(DeltaStorageHandler(self.uri, self.storage_options()))

    def is_table(self) -> bool:
        """Whether a Delta table has been created here."""
        from deltalake import DeltaTable

        if self.local and not os.path.isdir(self.uri):
            return False
        return bool(DeltaTable.is_deltatable(self.uri, self.storage_options()))

    def write_bytes(self, name: str, data: bytes) -> str:
        """Writes ``data`` to ``name`` below this folder, whole or not at all; returns its
        shown location.

        The bytes go to a hidden name beside it first and are moved into place once all
        are written, so that a reader never takes a part-written or empty file for the
        real one; a write that fails removes what it wrote. An existing ``name`` is
        replaced.
        """
        import pyarrow as pa

        filesystem = self.filesystem()
        parent, _, leaf = name.rpartition("/")
        if parent:
            filesystem.create_dir(parent, recursive=True)
        partial = f"{parent}/" if parent else ""
        partial += f".{leaf}.{uuid.uuid4().hex[:12]}.partial"
        try:
            # The object store's raw stream takes only ``bytes``; a buffered stream hands
            # it bytes as long as no single write reaches the buffer's size (a larger one
            # goes straight through as a pyarrow Buffer, which it refuses): write in
            # pieces below that size.
            with pa.BufferedOutputStream(
                filesystem.open_output_stream(partial), _WRITE_BUFFER
            ) as out:
                view = memoryview(data)
                for start in range(0, len(view), _WRITE_PIECE):
                    out.write(view[start : start + _WRITE_PIECE])
            filesystem.move(partial, name)
        except BaseException:
            with contextlib.suppress(Exception):
                filesystem.delete_file(partial)
            raise
        return self.child(name).shown

    def read_bytes(self, name: str) -> bytes:
        with self.filesystem().open_input_stream(name) as stream:
            return bytes(stream.read())

    def file_names(self, folder: str) -> list[str]:
        """The names of the files directly in ``folder`` below this one, sorted (none
        when it does not exist); creates nothing."""
        from pyarrow import fs as pafs

        selector = pafs.FileSelector(folder, allow_not_found=True)
        infos = self.filesystem().get_file_info(selector)
        return sorted(i.path.rsplit("/", 1)[-1] for i in infos if i.type == pafs.FileType.File)

    def remove_tree(self, folder: str) -> None:
        """Removes ``folder`` below this one and everything in it (nothing when it does
        not exist)."""
        from pyarrow import fs as pafs

        filesystem = self.filesystem()
        selector = pafs.FileSelector(folder, allow_not_found=True, recursive=True)
        for info in filesystem.get_file_info(selector):
            if info.type == pafs.FileType.File:
                filesystem.delete_file(info.path)
        if self.local:  # an object store has no folders; a local file system keeps them
            shutil.rmtree(os.path.join(self.uri, folder), ignore_errors=True)


def _join(base: str, tail: str, local: bool = False) -> str:
    if not tail:
        return base
    if local:
        return os.path.join(base, tail)
    return f"{base.rstrip('/')}/{tail}"


def as_location(where: Location | str | os.PathLike[str]) -> Location:
    """``where`` as a Location: a local path or a URI given as text has no options."""
    if isinstance(where, Location):
        return where
    text = os.fspath(where)
    parsed = parse_storage_path(text)
    return Location(parsed.uri, parsed.uri if parsed.local else text, account_option(parsed))


def account_option(parsed: StorageUri) -> dict[str, str]:
    """The storage option naming the Azure account a URI names (none for others)."""
    return {"azure_storage_account_name": parsed.account} if parsed.account else {}


class CachedToken:
    """An Azure AD token for storage, asked for again only when near its expiry."""

    def __init__(self, fetch: Callable[[], Any]) -> None:
        self._fetch = fetch
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_on = 0.0

    def __call__(self) -> str:
        with self._lock:
            if self._token is None or self._expires_on - time.time() < _TOKEN_MARGIN:
                access = self._fetch()
                self._token, self._expires_on = access.token, float(access.expires_on)
            return self._token

    def __repr__(self) -> str:
        return "CachedToken(...)"
