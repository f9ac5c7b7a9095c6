"""A local session fitted to the run: a run that expects few messages starts its JVM
with the client compiler (its fixed cost halves), and the smallest plan without code
generation; a large run, one of unknown size, and a session on a cluster keep Spark's
defaults; the config's own settings always win."""

from __future__ import annotations

import pytest

from syphon.app.spark import (
    INTERPRETED_CONF,
    INTERPRETED_MESSAGES,
    QUICK_START_CONF,
    QUICK_START_JAVA_OPTIONS,
    QUICK_START_MESSAGES,
    spark_settings,
)
from syphon.core.config import SparkConfig
from syphon.core.sessions import SessionFit

JAVA = "spark.driver.extraJavaOptions"


def quick(settings: dict[str, str]) -> bool:
    return QUICK_START_JAVA_OPTIONS in settings.get(JAVA, "") and all(
        settings.get(k) == v for k, v in QUICK_START_CONF.items()
    )


@pytest.mark.parametrize("messages", [1, 20_000, QUICK_START_MESSAGES])
def test_a_local_run_of_few_messages_starts_quickly(messages: int) -> None:
    assert quick(spark_settings(SparkConfig(master="local[2]"), fit=SessionFit(messages)))


def interpreted(settings: dict[str, str]) -> bool:
    return all(settings.get(k) == v for k, v in INTERPRETED_CONF.items())


@pytest.mark.parametrize("messages", [1, INTERPRETED_MESSAGES])
def test_the_smallest_runs_plan_without_code_generation(messages: int) -> None:
    assert interpreted(spark_settings(SparkConfig(master="local[2]"), fit=SessionFit(messages)))


@pytest.mark.parametrize("messages", [INTERPRETED_MESSAGES + 1, QUICK_START_MESSAGES])
def test_a_larger_quick_start_compiles_its_queries(messages: int) -> None:
    """Interpreting a query costs per message: from some thousands of messages on,
    compiling it pays."""
    settings = spark_settings(SparkConfig(master="local[2]"), fit=SessionFit(messages))
    assert quick(settings)
    assert not set(INTERPRETED_CONF) & set(settings)


@pytest.mark.parametrize("messages", [QUICK_START_MESSAGES + 1, 10_000_000, None])
def test_a_large_run_or_one_of_unknown_size_keeps_the_full_jit(messages: int | None) -> None:
    settings = spark_settings(SparkConfig(master="local[2]"), fit=SessionFit(messages))
    assert JAVA not in settings
    assert not (set(QUICK_START_CONF) | set(INTERPRETED_CONF)) & set(settings)


def test_a_session_on_a_cluster_is_never_changed() -> None:
    for master in (None, "spark://cluster:7077", "yarn"):
        settings = spark_settings(SparkConfig(master=master), fit=SessionFit(10))
        assert not quick(settings)
        assert JAVA not in settings


def test_a_local_session_builds_its_columns_without_recording_their_python_lines() -> None:
    """PySpark's DataFrame debugging costs about eight JVM round trips per column
    operation; a local session is syphon's own and turns it off, a cluster's session is
    left as its owner set it."""
    key = "spark.python.sql.dataFrameDebugging.enabled"
    for messages in (10, None):
        assert spark_settings(SparkConfig(master="local[2]"), fit=SessionFit(messages))[key] == (
            "false"
        )
    for master in (None, "spark://cluster:7077", "yarn"):
        assert key not in spark_settings(SparkConfig(master=master), fit=SessionFit(10))
    own = SparkConfig(master="local[2]", conf={key: "true"})
    assert spark_settings(own)[key] == "true"  # the config's own setting wins


def test_the_configs_own_settings_win_over_a_quick_start() -> None:
    config = SparkConfig(
        master="local[2]",
        conf={JAVA: "-XX:TieredStopAtLevel=4 -Xmx8g", "spark.sql.adaptive.enabled": "true"},
    )
    settings = spark_settings(config, fit=SessionFit(10))
    # the JVM takes the last of two settings of one option: the config's
    assert settings[JAVA] == f"{QUICK_START_JAVA_OPTIONS} -XX:TieredStopAtLevel=4 -Xmx8g"
    assert settings["spark.sql.adaptive.enabled"] == "true"
    assert settings["spark.sql.codegen.wholeStage"] == "false"


def test_a_local_run_in_waves_keeps_its_heap_close_to_what_it_holds() -> None:
    from syphon.app.spark import WAVE_JAVA_OPTIONS

    local = SparkConfig(master="local[2]")
    for messages in (20_000, None):
        settings = spark_settings(local, fit=SessionFit(messages, waves=True))
        assert settings[JAVA].endswith(WAVE_JAVA_OPTIONS)
        assert WAVE_JAVA_OPTIONS not in spark_settings(local, fit=SessionFit(messages)).get(
            JAVA, ""
        )
    assert quick(spark_settings(local, fit=SessionFit(20_000, waves=True)))
    cluster = spark_settings(SparkConfig(master=None), fit=SessionFit(20_000, waves=True))
    assert JAVA not in cluster


def test_a_local_run_in_waves_hands_its_freed_c_heap_back_on_a_java_that_can() -> None:
    from syphon.app.spark import WAVE_JAVA_OPTIONS, WAVE_TRIM_OPTIONS

    local = SparkConfig(master="local[2]")
    trimmed = spark_settings(local, fit=SessionFit(20_000, waves=True), trims=True)
    assert trimmed[JAVA].endswith(f"{WAVE_JAVA_OPTIONS} {WAVE_TRIM_OPTIONS}")
    # a Java that does not know the option would not start: it is not given
    assert WAVE_TRIM_OPTIONS not in spark_settings(local, fit=SessionFit(20_000, waves=True))[JAVA]
    # nor to a run in one wave, nor to a cluster's JVM (the platform's)
    one = spark_settings(local, fit=SessionFit(20_000), trims=True)
    assert WAVE_TRIM_OPTIONS not in one[JAVA]
    assert JAVA not in spark_settings(
        SparkConfig(master=None), fit=SessionFit(waves=True), trims=True
    )
    # the config's own options still come last, and win
    own = SparkConfig(master="local[2]", conf={JAVA: "-XX:TrimNativeHeapInterval=0"})
    last = spark_settings(own, fit=SessionFit(20_000, waves=True), trims=True)[JAVA]
    assert last.endswith(f"{WAVE_TRIM_OPTIONS} -XX:TrimNativeHeapInterval=0")


def test_a_master_where_spark_connect_hands_out_the_session_says_how_to_join_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With SPARK_REMOTE set (a platform's Spark Connect session), the default master is
    refused by PySpark before anything starts: the error says Spark's words and that
    ``spark.master: null`` joins the platform's session."""
    from syphon.app.spark import build_spark_session
    from syphon.core.errors import SparkSetupError

    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    with pytest.raises(SparkSetupError) as refused:
        build_spark_session(SparkConfig(master="local[2]"))
    assert "CANNOT_CONFIGURE_SPARK_CONNECT_MASTER" in str(refused.value)
    assert refused.value.fix is not None
    assert "spark.master: null" in refused.value.fix
    assert "SPARK_REMOTE" in refused.value.fix


def test_a_connect_client_gives_its_session_session_settings_only() -> None:
    from syphon.app.spark import connect_settings

    kept = connect_settings(
        {
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.extraJavaOptions": "-Xss4m",
            "spark.executor.memory": "2g",
            "spark.python.daemon.module": "x",
            "spark.jars": "a.jar",
            "spark.sql.shuffle.partitions": "4",
        }
    )
    assert kept == {"spark.sql.session.timeZone": "UTC", "spark.sql.shuffle.partitions": "4"}


def test_a_local_run_in_waves_of_known_bytes_sizes_its_heap_to_a_wave() -> None:
    """The heap is what a wave's bytes take on top of a base, in steps, never under the
    least (syphon.app.spark.WAVE_HEAP_BASE_MB); unknown bytes, one wave, a cluster or the
    config's own setting leave it alone."""
    from syphon.app.spark import (
        WAVE_HEAP_BASE_MB,
        WAVE_HEAP_MIN_MB,
        WAVE_HEAP_STEP_MB,
        wave_heap_mb,
    )

    mb = 2**20
    assert wave_heap_mb(0) == WAVE_HEAP_MIN_MB
    assert wave_heap_mb(50 * mb) == WAVE_HEAP_MIN_MB
    # 40,000 messages of 8 KB: 384 + 330 MB, up to the next step
    assert wave_heap_mb(330 * mb) == 768
    big = 5000 * mb
    assert wave_heap_mb(big) % WAVE_HEAP_STEP_MB == 0
    assert 0 <= wave_heap_mb(big) - (WAVE_HEAP_BASE_MB + 5000) < WAVE_HEAP_STEP_MB

    memory = "spark.driver.memory"
    local = SparkConfig(master="local[2]")
    fitted = spark_settings(local, fit=SessionFit(40_000, waves=True, wave_bytes=330 * mb))
    assert fitted[memory] == "768m"
    assert memory not in spark_settings(local, fit=SessionFit(40_000, waves=True))
    assert memory not in spark_settings(local, fit=SessionFit(40_000, wave_bytes=330 * mb))
    cluster = SparkConfig(master=None)
    assert memory not in spark_settings(cluster, fit=SessionFit(waves=True, wave_bytes=330 * mb))
    own = SparkConfig(master="local[2]", conf={memory: "3g"})
    assert spark_settings(own, fit=SessionFit(waves=True, wave_bytes=330 * mb))[memory] == "3g"


def test_a_local_run_in_waves_gives_each_python_task_a_worker_of_its_own() -> None:
    from syphon.app.spark import WAVE_WORKER_CONF

    local = SparkConfig(master="local[2]")
    fresh = spark_settings(local, fit=SessionFit(20_000, waves=True))
    assert all(fresh[k] == v for k, v in WAVE_WORKER_CONF.items())
    for settings in (
        spark_settings(local, fit=SessionFit(20_000, waves=True, azure_ad=True)),  # reused
        spark_settings(local, fit=SessionFit(20_000)),  # one wave
        spark_settings(SparkConfig(master=None), fit=SessionFit(waves=True)),  # a cluster
    ):
        assert not set(WAVE_WORKER_CONF) & set(settings)
    own = SparkConfig(master="local[2]", conf={"spark.python.worker.reuse": "true"})
    mine = spark_settings(own, fit=SessionFit(20_000, waves=True))
    assert mine["spark.python.worker.reuse"] == "true"  # the config's own wins
