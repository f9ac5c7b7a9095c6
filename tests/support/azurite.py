"""Azurite, the Azure Storage emulator (Blob service), for the audit on object storage.

``./dev.sh test`` installs it from the npm registry at the version ``tests/services/
package-lock.json`` pins (into ``tests/services/node_modules``). Each test worker starts
one on a free loopback port, in memory, with an account whose key is random (no
well-known key anywhere); each test makes its own container. Azurite serves Blob storage
only (no ADLS ``dfs`` endpoint): ``abfss://`` URIs reach it because delta-rs's object
store speaks the Blob API for them too, with ``audit.storage.endpoint`` pointing at it.

Containers are made and SAS tokens signed here with the storage service's shared-key
scheme (only the tests need either; syphon never creates a container).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.utils import formatdate
from pathlib import Path
from urllib.parse import quote

SERVICES = Path(__file__).resolve().parents[1] / "services"
BINARY = SERVICES / "node_modules" / ".bin" / "azurite-blob"
ACCOUNT = "syphonaudit"
SAS_VERSION = "2021-08-06"


@dataclass
class Azurite:
    """A running Azurite Blob service."""

    process: subprocess.Popen[bytes]
    port: int
    key: str
    account: str = ACCOUNT

    @property
    def endpoint(self) -> str:
        """The account's Blob endpoint (path-style, as emulators serve it)."""
        return f"http://127.0.0.1:{self.port}/{self.account}"

    def new_container(self) -> str:
        """Creates a container with a fresh name and returns the name."""
        name = f"c{uuid.uuid4().hex[:20]}"
        self.request("PUT", f"/{name}", {"restype": "container"})
        return name

    def request(self, verb: str, path: str, query: dict[str, str]) -> int:
        """A shared-key signed request without a body; returns the status."""
        date = formatdate(usegmt=True)
        headers = {"x-ms-date": date, "x-ms-version": SAS_VERSION}
        canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()))
        resource = f"/{self.account}/{self.account}{path}" + "".join(
            f"\n{k}:{v}" for k, v in sorted(query.items())
        )
        to_sign = f"{verb}\n" + "\n" * 11 + canonical_headers + resource
        headers["Authorization"] = f"SharedKey {self.account}:{self._sign(to_sign)}"
        target = f"/{self.account}{path}?" + "&".join(f"{k}={v}" for k, v in query.items())
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request(verb, target, headers={**headers, "Content-Length": "0"})
            answer = connection.getresponse()
            answer.read()
        finally:
            connection.close()
        if answer.status >= 300:
            raise RuntimeError(f"Azurite answered {answer.status} {answer.reason} to {verb} {path}")
        return int(answer.status)

    def account_sas(self, permissions: str = "racwdl", hours: int = 2) -> str:
        """An account SAS for the Blob service (containers and objects)."""
        expiry = (datetime.now(timezone.utc) + timedelta(hours=hours)).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        fields = [
            self.account,
            permissions,
            "b",
            "co",
            "",
            expiry,
            "",
            "http,https",
            SAS_VERSION,
            "",
        ]
        signature = self._sign("\n".join(fields) + "\n")
        return (
            f"sv={SAS_VERSION}&ss=b&srt=co&sp={permissions}&se={quote(expiry)}"
            f"&spr=http,https&sig={quote(signature, safe='')}"
        )

    def _sign(self, text: str) -> str:
        digest = hmac.new(base64.b64decode(self.key), text.encode("utf-8"), hashlib.sha256)
        return base64.b64encode(digest.digest()).decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)  # in memory: nothing to flush
        self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before it runs Azurite: a SIGKILL when the test process ends, however
    it ends (Linux's PR_SET_PDEATHSIG), so no Azurite outlives a crashed test run."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def start_azurite() -> Azurite:
    """Starts Azurite's Blob service on a free loopback port and waits until it answers."""
    if not BINARY.exists():
        raise RuntimeError(f"{BINARY} is missing: ./dev.sh test installs it (npm ci in {SERVICES})")
    key = base64.b64encode(secrets.token_bytes(64)).decode()
    port = free_port()
    process = subprocess.Popen(
        [
            str(BINARY),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--silent",
            "--skipApiVersionCheck",
            "--disableProductStyleUrl",
        ],
        env={**os.environ, "AZURITE_ACCOUNTS": f"{ACCOUNT}:{key}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_die_with_parent,
    )
    azurite = Azurite(process, port, key)
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"Azurite exited with {process.returncode} before answering")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return azurite
        except OSError:
            if time.monotonic() > deadline:
                azurite.stop()
                raise
            time.sleep(0.05)


#: The environment variable the tests' configs reference for the account key.
KEY_ENV = "SYPHON_TEST_STORAGE_KEY"


@dataclass
class BlobAudit:
    """A fresh container on the worker's Azurite, for one test's audit."""

    azurite: Azurite
    container: str

    def uri(self, scheme: str = "az", folder: str = "audit") -> str:
        """The audit folder's URI in one of the spellings syphon takes."""
        account, container = self.azurite.account, self.container
        return {
            "az": f"az://{container}/{folder}",
            "abfss": f"abfss://{container}@{account}.dfs.core.windows.net/{folder}",
            "wasbs": f"wasbs://{container}@{account}.blob.core.windows.net/{folder}",
        }[scheme]

    def audit_yaml(self, scheme: str = "az", folder: str = "audit") -> str:
        """The config's audit section (its lines, indented) with the key as a reference."""
        account = f"\n    account: {self.azurite.account}" if scheme == "az" else ""
        return (
            f'  path: "{self.uri(scheme, folder)}"\n'
            f"  storage:\n    account_key: {{env: {KEY_ENV}}}\n"
            f'    endpoint: "{self.azurite.endpoint}"{account}'
        )

    def options(self) -> dict[str, str]:
        """The storage options syphon makes of :meth:`audit_yaml`."""
        return {
            "azure_storage_account_name": self.azurite.account,
            "azure_storage_account_key": self.azurite.key,
            "azure_storage_endpoint": self.azurite.endpoint,
            "allow_http": "true",
        }
