"""syphon runs on Spark 4.0 and later (Databricks Runtime 17.3 LTS, serverless environment
4): an older Spark is refused before any session starts, with exit 4 and the runtime to
use. (Spark 3.5 lacks ``DataFrame.toArrow`` and the Python data sources syphon's stages
use.)"""

from __future__ import annotations

import pytest

from syphon.core.errors import ExitCode, SparkSetupError
from syphon.core.sessions import require_spark


@pytest.mark.parametrize("version", ["3.5.7", "3.5.0", "3.4.1"])
def test_a_spark_older_than_4_is_refused_naming_the_runtime_to_use(version: str) -> None:
    with pytest.raises(SparkSetupError) as refused:
        require_spark(version)
    assert refused.value.exit_code == ExitCode.NO_SPARK == 4
    assert f"PySpark {version} is installed" in str(refused.value)
    assert "Databricks Runtime 17.3 LTS" in (refused.value.fix or "")


@pytest.mark.parametrize("version", ["4.0.5", "4.2.0", "4.3.0", "4.1.0.dev1", "5.0.0"])
def test_spark_4_and_later_are_taken(version: str) -> None:
    require_spark(version)


def test_the_session_factory_refuses_an_old_pyspark_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyspark

    from syphon.app.spark import build_spark_session
    from syphon.core.config import SparkConfig

    monkeypatch.setattr(pyspark, "__version__", "3.5.7")
    with pytest.raises(SparkSetupError, match=r"syphon needs Spark 4\.0 or later"):
        build_spark_session(SparkConfig(master="local[1]"))
