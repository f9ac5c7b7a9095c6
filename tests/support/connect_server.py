"""A local Spark Connect server, started from the installed PySpark, the way a platform
(Databricks serverless, a standard-access-mode cluster) hands a job a Connect session:
``syphon`` runs as its client with ``SPARK_REMOTE=sc://127.0.0.1:<port>`` and no master.

The server is a ``spark-submit`` of ``org.apache.spark.sql.connect.service.SparkConnectServer``
(its jar ships in PySpark's wheel) on ``local[2]``, bound to loopback, with the tests'
quick JVM (tests/support/jvm.py) and Delta's jars (tests/support/delta_jars.py): the
platform's settings, which its clients cannot change. Its catalog (Spark's in-memory
one) is shared by all its clients, as a workspace's is by its jobs.

Its Python workers run in a sandbox, as Databricks serverless runs user code: this
environment's interpreter started through a wrapper (:func:`sandboxed_python`) that puts
it in a network namespace of its own (``unshare -n``, or ``unshare -rn`` as a user that
is not root), whose only interface is a loopback that is down. A task there cannot open
a connection to anything, the local Service Bus included (a test connects and fails,
tests/job/test_connect_sandbox.py); it talks to the server's JVM over Unix domain
sockets (``spark.python.unix.domain.socket.enabled``), which a network namespace does
not cut. Classic sessions (the ``spark`` fixture) keep their networked workers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support import delta_jars
from support.jvm import LONG_LIVED, SMALL_DATA_CONF, java_options

#: How long the server may take to listen (about 7 s on an idle 2-core machine).
START_SECONDS = 120


@dataclass
class ConnectServer:
    """A running server: its address for ``SPARK_REMOTE``, its process id and log."""

    remote: str
    pid: int
    log: Path
    #: the folder of its catalog's default database: a table ``t`` is at ``warehouse/t``
    warehouse: Path
    #: the process, in the test process that started it (None: another one did)
    process: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.process is None:
            stop_pid(self.pid)
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


#: Where a shared server (:func:`shared_connect_server`) says where it is, in its folder.
_SHARED = "server.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def shared_connect_server(folder: Path) -> ConnectServer:
    """The server of ``folder``, one for every test process that asks (a server serves
    many sessions, as a workspace's does its jobs): the first to ask starts it, under a
    lock, and writes where it is; the others read it. Its starter's process may end
    before the others are done with it: it is stopped by :func:`stop_shared_server`,
    once the whole test session ends."""
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / "server.lock"):
        known = folder / _SHARED
        if known.exists():
            said = json.loads(known.read_text(encoding="utf-8"))
            return ConnectServer(
                said["remote"], said["pid"], Path(said["log"]), Path(said["warehouse"])
            )
        server = start_connect_server(folder)
        said = {
            "remote": server.remote,
            "pid": server.pid,
            "log": str(server.log),
            "warehouse": str(server.warehouse),
        }
        known.write_text(json.dumps(said), encoding="utf-8")
        return server


def stop_shared_server(folder: Path) -> None:
    """Stops the shared server of ``folder``, if one was started."""
    known = folder / _SHARED
    if known.exists():
        stop_pid(json.loads(known.read_text(encoding="utf-8"))["pid"])
        known.unlink()


def stop_pid(pid: int) -> None:
    """Ends the server process ``pid`` (its JVM), waiting up to 30 s before killing it."""
    from support.waiting import wait_until

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        try:
            wait_until(lambda: not _running(pid), timeout=30, what="the server's end")
        except AssertionError:
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a process that ended and waits for its parent to reap it
    does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def sandboxed_python(folder: Path) -> Path:
    """A script in ``folder`` that runs this environment's Python in a network namespace
    of its own (see the module docstring)."""
    unshare = "unshare -n" if os.geteuid() == 0 else "unshare -rn"
    script = folder / "python-sandboxed"
    script.write_text(f'#!/bin/sh\nexec {unshare} -- "{sys.executable}" "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return script


def start_connect_server(folder: Path, sandboxed: bool = True) -> ConnectServer:
    """Starts a server (its log in ``folder``; with ``sandboxed``, Python workers without
    a network) and waits until it listens.

    Raises:
        RuntimeError: it exited, or did not listen within :data:`START_SECONDS`.
    """
    import pyspark

    home = Path(pyspark.__file__).parent
    port = _free_port()
    warehouse = folder / "warehouse"
    conf = {
        "spark.sql.warehouse.dir": str(warehouse),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.default.parallelism": "2",
        "spark.sql.shuffle.partitions": "2",
        # it serves the whole suite, as a test worker's own session does (tests/conftest.py)
        "spark.driver.extraJavaOptions": f"{java_options()} {LONG_LIVED}",
        **SMALL_DATA_CONF,
        # Delta through Spark, as a platform's server has it (the set-up's jars)
        **(delta_jars.session_conf() if delta_jars.fetched() else {}),
    }
    if sandboxed:  # the workers reach the JVM through Unix domain sockets
        conf["spark.python.unix.domain.socket.enabled"] = "true"
    folder.mkdir(parents=True, exist_ok=True)
    python = sandboxed_python(folder) if sandboxed else Path(sys.executable)
    argv = [str(home / "bin" / "spark-submit"), "--master", "local[2]"]
    argv += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    argv.append("spark-internal")
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": str(python),
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("SPARK_REMOTE", None)
    log = folder / "connect-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    deadline = time.monotonic() + START_SECONDS
    while not _listening(port):
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the Spark Connect server did not listen: {log}")
        time.sleep(0.05)
    return ConnectServer(f"sc://127.0.0.1:{port}", process.pid, log, warehouse, process)
