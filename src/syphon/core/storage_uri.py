"""What an ``audit.path`` names: a local folder, or a folder on object storage.

syphon's tables, lease and reports go through delta-rs's object store
(:mod:`syphon.store.location`), which takes local paths, ``file://``, ``az://``,
``abfs[s]://``, ``s3://`` and ``gs://`` URIs. This module checks a configured path once,
when the config is read, and turns the spellings the object store does not take into
ones it does: ``wasb[s]://container@account.blob.core.windows.net/path`` (Hadoop's Blob
URI) becomes ``az://container/path`` with the account beside it. Nothing here touches
the network.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

#: Schemes an ``audit.path`` may have (besides none: a local path).
SCHEMES = ("file", "abfss", "abfs", "wasbs", "wasb", "az", "s3", "s3a", "gs")

_AZURE = ("abfss", "abfs", "wasbs", "wasb", "az")


@dataclass(frozen=True)
class StorageUri:
    """A checked ``audit.path``.

    Attributes:
        uri: what delta-rs and its object store are given: an absolute local path, or a
            URI with a scheme they know.
        account: the Azure storage account the URI names (``abfss://`` and ``wasbs://``
            do; ``az://`` does not), else None.
        local: whether it is a folder of this machine's file system.
        azure: whether it is on Azure storage.
    """

    uri: str
    account: str | None = None
    local: bool = False
    azure: bool = False


class StorageUriError(ValueError):
    """An ``audit.path`` that names no folder syphon can use; the message says why."""


def parse_storage_path(path: str) -> StorageUri:
    """Checks ``path`` and returns what the object store is given for it.

    Raises:
        StorageUriError: an unknown scheme, a URI with a query or fragment (a SAS goes in
            ``audit.storage.sas_token``, never in the path), a Hadoop-style Azure URI
            without its container or account, or a URI without a bucket or container.
    """
    text = path.strip()
    if "://" not in text:
        return StorageUri(os.path.abspath(text), local=True)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise StorageUriError(
            f"scheme {scheme}:// is not one syphon writes to (use a local path or one of "
            f"{', '.join(s + '://' for s in SCHEMES)})"
        )
    if parts.query or parts.fragment:
        raise StorageUriError(
            "must not carry a query or fragment (a SAS token goes in audit.storage.sas_token "
            "as a secret reference, never in the path)"
        )
    folder = parts.path.rstrip("/")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StorageUriError(f"file:// names another host ({parts.netloc})")
        return StorageUri(os.path.abspath(unquote(folder) or "/"), local=True)
    if scheme not in _AZURE:
        if not parts.netloc:
            raise StorageUriError(f"{scheme}:// needs a bucket: {scheme}://bucket/path")
        return StorageUri(f"{scheme}://{parts.netloc}{folder}")
    if scheme == "az":
        if not parts.netloc or "@" in parts.netloc:
            raise StorageUriError("az:// needs a container: az://container/path")
        return StorageUri(f"az://{parts.netloc}{folder}", azure=True)
    container, at, host = parts.netloc.partition("@")
    kind = "dfs" if scheme.startswith("abfs") else "blob"
    account = host.split(".", 1)[0]
    if not (at and container and account and f".{kind}." in host):
        raise StorageUriError(
            f"{scheme}:// needs a container and an account: "
            f"{scheme}://container@account.{kind}.core.windows.net/path"
        )
    if kind == "blob":  # the object store knows Blob storage as az://
        return StorageUri(f"az://{container}{folder}", account=account, azure=True)
    return StorageUri(f"{scheme}://{container}@{host}{folder}", account=account, azure=True)
