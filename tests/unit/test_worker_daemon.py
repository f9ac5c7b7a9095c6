"""The Python workers' daemon of local sessions puts the installed PySpark ahead of the
zips Spark lists first, and only when those zips are that installation's own; it forks
its workers with one thread."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from syphon.app.worker_daemon import ONE_THREAD, installed_first


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


def _without_one_thread(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by this interpreter in an environment without :data:`ONE_THREAD`'s
    names (the daemon sets them itself), checked to exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in ONE_THREAD}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_daemon_forks_its_workers_with_one_thread() -> None:
    """The daemon prepared as it runs (its preloads imported) has one thread, so a fork
    copies no lock another thread holds, and every preload imports (none is misnamed).
    With warnings as errors the fork itself goes through: Python 3.12 warns when a
    multi-threaded process forks."""
    from syphon.app.worker_daemon import PRELOADED

    script = (
        "import os, sys, threading, warnings\n"
        "from syphon.app import worker_daemon\n"
        "worker_daemon.prepare()\n"
        "missing = [n for n in worker_daemon.PRELOADED if n not in sys.modules]\n"
        "threads = len(os.listdir('/proc/self/task'))\n"
        "warnings.simplefilter('error')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print(threading.active_count(), threads, len(missing))\n"
    )
    done = _without_one_thread(script)
    python_threads, threads, missing = (int(n) for n in done.stdout.split())
    assert missing == 0
    assert python_threads == 1
    assert threads == 1
    assert len(PRELOADED) >= 10


def test_without_its_settings_the_preloads_start_native_threads() -> None:
    """What :data:`ONE_THREAD` stops: the same imports, without it, start threads (so
    the test above can fail)."""
    from syphon.app.worker_daemon import PRELOADED

    script = (
        "import os, sys\n"
        "for name in sys.argv[1:]:\n"
        "    __import__(name)\n"
        "print(len(os.listdir('/proc/self/task')))\n"
    )
    assert int(_without_one_thread(script, *PRELOADED).stdout) > 1
