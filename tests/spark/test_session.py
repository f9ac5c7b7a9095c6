import sys

import pytest
from pyspark.sql import SparkSession

from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig
from syphon.core.errors import SparkSetupError


@pytest.mark.spark
def test_the_session_runs_in_utc_with_microsecond_parquet_timestamps(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.range(3).count() == 3


@pytest.mark.spark
def test_a_second_build_joins_the_running_session(spark: SparkSession) -> None:
    again = build_spark_session(SparkConfig(master="local[2]", conf={"spark.app.id.x": "1"}))
    assert again.sparkContext is spark.sparkContext


def test_a_local_session_without_java_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SparkSetupError, match="apt-get install -y default-jre-headless"):
        build_spark_session(SparkConfig(master="local[1]"))


def test_without_pyspark_the_error_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # import fails as if not installed
    with pytest.raises(SparkSetupError, match=r"pip install 'syphon\[local\]'") as info:
        build_spark_session(SparkConfig(master="local[1]"))
    assert info.value.exit_code == 4
