"""The official azure-servicebus samples, fetched once at set-up and cached.

``./dev.sh test`` runs ``python tests/support/sdk_samples.py`` before the suite: it
downloads the SDK's source archive (the version ``requirements.lock`` pins, checked
against the lock's hashes) from the package index into the tests' cache
(``$XDG_CACHE_HOME/syphon-tests``, default ``~/.cache/syphon-tests``) and unpacks its
``samples`` folder. The tests only read the cache, so they run offline.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "azure-servicebus"


def pinned() -> tuple[str, list[str]]:
    """The SDK's version and sha256 hashes in ``requirements.lock``."""
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    block = re.search(rf"^{PACKAGE}==(\S+)((?:\s*\\\n\s+--hash=sha256:\w+)+)", text, re.M)
    if block is None:
        raise LookupError(f"{PACKAGE} is not pinned with hashes in requirements.lock")
    return block.group(1), re.findall(r"sha256:(\w+)", block.group(2))


def cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "syphon-tests"


def samples_dir() -> Path:
    """Where the samples of the pinned version are (present once fetched)."""
    version, _ = pinned()
    return cache() / f"azure_servicebus-{version}" / "samples"


def fetch() -> Path:
    """Downloads and unpacks the samples unless they are cached; returns their folder."""
    root = samples_dir()
    if root.is_dir():
        return root
    version, hashes = pinned()
    folder = cache()
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        requirement = Path(scratch) / "sdk.txt"
        pins = " ".join(f"--hash=sha256:{h}" for h in hashes)
        requirement.write_text(f"{PACKAGE}=={version} {pins}\n", encoding="utf-8")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--disable-pip-version-check",
                "--no-binary",
                ":all:",
                "--no-deps",
                "--require-hashes",
                "-r",
                str(requirement),
                "-d",
                scratch,
            ],
            check=True,
            timeout=300,
        )
        (archive,) = Path(scratch).glob("azure_servicebus-*.tar.gz")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/samples/" in m.name]
            tar.extractall(folder, members=members, filter="data")
    return root


if __name__ == "__main__":
    print(fetch())
