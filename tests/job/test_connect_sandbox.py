"""The tests' Spark Connect server runs its Python workers in a sandbox without a
network, as Databricks serverless does (tests/support/connect_server.py): a task there
cannot connect to anything the host reaches, while a task of a classic session can. If
the sandbox leaked, the Connect whole-job tests (tests/job/test_connect_runs.py) would
prove nothing about such compute, so this fails first."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from support.connect_server import ConnectServer
from syphon.job.where import Endpoint, unreachable_from_tasks

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def listening() -> Iterator[int]:
    """A port this host listens on (loopback)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])


#: What a Connect client runs (a process of its own: a process with a classic session
#: cannot open a remote one): the probe of :mod:`syphon.job.where`, its refusals as JSON.
CLIENT = """
import json, sys
from pyspark.sql import SparkSession
from syphon.job.where import Endpoint, unreachable_from_tasks
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
targets = [Endpoint(*t) for t in json.loads(sys.argv[2])]
print(json.dumps([[e.namespace, why] for e, why in unreachable_from_tasks(spark, targets)]))
spark.stop()
"""


def refused_on_connect(server: ConnectServer, targets: list[Endpoint]) -> list[list[str]]:
    argv = [sys.executable, "-c", CLIENT, server.remote]
    argv.append(json.dumps([[e.namespace, e.host, e.port] for e in targets]))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_task_of_the_sandboxed_connect_server_cannot_connect_anywhere(
    connect_server: ConnectServer, spark: Any, listening: int
) -> None:
    targets = [Endpoint("loopback", "127.0.0.1", listening), Endpoint("v6", "::1", listening)]
    # a classic session's task reaches the port: the probe itself works
    assert [e.namespace for e, _ in unreachable_from_tasks(spark, targets[:1])] == []
    refused = refused_on_connect(connect_server, targets)
    assert [name for name, _ in refused] == ["loopback", "v6"]
    # no route at all, not a refused connection: the sandbox has no network
    assert all("errno 101" in why or "errno 99" in why for _, why in refused), refused
