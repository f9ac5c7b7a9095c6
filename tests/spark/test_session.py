import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from support.jvm import java_options
from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
from syphon.core.errors import SparkSetupError


@pytest.mark.spark
def test_the_session_runs_in_utc_with_microsecond_parquet_timestamps(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    # a local session's own two partitions, or what the last run in it sized them to
    from syphon.job.context import FITTED_SHUFFLE_PARTITIONS

    assert spark.conf.get("spark.sql.shuffle.partitions") == spark.conf.get(
        FITTED_SHUFFLE_PARTITIONS
    )
    assert spark.conf.get("spark.sql.shuffle.partitions") != "200"
    assert spark.range(3).count() == 3


@pytest.mark.spark
def test_a_local_sessions_jvm_keeps_little_memory_of_finished_work(spark: SparkSession) -> None:
    """Two glibc arenas for the JVM's threads (read back from the JVM process's own
    environment) and a short memory of finished jobs and queries (nothing shows them)."""
    pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"MALLOC_ARENA_MAX=2" in environ
    assert int(spark.conf.get("spark.sql.ui.retainedExecutions")) <= 20
    assert int(spark.sparkContext.getConf().get("spark.ui.retainedJobs")) <= 100


@pytest.mark.spark
def test_pyspark_reads_the_local_session_as_one_without_dataframe_debugging(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark decides once per process, from the active session's settings, whether a
    column operation records its Python line in the JVM (eight round trips each)."""
    from pyspark.errors import utils

    monkeypatch.setattr(utils, "_enable_debugging_cache", None)  # as in a fresh process
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    assert utils.is_debugging_enabled() is False


@pytest.mark.spark
def test_a_second_build_joins_the_running_session(spark: SparkSession) -> None:
    again = build_spark_session(SparkConfig(master="local[2]", conf={"spark.app.id.x": "1"}))
    assert again.sparkContext is spark.sparkContext


def test_a_local_session_without_java_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SparkSetupError, match="Java is not installed") as info:
        build_spark_session(SparkConfig(master="local[1]"))
    assert info.value.fix is not None
    assert "apt-get install -y default-jre-headless" in info.value.fix
    assert info.value.exit_code == 4


def test_without_pyspark_the_error_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # import fails as if not installed
    with pytest.raises(SparkSetupError, match="PySpark is not installed") as info:
        build_spark_session(SparkConfig(master="local[1]"))
    assert info.value.fix is not None
    assert "pip install 'syphon[local]'" in info.value.fix
    assert info.value.exit_code == 4


SCRATCH_SCRIPT = """
import sys, time
from pyspark import StorageLevel
from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
conf = {"spark.shuffle.compress": "false", "spark.rdd.compress": "false",
        "spark.driver.extraJavaOptions": sys.argv[2]}
spark = build_spark_session(SparkConfig(master="local[2]", conf=conf))
marker = sys.argv[1].encode()
bodies = spark.sparkContext.parallelize([marker * 50 + bytes([i]) for i in range(200)], 4)
bodies.persist(StorageLevel.DISK_ONLY).count()  # blocks on disk
bodies.map(lambda b: (b[-1] % 3, b)).groupByKey().count()  # and a shuffle
print(spark.conf.get("spark.local.dir"), flush=True)
time.sleep(600)
"""


def test_a_killed_sessions_scratch_files_hold_no_clear_body_and_the_next_start_removes_them(
    tmp_path: Path,
) -> None:
    from syphon.app.spark import clean_stale_scratch

    marker = "BODY-MARKER-" + "q" * 20
    root = tmp_path / "scratch"
    process = subprocess.Popen(
        [sys.executable, "-c", SCRATCH_SCRIPT, marker, java_options()],
        env={**os.environ, "SYPHON_SPARK_SCRATCH": str(root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        folder = Path(process.stdout.readline().strip())
        assert folder.parent == root
        files = [p for p in folder.rglob("*") if p.is_file() and p.stat().st_size > 0]
        assert any("shuffle" in p.name for p in files)
        assert any(p.name.startswith("rdd_") for p in files)
        assert not [p for p in files if marker.encode() in p.read_bytes()]  # encrypted
        assert clean_stale_scratch(root) == []  # a live session's folder stays
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert folder.is_dir()  # a killed session cleans nothing up ...
    assert clean_stale_scratch(root) == [folder]  # ... the next start does
    assert not folder.exists()


JVM_GONE_SCRIPT = """
import os, signal, sys
from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
from syphon.job.failures import explain
spark = build_spark_session(SparkConfig(master="local[1]",
                                        conf={"spark.driver.extraJavaOptions": sys.argv[1]}))
spark.range(3).count()
proc = spark.sparkContext._gateway.proc
os.kill(proc.pid, signal.SIGKILL)
proc.wait()
try:
    spark.range(3).count()
except Exception as exc:
    failure = explain(exc)
    print(type(exc).__name__, int(failure.code), failure.why, sep="\\n")
    print(failure.fix)
"""


def test_a_session_whose_jvm_died_is_told_apart_from_an_unreachable_namespace() -> None:
    """The first Spark call after the JVM died (an OutOfMemoryError, the OOM killer) finds
    Py4J's port closed: a ConnectionRefusedError, which by its name alone would read as an
    unreachable namespace (exit 7). The failure names Spark's JVM and the driver's memory."""
    from syphon.core.errors import ExitCode
    from syphon.job.failures import SPARK_GONE_FIX

    done = subprocess.run(
        [sys.executable, "-c", JVM_GONE_SCRIPT, java_options()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout + done.stderr[-2000:]
    assert lines[0] == "ConnectionRefusedError"
    assert int(lines[1]) == ExitCode.FAILED
    assert lines[2].startswith("Spark's JVM is gone: "), lines[2]
    assert lines[3] == SPARK_GONE_FIX


CLEAN_EXIT_SCRIPT = """
import sys
from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
spark = build_spark_session(SparkConfig(master="local[1]",
                                        conf={"spark.driver.extraJavaOptions": sys.argv[1]}))
spark.range(100).repartition(3).count()  # a shuffle: files in the scratch folder
print(spark.conf.get("spark.local.dir"), flush=True)
"""


def test_a_session_that_ends_normally_leaves_no_scratch_folder(tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    done = subprocess.run(
        [sys.executable, "-c", CLEAN_EXIT_SCRIPT, java_options()],
        env={**os.environ, "SYPHON_SPARK_SCRATCH": str(root)},
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.parent == root
    assert not folder.exists()
    assert list(root.iterdir()) == []


def test_only_a_folder_with_scratch_files_in_it_is_reported_as_ended_uncleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from syphon.app.spark import clean_stale_scratch

    root = tmp_path / "scratch"
    empty, killed = root / "session-1-aaaaaaaa", root / "session-2-bbbbbbbb"
    for folder in (empty, killed):
        folder.mkdir(parents=True)
        (folder / ".syphon-session.lock").write_text("")
    (killed / "blockmgr-1").mkdir()
    (killed / "blockmgr-1" / "shuffle_0_0_0.data").write_bytes(b"x")
    with caplog.at_level(logging.DEBUG, logger="syphon.app.spark"):
        assert clean_stale_scratch(root) == [empty, killed]
    unclean = [r.getMessage() for r in caplog.records if "uncleanly" in r.getMessage()]
    assert unclean == [f"removed the scratch folder of a session that ended uncleanly: {killed}"]
    assert list(root.iterdir()) == []


@contextlib.contextmanager
def settings_kept(spark: SparkSession, *keys: str) -> Iterator[None]:
    """The session's ``keys`` as they were before, whatever the block set (the session is
    shared by the worker's tests)."""
    kept = {k: spark.conf.get(k, None) for k in keys}
    try:
        yield
    finally:
        for k, value in kept.items():
            if value is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, value)


def test_a_run_sizes_its_shuffles_to_its_backlog_unless_the_operator_chose(
    spark: SparkSession,
) -> None:
    from syphon.job.context import FITTED_SHUFFLE_PARTITIONS, fit_shuffle_partitions

    key = "spark.sql.shuffle.partitions"
    with settings_kept(spark, key, FITTED_SHUFFLE_PARTITIONS):
        spark.conf.set(key, "200")  # Spark's default, as on a cluster nobody tuned
        # a small backlog: one partition, whatever the cores
        assert fit_shuffle_partitions(spark, 6, {}) == 1
        assert spark.conf.get(key) == "1"
        # the next run in the same session sizes its shuffles again: the value is syphon's
        assert fit_shuffle_partitions(spark, 1_000_001, {}) == 201
        assert spark.conf.get(key) == "201"
        assert fit_shuffle_partitions(spark, 5_001, {}) == 2
        assert fit_shuffle_partitions(spark, 5_000, {}) == 1
        # the operator's choice wins: in the config, or in the session's settings
        spark.conf.set(key, "200")
        assert fit_shuffle_partitions(spark, 1_000_001, {key: "200"}) is None
        assert spark.conf.get(key) == "200"
        spark.conf.set(key, "7")
        assert fit_shuffle_partitions(spark, 1_000_001, {}) is None
        assert spark.conf.get(key) == "7"


def test_a_small_first_wave_is_planned_without_generated_code_unless_the_operator_chose(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run in waves plans its small first wave interpreted and the next waves compiled
    (syphon.job.context.fit_code_generation); the operator's setting, in the config or
    in the session, wins."""
    from syphon.job.context import COMPILED_CONF, FITTED_CODEGEN, fit_code_generation

    key = "spark.sql.codegen.wholeStage"

    def compiled() -> bool:
        """Whether a query's physical plan has stages of generated code (``*(1)``)."""
        spark.range(10).selectExpr("id * 2 AS x").where("x > 3").explain()
        return "*(" in capsys.readouterr().out

    with settings_kept(spark, *COMPILED_CONF, FITTED_CODEGEN):
        for k, value in COMPILED_CONF.items():  # Spark's defaults: a cluster nobody tuned
            spark.conf.set(k, value)
        spark.conf.unset(FITTED_CODEGEN)
        assert compiled()
        assert fit_code_generation(spark, True, {})  # the first wave
        assert spark.conf.get(key) == "false"
        assert not compiled()
        assert fit_code_generation(spark, False, {})  # the next: as Spark's default again
        assert spark.conf.get(key) == "true"
        assert compiled()
        # the operator's choice wins: in the config's spark.conf, or in the session
        assert not fit_code_generation(spark, True, {key: "true"})
        assert spark.conf.get(key) == "true"
        spark.conf.set(key, "false")  # the operator's, or a quick start's session
        spark.conf.unset(FITTED_CODEGEN)
        assert not fit_code_generation(spark, False, {})
        assert spark.conf.get(key) == "false"


def test_a_stage_that_talks_to_service_bus_takes_a_task_per_share_of_messages(
    spark: SparkSession,
) -> None:
    """At most one task per core, at least one; the cores when the count is unknown. The
    session's cores are its default parallelism (one in the tests' session)."""
    from syphon.job.context import service_tasks, tasks_for

    assert [tasks_for(n, 1_000, 2) for n in (0, 1, 1_000, 1_001, 10**6)] == [1, 1, 1, 2, 2]
    assert [tasks_for(n, 1_000, 4) for n in (2_500, 3_001, 10**6)] == [3, 4, 4]
    assert tasks_for(None, 1_000, 2) == 2
    assert tasks_for(2, 1, 2) == 2
    assert tasks_for(1, 1, 2) == 1
    assert tasks_for(5, 1, 0) == 1  # a session that says no cores still takes one task
    cores = spark.sparkContext.defaultParallelism
    assert service_tasks(spark, None, 1_000) == cores
    assert service_tasks(spark, 10**6, 1) == cores
    assert service_tasks(spark, 0, 1_000) == 1


def test_an_error_raised_in_the_jvm_is_told_by_its_java_exception(spark: SparkSession) -> None:
    """Py4J's first line names only the call that met an error in the JVM ("An error
    occurred while calling o98.filter."): a failure's why is the Java exception's line
    (a missing Delta catalog read as a call to ``filter`` before)."""
    from py4j.protocol import Py4JJavaError

    from syphon.job.failures import explain

    with pytest.raises(Py4JJavaError) as raised:  # one PySpark does not convert
        spark._jvm.java.lang.Class.forName("no.such.Catalog")  # type: ignore[union-attr]
    assert str(raised.value).startswith("An error occurred while calling")
    failure = explain(raised.value)
    assert failure.why is not None
    assert failure.why.startswith("java.lang.ClassNotFoundException: no.such.Catalog"), failure.why
