"""Where a run's Service Bus I/O runs: in Spark's tasks, or in the driver.

The stages that talk to Service Bus beside Spark's work are the replay's sends, the
peeks of a peeking read and the settle's receives (a read once under lock is received
by the driver whatever this says: its links must outlive Spark's stages). On a classic
cluster every executor reaches the namespaces, and the work is spread over the tasks. On
Databricks serverless (and standard access mode) user code in a task runs in a sandbox
without a network: only the driver's process (the Spark Connect client) reaches the
namespaces. ``run.service_io`` says which:

- ``tasks``: in Spark's tasks. The run first checks, in one task, that a task reaches
  every namespace it talks to (a TCP connection to each endpoint); a task that cannot
  ends the run before anything is read, exit 2, with a line that says so and a ``fix:``
  naming the setting (not "namespace unreachable": the driver reached it).
- ``driver``: in the driver. Spark still makes the snapshot's DataFrame, the plan and
  the audit; the task's own function (the same code: the replay's rules batch by batch,
  its journal, the in-doubt rules) runs in the driver over the stage's rows, laid out
  in the same order, and its rows are handed back to Spark.
- ``auto`` (the default): ``driver`` on a Spark Connect session (what serverless and
  standard access mode hand out, whose tasks are sandboxed); ``tasks`` on a classic
  session in local mode (its tasks are this machine's processes); on a classic cluster
  the one-task check decides (about 0.2 s, a second when it starts the session's first
  Python worker): ``tasks`` when a task connects, else ``driver``.

The choice is made once per run (:func:`in_driver`), when first needed, and logged;
only ``tasks``, whose check can stop the run, is decided before anything is read
(:func:`check_before_reading`): the others cannot stop it, so a run decides them once its
session is up and goes on meanwhile.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from syphon.core.config import SERVICE_IO_MODES
from syphon.core.errors import ConfigError
from syphon.core.sessions import is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from syphon.job.context import RunContext

log = logging.getLogger(__name__)

AUTO, DRIVER, TASKS = SERVICE_IO_MODES
#: The AMQP port of an endpoint that names none.
AMQP_PORT = 5671
#: How long a task's connection to an endpoint may take before it counts as refused (a
#: sandbox may drop the packets rather than refuse them).
CONNECT_SECONDS = 3.0
#: Rows of a stage's input handed to its function at a time, when it runs in the driver.
_DRIVER_ROWS = 1_000


@dataclass(frozen=True)
class Spread:
    """Where a stage's Service Bus I/O runs: over ``tasks`` Spark tasks (None: one per
    core), or with ``driver`` in the driver (one stream, in the stage's order)."""

    tasks: int | None = None
    driver: bool = False


#: Spread over one task per core: the default.
IN_TASKS = Spread()


class TasksOfflineError(ConfigError):
    """Spark's tasks cannot reach a namespace the driver reaches (``run.service_io:
    tasks`` on compute that runs user code without a network)."""


@dataclass(frozen=True)
class Endpoint:
    """A namespace's address as a task connects to it (no secret in it)."""

    namespace: str
    host: str
    port: int

    @classmethod
    def of(cls, namespace: str, host: str) -> Endpoint:
        name, _, port = host.rpartition(":")
        if name and port.isdigit() and not name.endswith(":"):
            return cls(namespace, name.strip("[]"), int(port))
        return cls(namespace, host.strip("[]"), AMQP_PORT)


#: One decision at a time: a peeking read asks from its own thread.
_DECIDING = threading.Lock()


def in_driver(ctx: RunContext) -> bool:
    """Whether the run's Service Bus I/O runs in the driver (decided at the first call
    of the run, then remembered; see the module docstring).

    Raises:
        TasksOfflineError: ``run.service_io`` is ``tasks`` and a task cannot connect.
    """
    with _DECIDING:
        decided = ctx.decisions.get("service_io")
        if decided is None:
            decided = _decide(ctx)
            ctx.decisions["service_io"] = decided
    return decided == DRIVER


def check_before_reading(ctx: RunContext) -> None:
    """Decides now where the I/O runs when ``run.service_io`` is ``tasks``: its check
    ends the run before anything is read when a task cannot connect. ``auto`` and
    ``driver`` cannot end it, and are decided when first asked (:func:`in_driver`).

    Raises:
        TasksOfflineError: a task cannot connect.
    """
    if ctx.config.run.service_io == TASKS:
        in_driver(ctx)


def _decide(ctx: RunContext) -> str:
    setting = ctx.config.run.service_io
    if setting == DRIVER:
        return DRIVER
    spark = ctx.spark()
    if setting == AUTO and is_connect(spark):
        log.info("Service Bus I/O in the driver: a Spark Connect session (run.service_io auto)")
        return DRIVER
    if setting == AUTO and _local_master(spark):
        return TASKS  # the tasks are this machine's processes: the driver's network
    refused = unreachable_from_tasks(spark, endpoints(ctx))
    if not refused:
        log.info("Service Bus I/O in Spark's tasks: a task reached every namespace")
        return TASKS
    where = ", ".join(f"{e.namespace} ({e.host}:{e.port}: {why})" for e, why in refused)
    if setting == TASKS:
        raise TasksOfflineError(
            f"Spark's tasks cannot reach {where}, which the driver reaches: this compute "
            "runs user code without a network",
            fix="set run.service_io: driver (or auto) to send, peek and settle from the "
            "driver; or let the workers reach the namespaces (AMQP on port 5671)",
        )
    log.info("Service Bus I/O in the driver: Spark's tasks cannot reach %s", where)
    return DRIVER


def _local_master(spark: SparkSession) -> bool:
    """Whether a classic session runs its tasks on this machine (``local[...]``)."""
    return str(spark.conf.get("spark.master", "") or "").startswith("local")


def endpoints(ctx: RunContext) -> list[Endpoint]:
    """The endpoints of every namespace the run may talk to from a task."""
    namespaces = ctx.namespaces
    found = [namespaces.secondary] if namespaces.secondary is not None else []
    found += list(namespaces.primaries.values())
    found += [a for a in namespaces.drained.values() if not isinstance(a, Exception)]
    seen: dict[tuple[str, int], Endpoint] = {}
    for access in found:
        e = Endpoint.of(access.namespace, access.host)
        seen.setdefault((e.host, e.port), e)
    return list(seen.values())


def unreachable_from_tasks(
    spark: SparkSession, targets: Sequence[Endpoint]
) -> list[tuple[Endpoint, str]]:
    """The endpoints one Spark task cannot open a TCP connection to, each with the
    error's name (one Spark job)."""
    if not targets:
        return []
    probe = _ConnectProbe([(e.host, e.port) for e in targets])
    schema = "i int, error string"
    rows = spark.range(1, numPartitions=1).mapInPandas(probe, schema).collect()
    failed = {int(r["i"]): str(r["error"]) for r in rows if r["error"] is not None}
    return [(targets[i], why) for i, why in sorted(failed.items())]


class _ConnectProbe:
    """What the probe's task runs: a TCP connection to each address (nothing sent)."""

    def __init__(self, addresses: list[tuple[str, int]]) -> None:
        self.addresses = addresses

    def __call__(self, frames: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd  # type: ignore[import-untyped]

        for _ in frames:
            pass
        out = []
        for i, address in enumerate(self.addresses):
            try:
                socket.create_connection(address, timeout=CONNECT_SECONDS).close()
                error = None
            except OSError as exc:
                error = type(exc).__name__ + (f" (errno {exc.errno})" if exc.errno else "")
            out.append({"i": i, "error": error})
        yield pd.DataFrame(out, columns=["i", "error"])


def map_in_pandas(
    frame: DataFrame,
    function: Callable[[Iterator[Any]], Iterator[Any]],
    schema: Any,
    driver: bool,
) -> DataFrame:
    """``frame.mapInPandas(function, schema)``, or with ``driver`` the same function
    run here, now, over ``frame``'s rows in their order (a partition after another),
    :data:`_DRIVER_ROWS` at a time; its rows handed back to Spark."""
    if not driver:
        return frame.mapInPandas(function, schema)
    import pandas as pd

    rows: Any = frame.toPandas()
    chunks = (rows.iloc[i : i + _DRIVER_ROWS] for i in range(0, len(rows), _DRIVER_ROWS))
    out = [pdf for pdf in function(chunks) if len(pdf)]
    spark = frame.sparkSession
    if not out:
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(pd.concat(out, ignore_index=True), schema)


def map_in_arrow(
    frame: DataFrame,
    function: Callable[[Iterator[Any]], Iterator[Any]],
    schema: Any,
    driver: bool,
) -> DataFrame:
    """``frame.mapInArrow(function, schema)``, or with ``driver`` the same function run
    here, now, over ``frame``'s record batches; its batches handed back to Spark."""
    if not driver:
        return frame.mapInArrow(function, schema)
    import pyarrow as pa  # type: ignore[import-untyped]

    from syphon.core.render import arrow_schema_of

    arrow_schema = arrow_schema_of(schema)
    batches = list(function(iter(frame.toArrow().to_batches())))
    table = pa.Table.from_batches(batches, schema=arrow_schema)
    return frame.sparkSession.createDataFrame(table, schema)
