"""The job through ``spark-submit`` (the one in the pyspark package) and the offline
packaging recipe, end to end: ``jobs/pack_env.sh`` builds the wheel and a venv-pack
archive from ``requirements-runtime.lock``, and ``spark-submit --archives`` runs the entry
script ``jobs/syphon_submit.py`` with it against the local Service Bus.

The master is ``local-cluster`` (a standalone worker with its own executor JVM, started
by the pyspark package's scripts), because plain ``local`` mode does not unpack archives
into the executors' working directory: the executors run ``./environment/bin/python``
from the archive, as on YARN or Kubernetes, and the driver runs an unpacked copy of it,
as in cluster deploy mode. Neither has PySpark installed: it comes from spark-submit's
``pyspark.zip``, as on a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.jvm import QUICK
from support.paired_env import Pair, job_config, park_orders

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_the_runtime_lock_is_the_runtime_part_of_the_lock() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "runtime_lock.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr
    text = (ROOT / "requirements-runtime.lock").read_text(encoding="utf-8")
    assert "\nazure-servicebus==7.15.0 " in text
    assert "\ndeltalake==1.6.6 " in text
    for absent in ("pyspark==", "py4j==", "pytest==", "python-qpid-proton=="):
        assert f"\n{absent}" not in text, absent


def test_spark_submit_runs_the_job_from_a_packed_environment(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parked = park_orders(pair, "packed", queues=2, per_queue=3)
    job_config(pair, tmp_path, monkeypatch)  # sets the secrets' variables in os.environ

    # .tar.gz as in the recipe (Spark unpacks a plain .tar in Java, which refuses the
    # venv's absolute interpreter links); gzip level 1 to pack quicker
    archive = tmp_path / "dist" / "syphon-env.tar.gz"
    packed = subprocess.run(
        ["bash", str(ROOT / "jobs" / "pack_env.sh"), str(archive)],
        # quicker than the recipe's defaults, same contents: gzip level 1, and no
        # bytecode compiled at install (PIP_COMPILE=0)
        env={
            **os.environ,
            "PYTHON": sys.executable,
            "PACK_COMPRESS_LEVEL": "1",
            "PIP_COMPILE": "0",
        },
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert packed.returncode == 0, packed.stderr[-3000:]
    assert archive.exists()
    (wheel,) = (tmp_path / "dist").glob("syphon-*.whl")
    # the wheel a cluster installs holds the product only: no local Service Bus, no demo
    with zipfile.ZipFile(wheel) as zipped:
        tops = {name.split("/", 1)[0] for name in zipped.namelist()}
        assert "syphon/app/templates/report.html.j2" in zipped.namelist()
        assert "syphon/app/log4j2.properties" in zipped.namelist()
    assert {t for t in tops if not t.endswith(".dist-info")} == {"syphon"}

    # the driver's copy, unpacked in its working directory as in cluster deploy mode: the
    # driver runs Python code of its own (the run itself, with the archive's packages)
    driver = tmp_path / "environment"
    driver.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(driver)], check=True)
    bare = subprocess.run(
        [str(driver / "bin" / "python"), "-c", "import pyspark"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bare.returncode != 0  # PySpark is not in the archive: the cluster brings it
    assert "No module named 'pyspark'" in bare.stderr
    no_pip = subprocess.run(
        [str(driver / "bin" / "python"), "-c", "import pip"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "No module named 'pip'" in no_pip.stderr  # nor an installer: nothing installs there

    # the cluster's Spark: the pyspark package's distribution, seen through symlinks so
    # that the standalone worker's directory (SPARK_HOME/work) is this test's
    import pyspark

    home = tmp_path / "spark-home"
    home.mkdir()
    for entry in Path(pyspark.__file__).parent.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    work = home / "work"
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": "./environment/bin/python",
        "PYSPARK_DRIVER_PYTHON": "./environment/bin/python",
        "SYPHON__SPARK__MASTER": "null",  # join the session spark-submit configures
    }
    env.pop("PYTHONPATH", None)
    # a cluster's Pythons cache their bytecode: this machine's setting not to would have
    # every process compile pandas and pyarrow again (the archive holds no bytecode)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    result = subprocess.run(
        [
            str(BIN / "spark-submit"),
            "--master",
            "local-cluster[1,2,1024]",
            "--conf",
            "spark.ui.enabled=false",
            "--archives",
            f"{archive}#environment",
            # the tests' quick JVMs (C1 only, serial GC) for the driver and the executor
            "--driver-java-options",
            QUICK,
            "--conf",
            f"spark.executor.extraJavaOptions={QUICK}",
            str(ROOT / "jobs" / "syphon_submit.py"),
            "--log-format",
            "json",
            "run",
            "--config",
            str(tmp_path / "syphon.yaml"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    (tmp_path / "spark-submit.log").write_text(result.stdout + result.stderr, encoding="utf-8")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert ": done" in result.stdout
    received = sorted(
        str(m.message_id) for m in pair.primary.broker.entity("orders").messages.values()
    )
    assert received == sorted(parked)
    # the executor unpacked the archive in its working directory and ran its Python
    pythons = list(work.glob("app-*/*/environment/bin/python"))
    assert pythons, sorted(str(p) for p in work.rglob("*"))[:20]
    assert pair.secondary.connection_string not in result.stdout + result.stderr
