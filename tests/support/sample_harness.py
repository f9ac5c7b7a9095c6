"""Runs one official azure-servicebus sample against the local Service Bus.

    python tests/support/sample_harness.py PATH_TO_SAMPLE.py

The samples authenticate with Azure AD (``DefaultAzureCredential``) against a fully
qualified namespace. Azure AD cannot run here, so this harness stands in for it, and
only for it: ``azure.identity``'s credentials become a dummy, and both
``ServiceBusClient`` classes (sync and async) are pointed at the emulator named by
``SAMPLE_EMULATOR_ENDPOINT`` (host:port) with its shared key and without TLS, exactly
what ``from_connection_string`` does for an emulator connection string. Both
``ServiceBusAdministrationClient`` classes are pointed at the emulator's HTTPS
management API (``SAMPLE_EMULATOR_ADMIN_ENDPOINT``) with the same key, trusting the
emulator's CA (``SAMPLE_EMULATOR_CA``): the service would be on port 443 with a
public certificate. Everything else in the sample runs unchanged.

tests/emulator/test_sdk_samples.py runs each sample with :func:`run_in_child` in a process
forked from a server that imported this module (and so the SDK) once: a fresh
interpreter per sample spent about 0.4 CPU-s importing the SDK, 49 times.
"""

from __future__ import annotations

import io
import os
import runpy
import sys
from pathlib import Path
from typing import Any

import azure.identity
import azure.identity.aio
import azure.servicebus
import azure.servicebus.aio
import azure.servicebus.aio.management
import azure.servicebus.management
from azure.core.credentials import AccessToken
from azure.servicebus import ServiceBusClient as SyncClient
from azure.servicebus._base_handler import ServiceBusSharedKeyCredential
from azure.servicebus.aio import ServiceBusClient as AsyncClient
from azure.servicebus.aio._base_handler_async import (
    ServiceBusSharedKeyCredential as AsyncSharedKeyCredential,
)
from azure.servicebus.aio.management import (
    ServiceBusAdministrationClient as AsyncAdminClient,
)
from azure.servicebus.management import ServiceBusAdministrationClient as SyncAdminClient

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


def _endpoint() -> str:
    return os.environ["SAMPLE_EMULATOR_ENDPOINT"]


def _admin_endpoint() -> str:
    return os.environ["SAMPLE_EMULATOR_ADMIN_ENDPOINT"]


def _ca_bundle() -> str:
    return os.environ["SAMPLE_EMULATOR_CA"]


class DummyCredential:
    """Stands in for an Azure AD credential; never used to sign anything."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("emulator", 2**31 - 1)

    async def __aenter__(self) -> DummyCredential:
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None

    def __enter__(self) -> DummyCredential:
        return self

    def __exit__(self, *args: Any) -> None:
        return None

    def close(self) -> None:
        return None


class EmulatorClient(SyncClient):
    def __init__(self, fully_qualified_namespace: str, credential: Any, **kwargs: Any) -> None:
        kwargs["use_tls"] = False
        super().__init__(_endpoint(), ServiceBusSharedKeyCredential(KEY_NAME, KEY), **kwargs)


class AsyncEmulatorClient(AsyncClient):
    def __init__(self, fully_qualified_namespace: str, credential: Any, **kwargs: Any) -> None:
        kwargs["use_tls"] = False
        super().__init__(_endpoint(), AsyncSharedKeyCredential(KEY_NAME, KEY), **kwargs)


class EmulatorAdminClient(SyncAdminClient):
    def __init__(self, fully_qualified_namespace: str, credential: Any, **kwargs: Any) -> None:
        kwargs.setdefault("connection_verify", _ca_bundle())
        super().__init__(_admin_endpoint(), ServiceBusSharedKeyCredential(KEY_NAME, KEY), **kwargs)


class AsyncEmulatorAdminClient(AsyncAdminClient):
    def __init__(self, fully_qualified_namespace: str, credential: Any, **kwargs: Any) -> None:
        kwargs.setdefault("connection_verify", _ca_bundle())
        super().__init__(_admin_endpoint(), AsyncSharedKeyCredential(KEY_NAME, KEY), **kwargs)


def install() -> None:
    """Points the SDK's clients at the emulator and Azure AD's credentials at a dummy."""
    azure.servicebus.management.ServiceBusAdministrationClient = EmulatorAdminClient  # type: ignore[misc]
    azure.servicebus.aio.management.ServiceBusAdministrationClient = AsyncEmulatorAdminClient  # type: ignore[misc]
    for module in (azure.identity, azure.identity.aio):
        module.DefaultAzureCredential = DummyCredential  # type: ignore[misc,assignment]
    azure.servicebus.ServiceBusClient = EmulatorClient  # type: ignore[misc]
    azure.servicebus.aio.ServiceBusClient = AsyncEmulatorClient  # type: ignore[misc]


def run(sample: str) -> None:
    """Runs ``sample`` as its ``__main__``, as ``python sample`` would, on the emulator."""
    install()
    sys.argv = [sample]
    runpy.run_path(sample, run_name="__main__")


def run_in_child(sample: str, env: dict[str, str], stdout: str, stderr: str) -> None:
    """:func:`run` in a forked process: ``env`` as its whole environment, its output to
    the files ``stdout`` and ``stderr`` (a multiprocessing target: the process exits 1
    with the traceback on ``stderr`` when the sample raises)."""
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, stdout), (2, stderr)):
        with Path(path).open("wb") as file:
            os.dup2(file.fileno(), fd)
    sys.stdout, sys.stderr = _unbuffered(1), _unbuffered(2)
    run(sample)


def _unbuffered(fd: int) -> io.TextIOWrapper:
    """A text stream writing straight through to ``fd``, as Python's own are under
    ``PYTHONUNBUFFERED``: samples print from several threads at once, and a buffered
    stream shared by threads wrote stray bytes among their lines."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", write_through=True)


if __name__ == "__main__":
    run(sys.argv[1])
