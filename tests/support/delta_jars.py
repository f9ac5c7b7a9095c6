"""Delta Lake's jars for Spark (delta-spark), fetched once by the set-up, never at a
session's start.

``./dev.sh test`` runs ``python tests/support/delta_jars.py``: Maven (``mvn
dependency:copy``, no transitive dependencies: Spark brings the rest) copies the two jars
into the environment (``.venv/delta-jars``) and each is checked against the SHA-256
pinned here. The tests' sessions then load them from there (``spark.jars``) with Delta's
session extension and catalog, so the suite runs offline after the set-up and no test
worker resolves anything.

The jars are the Delta release of the installed Spark's line (:data:`LINES`): delta-spark
4.4.0 for Spark 4.2 (4.4.1, which the notes name, is not served here), 4.0.1 for Spark 4.0
(the version leg, ``./dev.sh test``). The Python package, ``delta-spark==4.4.0``
(``pyspark>=4.0.1,<=4.2.0``), is pinned in pyproject.toml and serves both: it carries no
jars.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Delta's release for each Spark line the tests run on (its jars: (artifact, SHA-256)):
#: Spark 4.2 is Delta 4.4's line; Spark 4.0 (Databricks Runtime 17.3 LTS) Delta 4.0's,
#: whose newest release Maven Central serves here is 4.0.1.
LINES = {
    "4.2": (
        "4.4.0",
        (
            (
                "delta-spark_2.13",
                "27d4fd8b1f879535c573ed1c718177d6a27f24d3e626ba02e216369725721ead",
            ),
            ("delta-storage", "c46735481fa8e326b0957be02b4420cbcab4b325bb08009b7f2045a95133f1cc"),
        ),
    ),
    "4.0": (
        "4.0.1",
        (
            (
                "delta-spark_2.13",
                "a1e76860b19fe1e6b205a4ea7a9099a2f9575d39bb71d49b3e679b299d0efb91",
            ),
            ("delta-storage", "ecc42c5aaa51c423312d9e4e48aa4a12b34740bf2c37de0e8f279277ec3d12e4"),
        ),
    ),
}


def spark_line() -> str:
    """The installed PySpark's line (``4.2``), read from its metadata (nothing imported)."""
    from importlib.metadata import version

    return ".".join(version("pyspark").split(".")[:2])


def _artifacts(line: str) -> tuple[tuple[str, str, str, str], ...]:
    """(group, artifact, version, SHA-256 of the jar) of Delta's jars for Spark ``line``.

    Raises:
        KeyError: no Delta release is pinned for that line.
    """
    release, jars = LINES[line]
    return tuple(("io.delta", artifact, release, digest) for artifact, digest in jars)


#: (group, artifact, version, SHA-256 of the jar) for the installed Spark.
ARTIFACTS = _artifacts(spark_line())
VERSION = ARTIFACTS[0][2]

#: Where the set-up keeps them (inside the environment they belong to).
FOLDER = Path(sys.prefix) / "delta-jars"


def jar_paths(folder: Path = FOLDER) -> list[Path]:
    """The jars as the set-up left them (whether or not they are there)."""
    return [folder / f"{artifact}-{version}.jar" for _, artifact, version, _ in ARTIFACTS]


def fetched(folder: Path = FOLDER) -> bool:
    """Whether every jar is there with its pinned digest."""
    return all(
        path.is_file() and _sha256(path) == digest
        for path, (*_, digest) in zip(jar_paths(folder), ARTIFACTS, strict=True)
    )


def session_conf(folder: Path = FOLDER) -> dict[str, str]:
    """What a local session needs to read and write Delta tables through Spark."""
    return {
        "spark.jars": ",".join(str(p) for p in jar_paths(folder)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # a table's log is replayed in this many tasks (50 by default: 50 tasks a read of
        # a few commits' state)
        "spark.databricks.delta.snapshotPartitions": "1",
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(folder: Path = FOLDER) -> None:
    """Copies the jars into ``folder`` with Maven and checks their digests.

    Raises:
        RuntimeError: Maven failed, or a jar's digest is not the pinned one.
    """
    if fetched(folder):
        return
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as staging:
        for group, artifact, version, digest in ARTIFACTS:
            done = subprocess.run(
                [
                    "mvn",
                    "-q",
                    "-B",
                    "dependency:copy",
                    f"-Dartifact={group}:{artifact}:{version}:jar",
                    f"-DoutputDirectory={staging}",
                ],
                capture_output=True,
                text=True,
                check=False,
                cwd=staging,
            )
            jar = Path(staging) / f"{artifact}-{version}.jar"
            if done.returncode != 0 or not jar.is_file():
                raise RuntimeError(
                    f"mvn could not copy {group}:{artifact}:{version}: {done.stdout[-2000:]}"
                )
            if _sha256(jar) != digest:
                raise RuntimeError(f"{jar.name}: SHA-256 {_sha256(jar)} is not the pinned {digest}")
            shutil.move(str(jar), folder / jar.name)


if __name__ == "__main__":  # python tests/support/delta_jars.py: fetch them (the set-up)
    fetch()
