"""The Java a local session runs on, read from its installation's ``release`` file
(nothing is started): an option only some versions know is given only to those, and an
installation that does not say its version gets none of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from syphon.app.java import java_executable, java_version, trims_native_heap


def installation(root: Path, release: str | None) -> Path:
    """A Java installation under ``root`` whose ``release`` file says ``release``."""
    (root / "bin").mkdir(parents=True)
    java = root / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    if release is not None:
        (root / "release").write_text(release)
    return java


def test_the_version_is_the_release_files(tmp_path: Path) -> None:
    java = installation(
        tmp_path / "jdk",
        'IMPLEMENTOR="Debian"\nJAVA_RUNTIME_VERSION="17.0.15+6-Debian-1deb12u1"\n'
        'JAVA_VERSION="17.0.15"\nLIBC="gnu"\n',
    )
    assert java_version(str(java)) == (17, 0, 15)
    assert java_version(str(installation(tmp_path / "jdk22", 'JAVA_VERSION="22"\n'))) == (22,)


@pytest.mark.parametrize("release", [None, "", 'JAVA_VERSION=""\n', 'IMPLEMENTOR="x"\n'])
def test_an_installation_that_does_not_say_has_no_version(
    tmp_path: Path, release: str | None
) -> None:
    assert java_version(str(installation(tmp_path / "jdk", release))) is None
    assert java_version(None) is None


@pytest.mark.parametrize(
    ("version", "trims"),
    [
        ((17, 0, 8), False),
        ((17, 0, 9), True),
        ((17, 0, 15), True),
        ((18,), False),
        ((20, 0, 2), False),
        ((21,), False),
        ((21, 0, 1), True),
        ((22,), True),
        ((25, 0, 1), True),
        (None, False),
        ((), False),
    ],
)
def test_only_the_versions_that_know_it_trim_their_c_heap(
    version: tuple[int, ...] | None, trims: bool
) -> None:
    assert trims_native_heap(version) is trims


def test_java_home_names_the_java_spark_starts(tmp_path: Path) -> None:
    java = installation(tmp_path / "jdk", 'JAVA_VERSION="21.0.4"\n')
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "jdk")
    found = java_executable({"JAVA_HOME": str(link)})
    assert found == os.path.realpath(java)
    assert java_version(found) == (21, 0, 4)
    assert java_executable({"JAVA_HOME": str(tmp_path / "none")}) is None


def test_this_machines_java_starts_with_the_options_it_is_given() -> None:
    from syphon.app.spark import WAVE_JAVA_OPTIONS, WAVE_TRIM_OPTIONS

    java = java_executable()
    assert java is not None, "the set-up installs Java"
    options = WAVE_JAVA_OPTIONS.split()
    if trims_native_heap(java_version(java)):
        options += WAVE_TRIM_OPTIONS.split()
    done = subprocess.run(
        [java, *options, "-XX:+PrintFlagsFinal", "-version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    flags = {line.split()[1]: line.split()[3] for line in done.stdout.splitlines() if " = " in line}
    trims = trims_native_heap(java_version(java))
    assert (flags.get("TrimNativeHeapInterval") == "5000") is trims
