"""The one place a SparkSession is built. The session is passed down, never global.

Message bodies pass through Spark's scratch files (shuffle, spill, blocks kept on disk),
so a local session encrypts them (``spark.io.encryption.enabled``) and keeps them in a
scratch folder of its own under ``<tmp>/syphon-spark``, locked while the session lives:
a session killed without cleaning up (SIGKILL) leaves its folder, and the next local
session removes every folder whose lock is free. On a cluster the operator sets the
same encryption (see the README).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import IO, TYPE_CHECKING

from syphon.app.classarchive import class_archive, write_at_exit
from syphon.app.java import java_executable, java_version, trims_native_heap
from syphon.core.config import SecretRef, SparkConfig
from syphon.core.errors import SecretError, SparkSetupError
from syphon.core.sessions import INTERPRETED_CONF, INTERPRETED_MESSAGES, SessionFit, require_spark
from syphon.job.context import FITTED_SHUFFLE_PARTITIONS
from syphon.servicebus.secrets import resolve_secret

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Settings for a local session: fewer partitions, no UI, loopback only, scratch files
#: encrypted; and no long memory of finished jobs: without a UI nothing reads it, and
#: Spark keeps the last thousand jobs, stages and SQL queries (their plans) by default,
#: which a run in waves, a few dozen queries per wave, fills wave after wave.
#:
#: And no DataFrame debugging: with it, PySpark records the Python call site of every
#: column operation in the JVM (for the "DataFrame" context of an error message) at
#: about eight py4j round trips each, a seventh of a small run's CPU. An error raised in
#: a query still names the query; only the Python line is left out. PySpark reads the
#: setting once per process, at the first column built with a session.
#:
#: And the Python workers' daemon imports the installed PySpark, whose bytecode is cached,
#: instead of compiling the sources of the zip Spark puts first on its path, again in every
#: worker (:mod:`syphon.app.worker_daemon`). The figures behind each choice are in
#: (tests/benchmarks/README.md, "Why the settings are what they are").
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "1000",
    "spark.sql.ui.retainedExecutions": "10",
    # until a run sizes its shuffles to its backlog (job.context.fit_shuffle_partitions),
    # which this value, marked as syphon's own, leaves it free to do
    "spark.sql.shuffle.partitions": "2",
    FITTED_SHUFFLE_PARTITIONS: "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.io.encryption.enabled": "true",
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.python.daemon.module": "syphon.app.worker_daemon",
}

#: A local session of a run that expects at most this many messages starts its JVM with
#: the client compiler only and the serial collector: the full JIT compiles for longer
#: than such a run lasts. A larger run (or one whose size is unknown) keeps the full JIT,
#: which the reconcile of a million messages needs; where between the two the full JIT
#: starts to pay is not measured, so the threshold stays well below the million.
QUICK_START_MESSAGES = 100_000

_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

#: The JVM options of a quick start (before the config's own, which win).
QUICK_START_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"

#: The JVM options of a local session of a run in waves (before the config's own): the
#: heap grows only when less than a tenth of it is free after a collection and gives back
#: what is more than a fifth free. A run in waves holds a wave at a time, but the JVM's
#: default policy (grow while less than 40 % is free) let the heap expand wave after
#: wave to its maximum.
WAVE_JAVA_OPTIONS = "-XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=20"

#: The JVM options, after :data:`WAVE_JAVA_OPTIONS`, of a local session of a run in waves
#: on a Java that knows them (:func:`syphon.app.java.trims_native_heap`): glibc keeps what
#: the JVM's threads free (compilations, a wave's buffers) for their next allocations, and
#: a run of many waves kept more of it resident than one wave (tests/benchmarks/README.md,
#: "Why the settings are what they are"); the JVM hands it back every 5 s.
WAVE_TRIM_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:TrimNativeHeapInterval=5000"

#: The settings of a local session of a run in waves whose namespaces do not sign in with
#: Azure AD (the config's own win): each Python task gets a worker of its own, forked from
#: the daemon that holds what the tasks import (syphon.app.worker_daemon). A reused worker
#: keeps what its largest task touched, for every later task of a run of many waves; a
#: worker of its own would fetch an Azure AD token of its own, and a short run would pay
#: a fork for each task (tests/benchmarks/README.md, "Why the settings are what they are").
WAVE_WORKER_CONF: dict[str, str] = {"spark.python.worker.reuse": "false"}

#: The heap of a local session of a run in waves whose wave's bytes are known (the
#: management discovery's queue sizes), unless ``spark.conf`` sets
#: ``spark.driver.memory``: :data:`WAVE_HEAP_BASE_MB` plus a wave's bytes, in steps of
#: :data:`WAVE_HEAP_STEP_MB`, at least :data:`WAVE_HEAP_MIN_MB` (Spark refuses a heap
#: under 450 MB). A wave's frames are on the executors' disk (syphon.job.context.keep), but
#: its messages cross the JVM's heap when the driver hands them to Spark; Spark's default
#: heap (1 GB) kept more resident than a wave needs, and too small a heap runs out or
#: slows the run (tests/benchmarks/README.md, "Why the settings are what they are").
WAVE_HEAP_BASE_MB = 384
WAVE_HEAP_MIN_MB = 512
WAVE_HEAP_STEP_MB = 64
_DRIVER_MEMORY = "spark.driver.memory"

#: The query settings of a quick start (the config's own win).
QUICK_START_CONF: dict[str, str] = {
    "spark.sql.adaptive.enabled": "false",
}

#: Settings syphon relies on wherever it runs.
COMMON_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # Files Spark writes for delta-rs to commit need microsecond timestamps.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Spark keys its Python daemons by their environment, and some of a run's Python
    # tasks set SPARK_SIMPLIFIED_TRACEBACK while others do not: two daemons, each forking
    # workers that import pandas, pyarrow and the SDK (a CPU-second each). Off,
    # every task's environment is the same and one daemon's workers serve the whole run
    # (tests/job/test_python_workers.py). A failed task's traceback then keeps PySpark's
    # own frames.
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
}

#: The environment a local session's JVM (and its Python workers) start with, unless set:
#: glibc's allocator gives each thread that allocates an arena of its own, up to eight per
#: core, and returns little of them; the JVM's many threads kept about 0.1 GB more
#: resident for it (bench_waves.py, 100,000 messages in waves: 1.11 GB for the JVM, 1.01
#: GB with two arenas, the same wall time).
LOCAL_ENVIRONMENT: dict[str, str] = {"MALLOC_ARENA_MAX": "2"}

#: Where local sessions keep their scratch folders.
SCRATCH_ROOT_ENV = "SYPHON_SPARK_SCRATCH"
_LOCK = ".syphon-session.lock"
_kept: list[IO[str]] = []  # the locks of this process's scratch folders, kept until exit


def scratch_root() -> Path:
    """The folder that holds local sessions' scratch folders."""
    return Path(os.environ.get(SCRATCH_ROOT_ENV) or Path(tempfile.gettempdir()) / "syphon-spark")


def clean_stale_scratch(root: Path) -> list[Path]:
    """Removes the scratch folders under ``root`` whose session is gone (their lock is
    free); returns them. A folder that had more than its lock file belonged to a session
    that ended uncleanly (killed, or its process crashed), which is logged; one that had
    only the lock ended cleanly but was not removed, which is not news."""
    removed = []
    for folder in sorted(root.glob("session-*")) if root.is_dir() else []:
        lock = folder / _LOCK
        try:
            with open(lock, "a+") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a live session holds it
        except OSError:
            pass  # no lock file (a folder cut short): nobody holds it
        unclean = any(p.name != _LOCK for p in folder.iterdir()) if folder.is_dir() else False
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        if unclean:
            log.info("removed the scratch folder of a session that ended uncleanly: %s", folder)
        else:
            log.debug("removed the empty scratch folder of an ended session: %s", folder)
    return removed


def new_scratch(root: Path) -> Path:
    """A scratch folder for this process's session, locked until the process ends (one
    per process: a second build joins the running session and its folder) and removed
    when it ends normally; a killed process leaves it to the next session's clean-up."""
    for handle in _kept:
        return Path(handle.name).parent
    root.mkdir(parents=True, exist_ok=True)
    name = f"session-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    # made and locked under a name no clean-up looks at, then renamed (the lock goes
    # with the open file): a session starting at the same moment never finds it unlocked
    starting = root / f".starting-{name}"
    starting.mkdir(mode=0o700)
    handle = open(starting / _LOCK, "a+")  # noqa: SIM115 - kept for the process's life
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    folder = root / name
    starting.rename(folder)
    _kept.append(handle)
    atexit.register(_remove_scratch, folder, handle)
    return folder


def _remove_scratch(folder: Path, handle: IO[str]) -> None:
    """At the process's normal end: its session's scratch folder goes, then its lock (the
    JVM, which ends with the process, has nothing more to write there)."""
    shutil.rmtree(folder, ignore_errors=True)
    handle.close()


def local_master(config: SparkConfig) -> bool:
    """Whether ``config`` builds a local session (a ``local`` master: its JVM, its Python
    workers and its scratch files are this machine's)."""
    return bool(config.master and config.master.startswith("local"))


def spark_settings(
    config: SparkConfig,
    dbutils_get: Callable[[str, str], str] | None = None,
    environ: Mapping[str, str] | None = None,
    fit: SessionFit | None = None,
    trims: bool = False,
) -> dict[str, str]:
    """Every setting the session gets: syphon's, fitted to the run (``fit``), then the
    config's (its secret references read here, never logged; no ``fit``: a run of
    unknown size in one wave). A local session of a run expecting at most
    :data:`QUICK_START_MESSAGES` messages gets a quick start's, without code generation
    up to :data:`INTERPRETED_MESSAGES`; one of a run in waves, a heap kept close to what
    it holds: :data:`WAVE_JAVA_OPTIONS`, :data:`WAVE_TRIM_OPTIONS` when its Java
    ``trims``, sized to the wave's bytes when known (:func:`wave_heap_mb`), and
    :data:`WAVE_WORKER_CONF` unless its namespaces sign in with Azure AD.

    Raises:
        SecretError: a referenced secret is not set.
    """
    local = local_master(config)
    settings = dict(COMMON_CONF)
    if local:
        settings.update(LOCAL_CONF)
        fit = fit or SessionFit()
        expected = fit.expected_messages
        if expected is not None and expected <= QUICK_START_MESSAGES:
            settings.update(QUICK_START_CONF)
            settings[_JAVA_OPTIONS] = QUICK_START_JAVA_OPTIONS
            if expected <= INTERPRETED_MESSAGES:
                settings.update(INTERPRETED_CONF)
        if fit.waves:
            wave = f"{WAVE_JAVA_OPTIONS} {WAVE_TRIM_OPTIONS}" if trims else WAVE_JAVA_OPTIONS
            options = settings.get(_JAVA_OPTIONS)
            settings[_JAVA_OPTIONS] = f"{options} {wave}" if options else wave
            if fit.wave_bytes is not None:
                settings[_DRIVER_MEMORY] = f"{wave_heap_mb(fit.wave_bytes)}m"
            if not fit.azure_ad:
                settings.update(WAVE_WORKER_CONF)
    for key, value in config.conf.items():
        if isinstance(value, SecretRef):
            try:
                value = resolve_secret(value, environ, dbutils_get)
            except SecretError as exc:
                raise SecretError(f"spark.conf.{key}: {exc}") from None
        if key == _JAVA_OPTIONS and key in settings:  # the config's options come last: they win
            value = f"{settings[key]} {value}"
        settings[key] = value
    return settings


def wave_heap_mb(wave_bytes: int) -> int:
    """The heap, in MB, of a local session of a run in waves of ``wave_bytes`` (see
    :data:`WAVE_HEAP_BASE_MB`)."""
    wanted = WAVE_HEAP_BASE_MB + -(-wave_bytes // 2**20)
    steps = -(-wanted // WAVE_HEAP_STEP_MB)
    return max(WAVE_HEAP_MIN_MB, steps * WAVE_HEAP_STEP_MB)


def build_spark_session(
    config: SparkConfig,
    dbutils_get: Callable[[str, str], str] | None = None,
    fit: SessionFit | None = None,
) -> SparkSession:
    """Builds (or joins) the Spark session syphon runs in.

    With ``config.master`` set (``local[2]``, ``spark://…``) a session is built with
    that master and, for ``local`` masters, the local settings and a scratch folder of
    its own (stale ones of killed sessions are removed first). With no master the
    platform's session is joined (Databricks, spark-submit). A local session of a run
    that expects few messages (``fit``: what the run told it) starts quickly (see
    :data:`QUICK_START_MESSAGES`), and every local session's JVM starts from the
    environment's class archive (:mod:`syphon.app.classarchive`). ``config.conf`` is
    applied last and wins.

    Raises:
        SparkSetupError: PySpark or Java is missing, or the session cannot start.
    """
    try:
        from pyspark import __version__ as spark_version
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkSetupError(
            "PySpark is not installed",
            fix="pip install 'syphon[local]' (PySpark 4.2.0), or run on a Spark cluster "
            "(spark-submit, Databricks)",
        ) from exc
    require_spark(spark_version)

    local = local_master(config)
    if local and not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise SparkSetupError(
            "Java is not installed",
            fix="install a JRE 17 (Debian: apt-get install -y default-jre-headless) or set "
            "JAVA_HOME",
        )
    # Executors must start the interpreter that has syphon's dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if local:  # the JVM's process inherits this one's environment
        for name, value in LOCAL_ENVIRONMENT.items():
            os.environ.setdefault(name, value)

    fit = fit or SessionFit()
    settings = spark_settings(
        config,
        dbutils_get,
        fit=fit,
        trims=local and fit.waves and trims_native_heap(java_version(java_executable())),
    )
    if local:  # the JVM's own log: errors only (its start-up lines come before any setting)
        quiet = f"-Dlog4j2.configurationFile={resources.files('syphon.app') / 'log4j2.properties'}"
        options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{quiet} {options}".strip()
    options = settings.get(_JAVA_OPTIONS, "")
    archive = class_archive(options) if local else None
    if archive is not None:  # the config's own options still come last
        settings[_JAVA_OPTIONS] = f"{archive.java_options()} {options}".strip()
    if local and "spark.local.dir" not in settings:
        root = scratch_root()
        with contextlib.suppress(OSError):
            clean_stale_scratch(root)
        settings["spark.local.dir"] = str(new_scratch(root))
    if not config.master and os.environ.get("SPARK_REMOTE"):  # a Spark Connect client
        settings = connect_settings(settings)
    try:  # a master and Spark Connect's SPARK_REMOTE are refused together before the start
        builder = SparkSession.builder.appName(config.app_name)
        if config.master:
            builder = builder.master(config.master)
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    except Exception as exc:  # pyspark raises several unrelated types here
        raise _not_started(exc, config) from exc
    if archive is not None and not archive.exists:
        write_at_exit(session, archive)
    if local and logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        session.sparkContext.setLogLevel("INFO")
    log.info("Spark %s session ready (master %s)", session.version, config.master or "platform")
    return session


#: Settings a Spark Connect client cannot give its session: the server's JVM, its
#: executors, its Python workers and its files are the platform's (set where it starts).
STATIC_PREFIXES = (
    "spark.driver.",
    "spark.executor.",
    "spark.jars",
    "spark.python.",
    "spark.local.dir",
    "spark.ui.",
    "spark.master",
)


def connect_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` a Spark Connect session takes (session settings, ``spark.sql.*``
    and the like); those of the server's JVM and processes are left out, and said so
    in the log (a Connect server refuses them one warning each)."""
    kept = {k: v for k, v in settings.items() if not k.startswith(STATIC_PREFIXES)}
    left = sorted(set(settings) - set(kept))
    if left:
        log.info("not set on a Spark Connect session (the platform's): %s", ", ".join(left))
    return kept


#: What joins the session a platform hands out (Databricks, spark-submit, Spark Connect).
JOIN_PLATFORM = (
    "spark.master: null in the config (or SYPHON__SPARK__MASTER=null) joins the session the "
    "platform provides (Databricks, spark-submit's --master, Spark Connect's SPARK_REMOTE)"
)


def _not_started(exc: Exception, config: SparkConfig) -> SparkSetupError:
    """The error of a session that did not start, in Spark's own first line; a master
    set where the platform hands out a Spark Connect session says how to join it."""
    from syphon.job.failures import foreign_why

    why = foreign_why(exc)
    said = f": {why}" if why else ""
    connect = "SPARK_CONNECT" in str(exc) or os.environ.get("SPARK_REMOTE")
    if config.master and connect:
        fix = (
            f"a Spark Connect session is handed out here (SPARK_REMOTE), and a master "
            f"({config.master}) cannot be set with it: {JOIN_PLATFORM}"
        )
    else:
        fix = (
            "check that Java 17 runs (java -version) and the spark settings of the config "
            f"({JOIN_PLATFORM})"
        )
    return SparkSetupError(f"the Spark session did not start ({type(exc).__name__}{said})", fix=fix)
