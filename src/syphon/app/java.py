"""The Java a local session's JVM runs on: the executable Spark starts (``JAVA_HOME``'s,
else the ``java`` on the path) and its version, read from the ``release`` file of its
installation (nothing is started to ask it), so that a JVM option only some versions
know is given only to those (an option a JVM does not know stops it from starting)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

#: The first versions of each line whose JVM trims its C heap on a timer
#: (``-XX:TrimNativeHeapInterval``: JDK 22, backported to 21.0.1 and 17.0.9).
_TRIMS_FROM = {17: (17, 0, 9), 21: (21, 0, 1)}
_TRIMS_EVERYWHERE_FROM = 22
_VERSION = re.compile(r'^JAVA_VERSION="(\d+(?:\.\d+)*)', re.MULTILINE)


def java_executable(environ: Mapping[str, str] | None = None) -> str | None:
    """The real path of the ``java`` Spark starts, or None when there is none."""
    environ = os.environ if environ is None else environ
    home = environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    return os.path.realpath(java)


def java_version(executable: str | None) -> tuple[int, ...] | None:
    """The version of the Java installation ``executable`` belongs to (``17.0.15`` is
    ``(17, 0, 15)``), from its ``release`` file; None when it has none that says."""
    if executable is None:
        return None
    try:
        release = (Path(executable).parent.parent / "release").read_text(errors="replace")
    except OSError:
        return None
    found = _VERSION.search(release)
    return tuple(int(part) for part in found.group(1).split(".")) if found else None


def trims_native_heap(version: tuple[int, ...] | None) -> bool:
    """Whether a JVM of ``version`` knows ``-XX:TrimNativeHeapInterval`` (False when
    the version is unknown)."""
    if not version:
        return False
    if version[0] >= _TRIMS_EVERYWHERE_FROM:
        return True
    first = _TRIMS_FROM.get(version[0])
    return first is not None and version >= first
