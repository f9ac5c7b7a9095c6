"""The class-data-sharing archive of syphon's local sessions (syphon.app.classarchive):
made by the first session of an environment when its process ends, used by the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from syphon.app.classarchive import ARCHIVE_ENV, archive_folder, class_archive, environment_key

#: The sessions' JVMs are quick ones (client compiler, serial collector), as a small run's
#: are: what is tested is the archive's life, not the compiler's work (about 9 CPU-s less).
QUICK = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

SESSION_SCRIPT = """
import sys
from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
conf = {"spark.driver.extraJavaOptions": sys.argv[1]} if sys.argv[1] else {}
spark = build_spark_session(SparkConfig(master="local[1]", conf=conf))
options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
assert spark.range(100).repartition(3).count() == 100
print(options, flush=True)
"""


def _session(folder: Path, java_options: str = "") -> str:
    """A process that starts a local session and runs a shuffle; its JVM options."""
    done = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT, java_options],
        env={**os.environ, ARCHIVE_ENV: str(folder)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_first_session_writes_the_archive_at_its_end_and_the_next_starts_from_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "archives"
    first = _session(folder, QUICK)
    assert "-XX:ArchiveClassesAtExit=" in first
    (archive,) = folder.iterdir()  # moved into place; no partial file left
    assert archive.name == f"spark-{environment_key()}.jsa"
    assert archive.stat().st_size > 1_000_000

    # the next session maps its classes from it (the JVM says where each class came from)
    loaded = tmp_path / "classes.log"
    second = _session(folder, f"{QUICK} -Xlog:class+load=info:file={loaded}")
    assert f"-XX:SharedArchiveFile={archive}" in second
    assert "ArchiveClassesAtExit" not in second
    lines = loaded.read_text().splitlines()
    from_archive = [line for line in lines if "shared objects file (top)" in line]
    assert any("org.apache.spark.SparkContext " in line for line in from_archive)
    assert len(from_archive) > 1000
    assert list(folder.iterdir()) == [archive]


def test_a_config_with_its_own_class_sharing_or_the_switch_off_gets_no_archive(
    tmp_path: Path,
) -> None:
    env = {ARCHIVE_ENV: str(tmp_path)}
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/x.jsa", "-XX:ArchiveClassesAtExit=/y"):
        assert class_archive(f"-Xmx1g {own}", env) is None
    assert class_archive("-Xmx1g", {ARCHIVE_ENV: "off"}) is None
    assert class_archive("-Xmx1g", {ARCHIVE_ENV: "OFF"}) is None
    made = class_archive("-Xmx1g", env)
    assert made is not None
    assert made.path.parent == tmp_path
    assert made.java_options().startswith(f"-XX:ArchiveClassesAtExit={made.partial} ")
    made.path.write_bytes(b"x")
    assert made.java_options().startswith(f"-XX:SharedArchiveFile={made.path} -Xshare:auto")


def test_the_folder_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert archive_folder({ARCHIVE_ENV: str(tmp_path)}) == tmp_path
    assert archive_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "syphon" / "jvm"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert archive_folder({}) == tmp_path / "home" / ".cache" / "syphon" / "jvm"


def test_partial_archives_of_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dead = tmp_path / f"spark-0123456789abcdef.{gone}.partial"
    alive = tmp_path / f"spark-0123456789abcdef.{os.getppid()}.partial"
    dead.write_bytes(b"half")
    alive.write_bytes(b"half")
    assert class_archive("", {ARCHIVE_ENV: str(tmp_path)}) is not None
    assert not dead.exists()
    assert alive.exists()  # a process still writing keeps its own
