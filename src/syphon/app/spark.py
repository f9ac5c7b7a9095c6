"""The one place a SparkSession is built. The session is passed down, never global."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from typing import TYPE_CHECKING

from syphon.core.config import SparkConfig
from syphon.core.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Settings for a local session: fewer partitions, no UI, loopback only.
LOCAL_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}

#: A JVM that starts fast and runs slowly (C1 only, serial GC): for the tests' small
#: sessions only. A real run keeps the full JIT: the reconcile of a million messages
#: took 123 s with these flags and 61 s without (tests/benchmarks/bench_reconcile.py).
FAST_START_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
}

#: Settings syphon relies on wherever it runs.
COMMON_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # Files Spark writes for delta-rs to commit need microsecond timestamps.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def build_spark_session(config: SparkConfig) -> SparkSession:
    """Builds (or joins) the Spark session syphon runs in.

    With ``config.master`` set (``local[2]``, ``spark://…``) a session is built with
    that master and, for ``local`` masters, the fast local settings. With no master the
    platform's session is joined (Databricks, spark-submit). ``config.conf`` is
    applied last and wins.

    Raises:
        SparkSetupError: Java is missing or the session cannot start.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkSetupError(
            "PySpark is not installed: pip install 'syphon[local]' (PySpark 4.2.0), or run "
            "on a Spark cluster (spark-submit, Databricks)"
        ) from exc

    local = bool(config.master and config.master.startswith("local"))
    if local and not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise SparkSetupError(
            "Java is not installed: install a JRE 17 (Debian: apt-get install -y "
            "default-jre-headless) or set JAVA_HOME"
        )
    # Executors must start the interpreter that has syphon's dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = SparkSession.builder.appName(config.app_name)
    settings = dict(COMMON_CONF)
    if config.master:
        builder = builder.master(config.master)
    if local:
        settings.update(LOCAL_CONF)
    settings.update(config.conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # pyspark raises several unrelated types here
        raise SparkSetupError(f"the Spark session did not start: {exc}") from exc
    log.info("Spark %s session ready (master %s)", session.version, config.master or "platform")
    return session
