"""A class-data-sharing archive for the JVMs of syphon's local sessions.

A local Spark session's JVM loads and verifies about 10,000 classes before the first
query; that is most of what any PySpark job pays to start. The JVM can map the classes
of an earlier run from an archive instead (class data sharing, JDK 13 and later): the
first local session of an environment runs with ``-XX:ArchiveClassesAtExit`` and, when
its process ends, waits for its JVM to write the archive; every later one starts from
it (``-XX:SharedArchiveFile``). The JVM checks the archive against its own version and
class path and silently ignores one that does not fit (``-Xshare:auto``), so a stale
archive only costs the time back.

The archives live in ``~/.cache/syphon/jvm`` (``$XDG_CACHE_HOME`` is honoured), one per
environment (PySpark's version and jars, the Java executable, the Python prefix);
``SYPHON_CLASS_ARCHIVE`` names another folder, or ``off`` turns the archive off. A
session whose config brings its own archive options (``Xshare``, ``SharedArchiveFile``,
``ArchiveClassesAtExit`` in ``spark.driver.extraJavaOptions``) is left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syphon.app.java import java_executable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The environment variable naming the archives' folder, or ``off``.
ARCHIVE_ENV = "SYPHON_CLASS_ARCHIVE"
#: JVM options that mean the config chose its own class sharing.
_OWN_OPTIONS = ("Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
#: The JVM's notes about class sharing stay out of the run's output.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: How long the first session's process waits at its end for the JVM to write the
#: archive (a few seconds on 2 cores); past it, the archive is left for a later run.
WRITE_SECONDS = 120


@dataclass(frozen=True)
class ClassArchive:
    """The archive of this environment: ``path`` when it exists, else where the session
    writes it (``partial``, moved to ``path`` once the JVM has ended cleanly)."""

    path: Path
    partial: Path

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    def java_options(self) -> str:
        """The options that use the archive, or make it."""
        if self.exists:
            return f"-XX:SharedArchiveFile={self.path} -Xshare:auto {_QUIET}"
        return f"-XX:ArchiveClassesAtExit={self.partial} {_QUIET}"


def archive_folder(environ: dict[str, str] | None = None) -> Path | None:
    """Where this environment's archives live; None when turned off."""
    env = os.environ if environ is None else environ
    chosen = env.get(ARCHIVE_ENV, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "syphon" / "jvm"


def environment_key() -> str | None:
    """What the archive depends on, digested: PySpark's version and jars, the Java
    executable Spark starts (its real path and time stamp), the Python prefix. None when
    there is no Java or no PySpark to describe."""
    try:
        import pyspark
    except ImportError:
        return None
    real = java_executable()
    if real is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    listing = sorted(p.name for p in jars.iterdir()) if jars.is_dir() else []
    parts = [pyspark.__version__, real, str(os.stat(real).st_mtime_ns), sys.prefix, *listing]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def class_archive(java_options: str, environ: dict[str, str] | None = None) -> ClassArchive | None:
    """This environment's archive for a local session whose configured JVM options are
    ``java_options``; None when turned off, when the options choose their own class
    sharing, or when the folder cannot be made."""
    if any(own in java_options for own in _OWN_OPTIONS):
        return None
    folder = archive_folder(environ)
    key = environment_key() if folder is not None else None
    if folder is None or key is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.debug("no class archive: %s", exc)
        return None
    _remove_abandoned(folder)
    return ClassArchive(folder / f"spark-{key}.jsa", folder / f"spark-{key}.{os.getpid()}.partial")


def _remove_abandoned(folder: Path) -> None:
    """Removes the partial archives of processes that are gone (killed while writing)."""
    for partial in folder.glob("spark-*.partial"):
        try:
            pid = int(partial.name.split(".")[-2])
            os.kill(pid, 0)
        except ProcessLookupError:
            partial.unlink(missing_ok=True)
        except (ValueError, PermissionError):
            continue


_registered: list[ClassArchive] = []


def write_at_exit(session: SparkSession, archive: ClassArchive) -> None:
    """Makes the process's end write the archive: it stops the session, ends the JVM
    (its input closed, as when the process ends) and waits for it, then moves the
    archive into place and removes older environments' archives. Two first runs at
    once each write their own and the last move wins; both are whole."""
    if not _registered:
        _registered.append(archive)
        atexit.register(_finish, session, archive)


def _finish(session: SparkSession, archive: ClassArchive) -> None:
    jvm: Any = getattr(session.sparkContext, "_gateway", None)
    proc = getattr(jvm, "proc", None)
    if proc is None:  # a JVM this process did not start: it writes nothing here
        return
    try:
        session.stop()
        proc.stdin.close()
        proc.wait(timeout=WRITE_SECONDS)
    except Exception as exc:  # the archive is only an optimisation
        log.debug("the class archive was not written: %s", exc)
    written = proc.returncode == 0 and archive.partial.is_file()
    with contextlib.suppress(OSError):
        if written and archive.partial.stat().st_size > 0:
            os.replace(archive.partial, archive.path)
            for other in archive.path.parent.glob("spark-*.jsa"):
                if other != archive.path:
                    other.unlink(missing_ok=True)
        archive.partial.unlink(missing_ok=True)
