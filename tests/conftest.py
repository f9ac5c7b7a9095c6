"""Shared fixtures. One Spark session for the whole run, started only when a test asks."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from support import delta_jars
from support.azurite import KEY_ENV, Azurite, BlobAudit, start_azurite
from support.connect_server import ConnectServer, shared_connect_server, stop_shared_server
from support.jvm import LONG_LIVED, TEST_SPARK_CONF, java_options
from support.paired_env import Pair, make_pair
from syphon.app.spark import build_spark_session
from syphon.core.config import SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from servicebus_emulator import Emulator

pytest_plugins = ["servicebus_emulator.pytest_plugin"]

# The tests' JVMs start from the tests' own class archive (tests/support/jvm.py); syphon's archive
# for local sessions (syphon.app.classarchive) is never written to the user's cache by a
# test: its own tests name a folder of theirs.
os.environ["SYPHON_CLASS_ARCHIVE"] = "off"

# Property tests judge answers, not speed: no per-example deadline on a busy 2-core CI.
settings.register_profile("syphon", deadline=None, print_blob=True)
settings.load_profile("syphon")


@pytest.fixture(autouse=True)
def _drop_syphon_log_handler() -> Iterator[None]:
    """``syphon.app.cli.main`` installs a log handler on the captured stderr of its test:
    removed after each test, so no later record goes to a closed stream."""
    import logging

    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if h.get_name() == "syphon"]:
        root.removeHandler(handler)
    root.setLevel(level)


#: The tests' session: one task per stage where Spark picks the count (a DataFrame made
#: from local rows, and the stages that talk to Service Bus, which take at most the
#: default parallelism: syphon.job.context.service_tasks). A second task of a few rows
#: doubled the stage's scheduling, task deserialization and Python workers: the eight
#: costliest in-process job files took 182 CPU-s with two and 152 with one. A run spread
#: over several tasks is the demo's process (tests/job/test_demo.py: ``local[2]``, a task
#: per message), and every ``syphon run`` process's stages that Spark sizes itself (local
#: sessions' parallelism 2, syphon.app.spark.LOCAL_CONF): the crash tests' killed runs.
ONE_TASK_CONF = {
    **TEST_SPARK_CONF,
    "spark.driver.extraJavaOptions": f"{java_options()} {LONG_LIVED}",
    "spark.default.parallelism": "1",
    # Delta through Spark (audit.engine: spark), from the jars the set-up copied
    **(delta_jars.session_conf() if delta_jars.fetched() else {}),
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_spark_session(
        SparkConfig(master="local[2]", app_name="syphon-tests", conf=ONE_TASK_CONF)
    )
    yield session
    session.stop()


def _shared_folder(config: pytest.Config, name: str) -> Path:
    """A folder every test process of this session shares: the session's base temporary
    folder (a test worker's is a folder inside it)."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return (base.parent if hasattr(config, "workerinput") else base) / name


@pytest.fixture(scope="session")
def connect_server(request: pytest.FixtureRequest) -> ConnectServer:
    """A local Spark Connect server, one for every test worker (a server serves many
    sessions: one JVM, not one per worker), started when a test first asks
    (tests/support/connect_server.py) and stopped when the whole session ends."""
    return shared_connect_server(_shared_folder(request.config, CONNECT_FOLDER))


#: The shared Spark Connect server's folder, in the session's base temporary folder.
CONNECT_FOLDER = "connect-shared"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's end in the process that runs it (not a worker's end): the shared
    server stops."""
    if not hasattr(session.config, "workerinput"):
        stop_shared_server(_shared_folder(session.config, CONNECT_FOLDER))


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """Azurite's Blob service, one per test worker, started when a test first asks."""
    service = start_azurite()
    yield service
    service.stop()


@pytest.fixture
def blob_audit(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> BlobAudit:
    """A fresh container for the test's audit; the account key in ``KEY_ENV``."""
    monkeypatch.setenv(KEY_ENV, azurite.key)
    return BlobAudit(azurite, azurite.new_container())


@pytest.fixture
def pair(servicebus_emulator: Callable[..., Emulator]) -> Pair:
    """A primary namespace (queues orders and sessions, topic events) and a secondary one
    with provisioned backlog queues, each a local Service Bus (see paired_env.py)."""
    return make_pair(servicebus_emulator)


#: The slowest test files, slowest first (their tests' summed durations in a run of the
#: whole suite, ``./dev.sh test --durations=80``: from about 165 s down to 20 s on 2 busy
#: cores): the parallel workers take files in collection order, so these start at once
#: and the short files fill the gaps, instead of a long file starting last and running
#: alone. Among them, one at a time, the files that mostly wait (on a producer's
#: failover, a lock's expiry, a process's exit: 15 to 35 s each, a tenth of it CPU): at
#: the end, or side by side, they left the cores idle.
SLOWEST_FIRST = (
    "tests/job/test_run.py",
    "tests/job/test_connect_runs.py",
    "tests/job/test_crash_read_once.py",
    "tests/job/test_unseen_keys.py",  # waits
    "tests/job/test_cluster_read_once.py",
    "tests/job/test_catalog_audit.py",
    "tests/job/test_wave_runs.py",
    "tests/job/test_crash.py",
    "tests/job/test_run_faults.py",
    "tests/job/test_demo.py",
    "tests/emulator/test_sdk_samples.py",
    "tests/job/test_packed_env.py",
    "tests/producer/test_sender.py",  # waits
    "tests/job/test_crash_settle.py",
    "tests/emulator/test_topics.py",
    "tests/job/test_dead_letter_runs.py",
    "tests/emulator/test_queues.py",  # waits
    "tests/job/test_replay_failures.py",
    "tests/job/test_namespace_runs.py",
    "tests/spark/test_selection.py",
    "tests/job/test_settle_task.py",  # waits
    "tests/job/test_object_storage_runs.py",
    "tests/job/test_exit_codes_own.py",
    "tests/job/test_repair_runs.py",
    "tests/job/test_errors.py",  # waits
    "tests/job/test_crash_waves.py",
    "tests/spark/test_class_archive.py",
    "tests/producer/test_scenario.py",  # waits
    "tests/job/test_plan_verdicts.py",
    "tests/unit/test_lease.py",  # waits
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}

    def order(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))

    items.sort(key=order)  # stable: the rest keep their order
