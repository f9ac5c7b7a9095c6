"""The Python workers' daemon of local sessions puts the installed PySpark ahead of the
zips Spark lists first, and only when those zips are that installation's own."""

from __future__ import annotations

import zipfile
from pathlib import Path

from syphon.app.worker_daemon import installed_first


def installed_pyspark(site: Path) -> Path:
    """A pip-installed PySpark under ``site``: the package and its zips."""
    home = site / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "__init__.py").write_text("", encoding="utf-8")
    for name in ("pyspark.zip", "py4j-0.10.9.9-src.zip"):
        with zipfile.ZipFile(home / "python" / "lib" / name, "w"):
            pass
    return home


def test_the_installed_pysparks_own_zips_go_behind_the_installed_packages(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site-packages"
    lib = installed_pyspark(site) / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    path = ["/work", *zips, "/opt/jars/spark-core.jar", str(site)]
    assert installed_first(path) == ["/work", "/opt/jars/spark-core.jar", str(site), *zips]


def test_zips_of_another_spark_keep_their_place(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    installed_pyspark(site)
    other = installed_pyspark(tmp_path / "cluster") / "python" / "lib"
    path = [str(other / "pyspark.zip"), str(other / "py4j-0.10.9.9-src.zip"), str(site)]
    assert installed_first(path) == path


def test_without_an_installed_pyspark_the_path_is_as_spark_set_it(tmp_path: Path) -> None:
    lib = tmp_path / "spark" / "python" / "lib"
    path = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(tmp_path / "empty")]
    assert installed_first(path) == path
    assert installed_first(["/work", str(tmp_path)]) == ["/work", str(tmp_path)]


def test_what_the_daemon_preloads_imports_and_starts_no_thread_of_its_own() -> None:
    import subprocess
    import sys

    from syphon.app.worker_daemon import PRELOADED

    script = (
        "import os, sys, threading\n"
        "import pyarrow\n"
        "arrows = len(os.listdir('/proc/self/task'))\n"
        "for name in sys.argv[1:]:\n"
        "    __import__(name)\n"
        "print(threading.active_count(), arrows, len(os.listdir('/proc/self/task')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *PRELOADED],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr  # each of them imports: none is misnamed
    python_threads, arrows, after = (int(n) for n in done.stdout.split())
    # no Python thread (one holding the interpreter's locks across the fork would leave
    # the worker stuck), and no native thread beyond those Arrow's own import starts
    # (its allocator's and its pool's, which Arrow starts again in a forked child)
    assert python_threads == 1
    assert after == arrows
