"""syphon run against the naive loop, measured the way users run it: cold, as processes.

    .venv/bin/python tests/benchmarks/bench_run.py [--messages 20000] [--delays 0,5]
        [--sizes 5000,20000,60000] [--warm] [--syphon-only] [--sizes-syphon-only]
        [--redrive] [--no-floor] [--against DIR] [--repeat N] [--spark-conf KEY=VALUE]
        [--connect] [--read-once] [--driver-io]

Both local Service Bus namespaces run in a child process (the same for both tools). The
backlog: ``--messages`` messages (1 KB bodies) over 10 backlog queues, 50 destination
queues, 30% in sessions and 30% with partition keys, parked round-robin in batches of
20 per queue, so that a session's messages span backlog queues. Every message carries
its place in its key's order (property ``n``, in backlog enqueue order).

Every tool runs as a process of its own, started cold, and is measured with its whole
process tree (``proctree.py``: wall time, the CPU seconds of the command and of every
process it starts — for syphon the Python driver, the JVM and the Python workers — and
the tree's peak memory, PSS):

1. the floor: a process that builds syphon's Spark session with the config's settings
   and runs one trivial DataFrame action (``spark.range(1).count()``) — what any
   PySpark job pays before its first message;
2. the naive loop, written plainly with the same SDK: per backlog queue, one after
   another, receive up to 100 in peek-lock, send each message on its own to its
   ``x-ms-path``, complete it;
3. ``syphon run`` (the command, local Spark with 2 cores, Delta in a temporary folder)
   on the same backlog, parked again with the same seed.

The loop and syphon run at each one-way delay of ``--delays`` (milliseconds; 0 is
loopback): a delay proxy (tests/support/latency_proxy.py) in the server's process sits in front
of each namespace's AMQP port and management API, so every round trip costs twice the
delay; parking and checking go direct. After each, the destinations are drained and
order violations counted per (destination, key): a message whose ``n`` is below the one
received before it. Printed per delay and tool: wall time, messages/s, delivered,
violations, credits per replayed message (billable operations: the loop's receives,
sends and completes; syphon's from its ledger: peeks, sends, receives, settlement
requests), send transfers, settlement requests, the CPU of the tool's process tree, its
peak memory, and the CPU the local Service Bus process spent serving it; then the
ratios, and syphon's fixed cost as a multiple of the floor.

``--sizes`` runs ``syphon run`` cold once per size on loopback (the loop too, unless
``--syphon-only`` or ``--sizes-syphon-only``) and prints, between consecutive sizes, the
marginal wall and CPU per message, per stage from the ledger's timings (the stages' own
times are the driver's view: their CPU is the tree's, printed whole), then issue 37's
targets as this invocation measured them. ``--repeat N`` runs each size N times (with
``--against``, the two trees in turn) and takes the run of median wall time: a lever
worth a second needs it on a shared machine whose runs vary by about that much.

``--warm`` adds a labelled row: ``syphon run`` inside the benchmark's own process, its
Spark session started by an earlier run of 500 messages (a notebook, or a cluster's
second run) — a warm figure no scheduled run sees.

``--redrive`` adds, at each delay, the dead-letter re-drive of the same messages: they
are sent straight to their destinations (same keys, bodies and order) and dead-lettered
there (reason ``bench``), then moved back into their queues, first by the loop an
explorer tool runs (per dead-letter queue, receive up to 100 in peek-lock, send each on
its own to its queue without the dead-letter properties, complete it), then,
dead-lettered again, by ``syphon run --source redrive`` (a dead-letter source over every
queue of the primary, found by one listing), both as processes. Rows ``dlq-loop`` and
``dlq-syphon``.

``--connect`` adds, at each delay, ``syphon run`` as the client of a local Spark Connect
server (tests/support/connect_server.py), as serverless compute runs it: no master,
``SPARK_REMOTE`` set. The server starts once, before the runs, as a platform's does; the
row ``syphon@connect`` measures the client's process tree cold, and the server's tree (its
JVM and Python workers) is measured over the run (CPU, and memory resident after it).

``--read-once`` adds, at each delay, ``syphon run`` with ``run.read: once`` on the same
work (rows ``syphon-once`` and, with ``--redrive``, ``dlq-syphon-once``), and each syphon
row prints how its source was read: messages peeked, received by the read and by the
settle (the credits the secondary counts for reading).

``--driver-io`` adds, at each delay, ``syphon run`` with ``run.service_io: driver`` (row
``syphon-driver``): what compute whose tasks cannot reach Service Bus (Databricks
serverless) gets, beside the row whose tasks send.

Last, the empty run: ``syphon run`` as a process on empty backlog queues, with discovery
by management listing and by probing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: latency_proxy.py
sys.path.insert(0, str(Path(__file__).resolve().parent))  # proctree.py

from proctree import TreeUsage, become_subreaper, run_measured

from syphon.app.services import build_context, run_with_report
from syphon.core.configfile import load_config
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.servicebus.raw import lean

PRIMARY = "bench-primary"
QUEUES = 10
DESTINATIONS = 50
PER_BATCH = 20
#: Each parked message's body (bench_waves.py --body-bytes sets it).
BODY_BYTES = 1024


def serve(ready: Any, stop: Any, delays: list[float]) -> None:
    """The child process: both namespaces until ``stop`` is set, and for each delay
    (milliseconds, one way) above 0 a delay proxy in front of each namespace's AMQP port
    and management API (tests/support/latency_proxy.py), all in this process."""
    from servicebus_emulator import Emulator, QueueSpec
    from support.latency_proxy import DelayProxy

    # as syphon provision describes them (syphon.core.naming): no delivery count limit
    backlog = [
        QueueSpec(
            f"{PRIMARY}/x-servicebus-transfer/{i}",
            max_size_in_megabytes=5120,
            max_delivery_count=2**31 - 1,
        )
        for i in range(QUEUES)
    ]
    dests = [QueueSpec(f"dest-{i:02d}", max_size_in_megabytes=5120) for i in range(DESTINATIONS)]
    with Emulator(queues=backlog) as secondary, Emulator(queues=dests) as primary:
        proxies: list[DelayProxy] = []
        endpoints: dict[float, Any] = {}
        for delay in delays:
            at: dict[str, Any] = {}
            for name, e in (("secondary", secondary), ("primary", primary)):
                conn, admin = e.connection_string, e.admin_endpoint
                if delay > 0:
                    amqp = DelayProxy("127.0.0.1", e.port, delay / 1000).start()
                    http = DelayProxy("127.0.0.1", e.admin_port, delay / 1000).start()
                    proxies += [amqp, http]
                    conn = conn.replace(f":{e.port};", f":{amqp.port};")
                    admin = admin.replace(f":{e.admin_port}", f":{http.port}")
                at[name] = {
                    "conn": conn,
                    "admin": admin,
                    "ca": e.ca_bundle,
                    "admin_conn": e.admin_connection_string,
                }
            endpoints[delay] = at
        ready.put({"pid": os.getpid(), "at": endpoints})
        stop.wait()
        for proxy in proxies:
            proxy.stop()


@contextlib.contextmanager
def serving(delays: list[float]) -> Iterator[dict[str, Any]]:
    """Both namespaces in a child process (:func:`serve`, loopback and each delay) for
    the ``with`` block; what it answers: its pid and the endpoints by delay."""
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=serve, args=(ready, stop, sorted({0.0, *delays})), daemon=True)
    server.start()
    try:
        yield ready.get(timeout=60)
    finally:
        stop.set()
        server.join(timeout=30)


def park(secondary: str, total: int) -> None:
    """Fills the backlog queues (see the module docstring)."""
    rng = random.Random(7)
    body = bytes(BODY_BYTES)
    order: dict[tuple[str, str], int] = defaultdict(int)
    with ServiceBusClient.from_connection_string(secondary) as client:
        senders = [
            client.get_queue_sender(f"{PRIMARY}/x-servicebus-transfer/{q}") for q in range(QUEUES)
        ]
        i = 0
        while i < total:
            for sender in senders:
                batch = sender.create_message_batch()
                for _ in range(min(PER_BATCH, total - i)):
                    dest = f"dest-{rng.randrange(DESTINATIONS):02d}"
                    kind = rng.random()
                    session = f"s{rng.randrange(97)}" if kind < 0.3 else None
                    key = f"k{rng.randrange(89)}" if 0.3 <= kind < 0.6 else None
                    n = order[(dest, session or key or "")]
                    order[(dest, session or key or "")] += 1
                    msg = ServiceBusMessage(
                        body,
                        message_id=f"m{i}",
                        session_id=session,
                        partition_key=key,
                        application_properties={"n": n},
                    )
                    batch.add_message(to_backlog_message(msg, dest))
                    i += 1
                if len(batch):
                    sender.send_messages(batch)
        for sender in senders:
            sender.close()


def baseline(secondary: str, primary: str) -> tuple[int, dict[str, int]]:
    """The naive loop. Returns (messages moved, operations)."""
    ops = {"receives": 0, "sends": 0, "completes": 0}
    with (
        ServiceBusClient.from_connection_string(secondary) as source,
        ServiceBusClient.from_connection_string(primary) as target,
    ):
        senders: dict[str, Any] = {}
        for q in range(QUEUES):
            path = f"{PRIMARY}/x-servicebus-transfer/{q}"
            with source.get_queue_receiver(path) as receiver:
                while batch := receiver.receive_messages(max_message_count=100, max_wait_time=1):
                    ops["receives"] += len(batch)
                    for m in batch:
                        props = dict(m.application_properties or {})
                        dest = props.pop(b"x-ms-path").decode()
                        session = props.pop(b"x-ms-sessionid", None)
                        out = ServiceBusMessage(
                            b"".join(m.body),
                            message_id=m.message_id,
                            session_id=session.decode() if session else None,
                            partition_key=m.partition_key,
                            application_properties=props,
                        )
                        if dest not in senders:
                            senders[dest] = target.get_queue_sender(dest)
                        senders[dest].send_messages(out)
                        ops["sends"] += 1
                        receiver.complete_message(m)
                        ops["completes"] += 1
        for sender in senders.values():
            sender.close()
    return ops["sends"], ops


def park_dead_letters(primary: str, total: int) -> None:
    """The backlog's messages sent straight to their destinations and dead-lettered there,
    in order (see the module docstring)."""
    rng = random.Random(7)
    body = bytes(BODY_BYTES)
    order: dict[tuple[str, str], int] = defaultdict(int)
    by_dest: dict[str, list[ServiceBusMessage]] = defaultdict(list)
    for i in range(total):
        dest = f"dest-{rng.randrange(DESTINATIONS):02d}"
        kind = rng.random()
        session = f"s{rng.randrange(97)}" if kind < 0.3 else None
        key = f"k{rng.randrange(89)}" if 0.3 <= kind < 0.6 else None
        n = order[(dest, session or key or "")]
        order[(dest, session or key or "")] += 1
        by_dest[dest].append(
            ServiceBusMessage(
                body,
                message_id=f"m{i}",
                session_id=session,
                partition_key=key,
                application_properties={"n": n},
            )
        )
    with ServiceBusClient.from_connection_string(primary) as client:
        for dest, messages in sorted(by_dest.items()):
            with client.get_queue_sender(dest) as sender:
                for start in range(0, len(messages), 200):
                    sender.send_messages(messages[start : start + 200])
            with lean(client.get_queue_receiver(dest, prefetch_count=0)) as receiver:
                moved = 0
                while moved < len(messages):
                    got = receiver.receive_messages(max_message_count=500, max_wait_time=2)
                    if not got:
                        raise RuntimeError(f"{dest}: {moved} of {len(messages)} dead-lettered")
                    for m in got:
                        receiver.dead_letter_message(m, reason="bench", error_description="b")
                    moved += len(got)


def baseline_redrive(primary: str) -> tuple[int, dict[str, int]]:
    """The explorer tools' re-drive: per dead-letter queue, receive up to 100 in
    peek-lock, send each message on its own to its queue without the dead-letter
    properties, complete it. Returns (messages moved, operations)."""
    ops = {"receives": 0, "sends": 0, "completes": 0}
    dropped = {b"DeadLetterReason", b"DeadLetterErrorDescription"}
    with ServiceBusClient.from_connection_string(primary) as client:
        for d in range(DESTINATIONS):
            dest = f"dest-{d:02d}"
            with (
                client.get_queue_receiver(dest, sub_queue="deadletter") as receiver,
                client.get_queue_sender(dest) as sender,
            ):
                while batch := receiver.receive_messages(max_message_count=100, max_wait_time=1):
                    ops["receives"] += len(batch)
                    for m in batch:
                        props = {
                            k: v
                            for k, v in (m.application_properties or {}).items()
                            if k not in dropped
                        }
                        sender.send_messages(
                            ServiceBusMessage(
                                b"".join(m.body),
                                message_id=m.message_id,
                                session_id=m.session_id,
                                partition_key=m.partition_key,
                                application_properties=props,
                            )
                        )
                        ops["sends"] += 1
                        receiver.complete_message(m)
                        ops["completes"] += 1
    return ops["sends"], ops


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain_and_check(primary: str) -> tuple[int, int]:
    """Receives every destination's messages; returns (messages, order violations)."""
    received, violations, _ = drain_checked(primary)
    return received, violations


def drain_checked(primary: str) -> tuple[int, int, float | None]:
    """Receives every destination's messages; returns (messages, order violations, the
    earliest enqueue time among them as a POSIX timestamp: when the first message reached
    a primary, by the local Service Bus's clock, which is this machine's; None: none).
    Destinations are drained side by side: each ends with a receive that waits a second
    for nothing, and fifty of them one after another made every check a minute long."""

    def drain(d: int) -> tuple[int, int, float | None]:
        received = violations = 0
        first: float | None = None
        last: dict[str, int] = {}
        with ServiceBusClient.from_connection_string(primary) as client:
            # lean: no keep-alive thread for its close to wait on (up to 1 s per
            # destination), no sleeps in its open
            with lean(
                client.get_queue_receiver(
                    f"dest-{d:02d}", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
                )
            ) as receiver:
                while batch := receiver.receive_messages(max_message_count=500, max_wait_time=1):
                    for m in batch:
                        received += 1
                        if m.enqueued_time_utc is not None:
                            at = m.enqueued_time_utc.timestamp()
                            first = at if first is None else min(first, at)
                        key = m.session_id or m.partition_key
                        if key is None:
                            continue
                        n = (m.application_properties or {})[b"n"]
                        if n < last.get(key, -1):
                            violations += 1
                        last[key] = n
        return received, violations, first

    with ThreadPoolExecutor(max_workers=10) as pool:
        counts = list(pool.map(drain, range(DESTINATIONS)))
    firsts = [c[2] for c in counts if c[2] is not None]
    return sum(c[0] for c in counts), sum(c[1] for c in counts), min(firsts, default=None)


#: Extra ``spark.conf`` settings for syphon's config (``--spark-conf``).
SPARK_CONF: dict[str, str] = {}


def write_config(tmp: Path, ns: dict[str, Any], discovery: str = "management") -> Path:
    os.environ["BENCH_SECONDARY"] = ns["secondary"]["conn"]
    os.environ["BENCH_PRIMARY"] = ns["primary"]["conn"]
    conf = tmp / f"bench-{discovery}.yaml"
    conf.write_text(
        f"""
secondary:
  namespace: bench-secondary
  connection_string: {{env: BENCH_SECONDARY}}
  management_endpoint: "{ns["secondary"]["admin"]}"
  ca_bundle: "{ns["secondary"]["ca"]}"
primaries:
  - namespace: {PRIMARY}
    connection_string: {{env: BENCH_PRIMARY}}
    management_endpoint: "{ns["primary"]["admin"]}"
    ca_bundle: "{ns["primary"]["ca"]}"
backlog:
  queue_count: {QUEUES}
  discovery: {discovery}
audit:
  path: "{tmp / "delta"}"
sources:
  - {{name: backlog, kind: backlog}}
  - {{name: redrive, kind: dead_letter, namespace: {PRIMARY}}}
{spark_section()}""",
        encoding="utf-8",
    )
    return conf


def spark_section() -> str:
    if not SPARK_CONF:
        return ""
    return "spark:\n  conf:\n" + "".join(f'    {k}: "{v}"\n' for k, v in SPARK_CONF.items())


def empty_run(conf: Path) -> tuple[float, str, dict[str, Any]]:
    """``syphon run`` as a process on the empty backlog: (wall, status, operations)."""
    clock = time.monotonic()
    proc = subprocess.run(
        [str(SYPHON), "run", "--config", str(conf)],
        capture_output=True,
        text=True,
        env=os.environ,
        check=False,
    )
    wall = time.monotonic() - clock
    last = ledger(conf)[-1]
    spark_started = "Spark" in proc.stderr and "session ready" in proc.stderr
    status = f"{last.status} (exit {proc.returncode}, Spark started: {spark_started})"
    return wall, status, last.operations.as_map()


SYPHON = Path(sys.executable).with_name("syphon")

#: The command measured as ``syphon``: a profiler may be put in front of it, e.g.
#: ``BENCH_SYPHON_PREFIX="py-spy record -s -o /tmp/run.svg --"`` (see the README).
SYPHON_PREFIX = os.environ.get("BENCH_SYPHON_PREFIX", "").split()

#: The floor: syphon's Spark session, from the config and fitted to the run's size as
#: syphon fits it, and one trivial action.
FLOOR = """
import sys
from syphon.app.spark import build_spark_session
from syphon.core.sessions import SessionFit
from syphon.core.configfile import load_config
spark = build_spark_session(load_config(sys.argv[1]).spark, fit=SessionFit(int(sys.argv[2])))
assert spark.range(1).count() == 1
"""


def ledger(conf: Path) -> list[Any]:
    """The run ledger of the audit ``conf`` names."""
    from syphon.store.deltars import DeltaRsStore

    return DeltaRsStore(load_config(conf).audit.path, lambda: None).runs()  # type: ignore[arg-type,return-value]


@dataclass
class Row:
    """One tool's run: its figures and, for syphon, its ledger's final record."""

    name: str
    usage: TreeUsage
    moved: int
    received: int = 0
    violations: int = 0
    credits: float = 0.0
    transfers: int = 0
    settles: int = 0
    sb_cpu: float = 0.0
    record: Any = None


def loop_child(kind: str) -> None:
    """The loop, as its own process (``bench_run.py _loop backlog|redrive``): prints
    the messages it moved and its operations as JSON."""
    secondary, primary = os.environ["BENCH_LOOP_SECONDARY"], os.environ["BENCH_LOOP_PRIMARY"]
    moved, ops = baseline(secondary, primary) if kind == "backlog" else baseline_redrive(primary)
    print(json.dumps({"moved": moved, "ops": ops}))


def floor(conf: Path, messages: int) -> TreeUsage:
    usage = run_measured([sys.executable, "-c", FLOOR, str(conf), str(messages)])
    if usage.returncode:
        raise RuntimeError(f"the floor failed: {usage.stderr[-2000:]}")
    return usage


def measure(
    ns: dict[str, Any],
    direct: dict[str, Any],
    pid: int,
    total: int,
    tmp: Path,
    with_loop: bool = True,
    redrive: bool = False,
    against: Path | None = None,
    connect: Any = None,
    once: bool = False,
    driver_io: bool = False,
) -> list[Row]:
    """The loop and ``syphon run``, each a cold process, on the same work through the
    endpoints ``ns`` (parking and checking go direct): the backlog drain, or
    (``redrive``) the dead-letter re-drive (see the module docstring). ``against``: a
    source tree (another commit's worktree) whose syphon is measured too, after this
    one's, on the same work (a row named ``syphon@against``). ``connect``: a running
    Spark Connect server, whose client ``syphon run`` is measured too (a row named
    ``syphon@connect``; the server's own CPU is printed beside it). ``once``: ``syphon
    run`` with ``run.read: once`` is measured too, on the same work (a row named
    ``syphon-once`` or ``dlq-syphon-once``). ``driver_io``: ``syphon run`` with
    ``run.service_io: driver`` too (its sends, and a peeking read's peeks and settle, in
    the driver; a row named ``syphon-driver``), beside the row whose tasks do them."""
    if redrive:
        names, source = ("dlq-loop", "dlq-syphon"), "redrive"

        def fill() -> None:
            park_dead_letters(direct["primary"]["conn"], total)
    else:
        names, source = ("loop", "syphon"), "backlog"

        def fill() -> None:
            park(direct["secondary"]["conn"], total)

    rows = []
    if with_loop:
        fill()
        env = {
            **os.environ,
            "BENCH_LOOP_SECONDARY": ns["secondary"]["conn"],
            "BENCH_LOOP_PRIMARY": ns["primary"]["conn"],
        }
        cpu = cpu_seconds(pid)
        usage = run_measured([sys.executable, __file__, "_loop", source], env=env)
        sb_cpu = cpu_seconds(pid) - cpu
        if usage.returncode:
            raise RuntimeError(f"the loop failed: {usage.stderr[-2000:]}")
        done = json.loads(usage.stdout.strip().splitlines()[-1])
        received, bad = drain_and_check(direct["primary"]["conn"])
        moved, ops = done["moved"], done["ops"]
        rows.append(
            Row(
                names[0],
                usage,
                moved,
                received,
                bad,
                sum(ops.values()) / moved,
                ops["sends"],
                ops["completes"],
                sb_cpu,
            )
        )

    rows.append(_syphon_row(ns, direct, pid, total, tmp, fill, names[1], source, os.environ))
    if once:
        env = {**os.environ, "SYPHON__RUN__READ": "once"}
        rows.append(_syphon_row(ns, direct, pid, total, tmp, fill, f"{names[1]}-once", source, env))
    if driver_io:
        env = {**os.environ, "SYPHON__RUN__SERVICE_IO": "driver"}
        name = f"{names[1]}-driver"
        rows.append(_syphon_row(ns, direct, pid, total, tmp, fill, name, source, env))
    if against is not None:
        env = {**os.environ, "PYTHONPATH": str(against / "src")}
        rows.append(
            _syphon_row(ns, direct, pid, total, tmp, fill, f"{names[1]}@against", source, env)
        )
    if connect is not None:
        env = {**os.environ, "SPARK_REMOTE": connect.remote, "SYPHON__SPARK__MASTER": "null"}
        before = tree_cpu(connect.process.pid)
        row = _syphon_row(ns, direct, pid, total, tmp, fill, f"{names[1]}@connect", source, env)
        spent = tree_cpu(connect.process.pid) - before
        print(
            f"  {row.name}: the client's tree {row.usage.cpu:.1f} CPU-s, peak "
            f"{row.usage.peak_pss / 1e9:.2f} GB; the Connect server's tree (its JVM and "
            f"Python workers) {spent:.1f} CPU-s, {tree_rss(connect.process.pid) / 1e9:.2f} GB "
            f"resident after the run; together {row.usage.cpu + spent:.1f} CPU-s",
            flush=True,
        )
        rows.append(row)
    return rows


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds the process tree of ``pid`` has used so far (the live processes', with
    what their finished children left them)."""
    total = 0.0
    for p in _tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
        total += ticks / os.sysconf("SC_CLK_TCK")
    return total


def tree_rss(pid: int) -> int:
    """Bytes resident in the process tree of ``pid`` now."""
    total = 0
    for p in _tree(pid):
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf(
                "SC_PAGE_SIZE"
            )
        except OSError:
            continue
    return total


def _syphon_row(
    ns: dict[str, Any],
    direct: dict[str, Any],
    pid: int,
    total: int,
    tmp: Path,
    fill: Any,
    name: str,
    source: str,
    env: Any,
) -> Row:
    """One cold ``syphon run`` process on freshly parked work (``env``: its environment)."""
    fill()
    run_id = f"bench-{source}-{total}-{uuid.uuid4().hex[:6]}"
    # an audit of its own: the same MessageIds are parked for every run, and an earlier
    # run's audit would make them duplicates
    (tmp / run_id).mkdir()
    conf = write_config(tmp / run_id, ns)
    cpu = cpu_seconds(pid)
    command = [*SYPHON_PREFIX, str(SYPHON), "run", "--config", str(conf), "--source", source]
    usage = run_measured([*command, "--run-id", run_id], env=env)
    sb_cpu = cpu_seconds(pid) - cpu
    if usage.returncode not in (0, 5):
        raise RuntimeError(f"syphon run exited {usage.returncode}: {usage.stderr[-3000:]}")
    received, bad = drain_and_check(direct["primary"]["conn"])
    record = [r for r in ledger(conf) if r.run_id == run_id and r.finished_at is not None][-1]
    o = record.operations
    sent = o.replay_messages_sent or 0
    credits = o.credits_estimated / max(sent, 1)
    transfers, settles = o.replay_send_transfers or 0, o.settle_requests or 0
    return Row(name, usage, sent, received, bad, credits, transfers, settles, sb_cpu, record)


def warm_row(ns: dict[str, Any], direct: dict[str, Any], pid: int, total: int, tmp: Path) -> Row:
    """``syphon run`` in this process after a 500-message run started its session: a
    warm figure (labelled as such), the CPU of this process and its children."""
    park(direct["secondary"]["conn"], 500)
    (tmp / "warm").mkdir()
    run_with_report(build_context(load_config(write_config(tmp / "warm", direct))))
    drain_and_check(direct["primary"]["conn"])
    park(direct["secondary"]["conn"], total)
    (tmp / "warm-measured").mkdir()
    config = load_config(write_config(tmp / "warm-measured", ns))
    before = resource.getrusage(resource.RUSAGE_SELF)
    clock, cpu = time.monotonic(), cpu_seconds(pid)
    result = run_with_report(build_context(config))
    wall, sb_cpu = time.monotonic() - clock, cpu_seconds(pid) - cpu
    after = resource.getrusage(resource.RUSAGE_SELF)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    received, bad = drain_and_check(direct["primary"]["conn"])
    o = result.operations
    sent = o.replay_messages_sent or 0
    # the JVM and its workers are this process's children, alive: their CPU from /proc
    usage = TreeUsage(wall, spent, 0, {"driver": spent})
    return Row(
        "warm",
        usage,
        sent,
        received,
        bad,
        o.credits_estimated / max(sent, 1),
        o.replay_send_transfers or 0,
        o.settle_requests or 0,
        sb_cpu,
        result,
    )


def first_run(direct: dict[str, Any], pid: int, root: Path) -> None:
    """The first run of an environment, 500 messages: its local session writes the JVM's
    class archive at its end (syphon.app.classarchive), which every later process of the
    invocation (the floor too) starts from. The archive is the invocation's own, so each
    invocation measures a first run."""
    from syphon.app.classarchive import ARCHIVE_ENV, class_archive

    os.environ[ARCHIVE_ENV] = str(root / "jvm")
    if class_archive("") is None:
        return
    (row,) = measure(direct, direct, pid, 500, root, with_loop=False)
    archives = list((root / "jvm").glob("*.jsa"))
    size = f"{archives[0].stat().st_size / 1e6:.0f} MB" if archives else "none written"
    print(
        f"first run of an environment (500 messages, writes the JVM class archive: "
        f"{size}): wall {row.usage.wall:.1f} s, CPU {row.usage.cpu:.1f} s",
        flush=True,
    )


def print_rows(
    total: int, table: list[tuple[float, list[Row]]], floor_usage: TreeUsage | None
) -> None:
    head = (
        f"{'delay':>6} {'tool':<15} {'wall s':>8} {'msg/s':>8} {'delivered':>10} "
        f"{'violations':>10} {'credits/msg':>11} {'transfers':>9} {'settle req':>10} "
        f"{'CPU s':>7} {'CPU ms/msg':>10} {'peak GB':>8} {'SB CPU s':>8}"
    )
    print(f"{total:,} messages, every tool a cold process (but the row warm)")
    print(head)
    for delay, rows in table:
        for r in rows:
            u = r.usage
            peak = f"{u.peak_pss / 1e9:>8.2f}" if u.peak_pss else f"{'-':>8}"
            print(
                f"{delay:>4g}ms {r.name:<15} {u.wall:>8.1f} {r.moved / u.wall:>8,.0f} "
                f"{r.received:>10,} {r.violations:>10} {r.credits:>11.3f} {r.transfers:>9,} "
                f"{r.settles:>10,} {u.cpu:>7.1f} {1000 * u.cpu / max(r.moved, 1):>10.2f} "
                f"{peak} {r.sb_cpu:>8.1f}"
            )
        walls = {r.name: r.usage.wall for r in rows}
        for loop, tool in (
            ("loop", "syphon"),
            ("loop", "syphon@against"),
            ("loop", "warm"),
            ("dlq-loop", "dlq-syphon"),
            ("syphon", "syphon-once"),
            ("dlq-syphon", "dlq-syphon-once"),
            ("syphon", "syphon-driver"),
            ("dlq-syphon", "dlq-syphon-driver"),
        ):
            if loop in walls and tool in walls:
                print(
                    f"{'':>6} ratio      {walls[loop] / walls[tool]:>8.2f}x  ({tool} against "
                    f"{loop}, wall)"
                )
        for r in rows:
            if r.record is not None and r.name != "warm":
                o = r.record.operations
                print(
                    f"{'':>6} {r.name} reads: peeked {o.snapshot_messages_peeked or 0:,}, "
                    f"received by the read {o.snapshot_messages_received or 0:,} and by the "
                    f"settle {o.settle_receives or 0:,}; credits per replayed message "
                    f"{r.credits:.3f}"
                )
            if r.name in (
                "syphon",
                "dlq-syphon",
                "syphon-once",
                "dlq-syphon-once",
            ) or r.name.endswith("-driver"):
                kinds = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.usage.by_kind.items()))
                print(f"{'':>6} {r.name} CPU by process (sampled): {kinds}")
                print(
                    f"{'':>6} {r.name} stages: "
                    + ", ".join(f"{k} {v:.1f} s" for k, v in r.record.timings.as_map().items())
                )
                if floor_usage is not None:
                    print(
                        f"{'':>6} {r.name} against the floor: wall "
                        f"{r.usage.wall / floor_usage.wall:.2f}x, CPU "
                        f"{r.usage.cpu / floor_usage.cpu:.2f}x"
                    )


def print_sizes(sizes: list[tuple[int, Row, Row | None]]) -> None:
    """Cold runs by size on loopback, and the margins between consecutive sizes."""
    print("sizes (loopback, cold processes):")
    print(
        f"{'messages':>9} {'syphon wall':>11} {'CPU s':>7} {'peak GB':>8} "
        f"{'loop wall':>10} {'loop CPU':>9}  stages"
    )
    for n, r, loop in sizes:
        stages = ", ".join(f"{k} {v:.1f}" for k, v in r.record.timings.as_map().items())
        lw = f"{loop.usage.wall:>10.1f} {loop.usage.cpu:>9.1f}" if loop else f"{'-':>10} {'-':>9}"
        print(
            f"{n:>9,} {r.usage.wall:>11.1f} {r.usage.cpu:>7.1f} "
            f"{r.usage.peak_pss / 1e9:>8.2f} {lw}  {stages}"
        )
    for (n0, a, la), (n1, b, lb) in itertools.pairwise(sizes):
        dn = n1 - n0
        ta, tb = a.record.timings.as_map(), b.record.timings.as_map()
        per_stage = ", ".join(f"{k} {1000 * (tb.get(k, 0) - ta.get(k, 0)) / dn:.3f}" for k in tb)
        loop = ""
        if la is not None and lb is not None:
            loop = (
                f"; loop wall {1000 * (lb.usage.wall - la.usage.wall) / dn:.3f} ms, CPU "
                f"{1000 * (lb.usage.cpu - la.usage.cpu) / dn:.3f} ms"
            )
        print(
            f"  {n0:,} -> {n1:,}, per extra message: syphon wall "
            f"{1000 * (b.usage.wall - a.usage.wall) / dn:.3f} ms, CPU "
            f"{1000 * (b.usage.cpu - a.usage.cpu) / dn:.3f} ms{loop}; stages (ms): "
            f"{per_stage}"
        )
    if sizes:
        n, r, _ = sizes[0]
        if len(sizes) > 1:
            n1, r1, _ = sizes[1]
            fixed_wall = r.usage.wall - n * (r1.usage.wall - r.usage.wall) / (n1 - n)
            fixed_cpu = r.usage.cpu - n * (r1.usage.cpu - r.usage.cpu) / (n1 - n)
            print(
                f"  fixed cost (extrapolated to 0 messages): wall {fixed_wall:.1f} s, CPU "
                f"{fixed_cpu:.1f} s"
            )


def median_row(rows: list[Row]) -> Row | None:
    """The run of median wall time among tries of the same work (None: no tries)."""
    return sorted(rows, key=lambda r: r.usage.wall)[len(rows) // 2] if rows else None


def print_targets(
    table: list[tuple[float, list[Row]]],
    sizes: list[tuple[int, Row, Row | None]],
    floor_usage: TreeUsage | None,
) -> None:
    """Issue 37's targets, from the figures of this invocation (what is not measured in it
    is said so): the fixed cost against the floor, the marginal CPU per message against
    the loop's, the ratios on loopback and at 5 ms, the peak memory by size."""
    print("targets (this invocation):")
    by_delay = {d: {r.name: r for r in rows} for d, rows in table}
    if sizes and floor_usage is not None:
        n, r, _ = sizes[0]
        print(
            f"  fixed cost: {n:,} messages cold {r.usage.wall:.1f} s = "
            f"{r.usage.wall / floor_usage.wall:.2f}x the floor ({floor_usage.wall:.1f} s); "
            f"target at most 2x"
        )
    loop0 = by_delay.get(0.0, {}).get("loop")
    big = [(n, r) for n, r, _ in sizes if n >= 20_000]
    if loop0 is not None and len(big) >= 2:
        (n0, a), (n1, b) = big[0], big[-1]
        mine = 1000 * (b.usage.cpu - a.usage.cpu) / (n1 - n0)
        loops = 1000 * loop0.usage.cpu / max(loop0.moved, 1)
        print(
            f"  marginal CPU {n0:,} -> {n1:,}: {mine:.3f} ms per message against the loop's "
            f"client {loops:.3f} ms ({mine / loops:.2f}x); target at most 0.5x"
        )
    for delay, want in ((0.0, 4), (5.0, 20)):
        rows = by_delay.get(delay, {})
        if "loop" in rows and "syphon" in rows:
            ratio = rows["loop"].usage.wall / rows["syphon"].usage.wall
            print(f"  {delay:g} ms one way: {ratio:.2f}x the loop (wall); target at least {want}x")
    if len(sizes) > 1:
        peaks = ", ".join(f"{n:,} {r.usage.peak_pss / 1e9:.2f} GB" for n, r, _ in sizes)
        print(f"  peak memory by size: {peaks}; target flat")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "_loop":
        loop_child(sys.argv[2])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--delays", default="0,5", help="one-way network delays to measure at, in ms (default 0,5)"
    )
    parser.add_argument(
        "--sizes",
        default="",
        help="backlog sizes for cold syphon runs on loopback, e.g. 5000,20000,60000: the "
        "marginal cost per message between sizes",
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="add a row of syphon run inside this process with its Spark session started "
        "by an earlier run (a notebook, a cluster's second run): a warm figure",
    )
    parser.add_argument(
        "--syphon-only",
        action="store_true",
        help="leave the loop out (to profile syphon's stages; no ratio is printed)",
    )
    parser.add_argument(
        "--redrive",
        action="store_true",
        help="also re-drive the same messages from their queues' dead-letter queues, by "
        "the explorer tools' loop and by syphon run --source redrive",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for syphon's config (and the floor's), e.g. to try JVM options "
        "or turn on the event log (repeatable)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="a source tree of another commit (git worktree add DIR COMMIT): its syphon run "
        "is measured too, in the same invocation, after each of this tree's runs",
    )
    parser.add_argument(
        "--sizes-syphon-only",
        action="store_true",
        help="leave the loop out of the --sizes runs only (its client CPU per message is "
        "in the --delays rows of the same invocation)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per size of --sizes (with --against: this tree's and the other's in "
        "turn); the run of median wall time stands for the size",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="leave out the floor (Spark's start and one action)"
    )
    parser.add_argument(
        "--read-once",
        action="store_true",
        help="also run syphon with run.read: once on the same work, at each delay (rows "
        "syphon-once and, with --redrive, dlq-syphon-once)",
    )
    parser.add_argument(
        "--driver-io",
        action="store_true",
        help="also run syphon with run.service_io: driver on the same work, at each delay "
        "(rows syphon-driver and, with --redrive, dlq-syphon-driver): the sends (and a "
        "peeking read's peeks and settle) in the driver, as on compute whose tasks have no "
        "network, beside the row whose tasks do them",
    )
    parser.add_argument(
        "--connect",
        action="store_true",
        help="also run syphon as the client of a local Spark Connect server (started once, "
        "before the runs, as a platform's is: a row syphon@connect beside the classic one, "
        "with the server's CPU)",
    )
    args = parser.parse_args()
    SPARK_CONF.update(dict(kv.split("=", 1) for kv in args.spark_conf))
    become_subreaper()
    total = args.messages
    delays = [float(d) for d in args.delays.split(",") if d != ""]
    sizes = [int(n) for n in args.sizes.split(",") if n]
    with serving(delays) as info, contextlib.ExitStack() as stack:
        direct, pid = info["at"][0.0], info["pid"]
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            first_run(direct, pid, root)
            server = None
            if args.connect:
                sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/
                from support.connect_server import start_connect_server

                server = start_connect_server(root / "connect")
                stack.callback(server.stop)
            floor_usage = None
            if not args.no_floor:
                # the session's settings depend on the run's size: the smallest measured
                floor_usage = floor(write_config(root, direct), min([total, *sizes]))
                print(
                    f"floor (a process: Spark session + one action): wall "
                    f"{floor_usage.wall:.1f} s, CPU {floor_usage.cpu:.1f} s, peak "
                    f"{floor_usage.peak_pss / 1e9:.2f} GB",
                    flush=True,
                )
            table = []
            for delay in delays:
                rows = measure(
                    info["at"][delay],
                    direct,
                    pid,
                    total,
                    root,
                    not args.syphon_only,
                    against=args.against,
                    connect=server,
                    once=args.read_once,
                    driver_io=args.driver_io,
                )
                if args.redrive:
                    rows += measure(
                        info["at"][delay],
                        direct,
                        pid,
                        total,
                        root,
                        not args.syphon_only,
                        redrive=True,
                        once=args.read_once,
                        driver_io=args.driver_io,
                    )
                table.append((delay, rows))
                print(
                    f"{delay:g} ms one way: "
                    + ", ".join(f"{r.name} {r.usage.wall:.1f} s" for r in rows),
                    flush=True,
                )
            if args.warm:
                table.append(
                    (
                        0.0,
                        [
                            next(r for d, rs in table if d == 0 for r in rs if r.name == "loop"),
                            warm_row(direct, direct, pid, total, root),
                        ],
                    )
                )
            print_rows(total, table, floor_usage)
            by_size: list[tuple[int, Row, Row | None]] = []
            by_size_against: list[tuple[int, Row, Row | None]] = []
            for n in sizes:
                with_loop = not (args.syphon_only or args.sizes_syphon_only)
                tries = []
                for _ in range(args.repeat):
                    rows = measure(direct, direct, pid, n, root, with_loop, against=args.against)
                    tries.append({r.name: r for r in rows})
                    print(
                        f"size {n:,}: " + ", ".join(f"{r.name} {r.usage.wall:.1f} s" for r in rows),
                        flush=True,
                    )
                loop = median_row([t["loop"] for t in tries if "loop" in t])
                mine = median_row([t["syphon"] for t in tries])
                assert mine is not None
                by_size.append((n, mine, loop))
                other = median_row([t["syphon@against"] for t in tries if "syphon@against" in t])
                if other is not None:
                    by_size_against.append((n, other, None))
            if by_size_against:
                print(f"syphon@against ({args.against}):")
                print_sizes(by_size_against)
            if by_size:
                print_sizes(by_size)
                if floor_usage is not None:
                    n, r, _ = by_size[0]
                    print(
                        f"  {n:,} messages against the floor: wall "
                        f"{r.usage.wall / floor_usage.wall:.2f}x, CPU "
                        f"{r.usage.cpu / floor_usage.cpu:.2f}x"
                    )
            print_targets(table, by_size, floor_usage)
            for discovery in ("management", "probe"):
                wall, status, ops = empty_run(write_config(root, direct, discovery))
                shown = {k: v for k, v in ops.items() if v}
                print(
                    f"empty run, discovery by {discovery}: {wall:.2f} s, {status}, "
                    f"operations {shown}"
                )


if __name__ == "__main__":
    main()
