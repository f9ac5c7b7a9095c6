"""syphon run against the seed's loop, at network delays, credits per message, and the
empty run.

    .venv/bin/python tests/benchmarks/bench_run.py [--messages 20000] [--delays 0,5]
        [--warm] [--syphon-only] [--redrive]

Both local Service Bus namespaces run in a child process (the same for both tools). The
backlog: ``--messages`` messages (1 KB bodies) over 10 backlog queues, 50 destination
queues, 30% in sessions and 30% with partition keys, parked round-robin in batches of
20 per queue, so that a session's messages span backlog queues. Every message carries
its place in its key's order (property ``n``, in backlog enqueue order).

1. Baseline: the seed's loop written plainly with the same SDK: per backlog queue, one
   after another, receive up to 100 in peek-lock, send each message on its own to its
   ``x-ms-path``, complete it.
2. ``syphon run`` (``syphon.job.run.run``, local Spark with 2 cores, Delta in a temporary
   folder) on the same backlog, parked again with the same seed.

Both tools run at each one-way delay of ``--delays`` (milliseconds; 0 is loopback): a
delay proxy (tests/latency_proxy.py) in the server's process sits in front of each
namespace's AMQP port and management API, so every round trip costs twice the delay;
parking and checking go direct. After each, the destinations are drained and order
violations counted per (destination, key): a message whose ``n`` is below the one
received before it.
Printed per delay and tool: wall time, messages/s, delivered, violations, credits per
replayed message (billable operations: the baseline's receives, sends and completes;
syphon's from its ledger: peeks, sends, receives, settlement requests), send
transfers, settlement requests, and the CPU time the local Service Bus process spent
serving each tool (both share the machine's 2 cores with it); then the ratio. Then the
empty run: ``syphon run`` as a process on empty backlog queues, wall time and the
ledger's operations, with discovery by management listing and by probing.
``--syphon-only`` leaves the baseline out, to look at syphon's stages quickly.

``--redrive`` adds, at each delay, the dead-letter re-drive of the same messages: they
are sent straight to their destinations (same keys, bodies and order) and dead-lettered
there (reason ``bench``), then moved back into their queues, first by the loop an
explorer tool runs (per dead-letter queue, receive up to 100 in peek-lock, send each on
its own to its queue without the dead-letter properties, complete it), then, dead-lettered
again, by ``syphon run --source redrive`` (a dead-letter source over every queue of the
primary, found by one listing). The same figures are printed for both, in rows
``dlq-loop`` and ``dlq-syphon`` under the backlog's.

The first syphon run of an invocation also starts the Spark session (about 5 s, in its
wall time) and warms its JVM and Python workers; later ones reuse them, as a notebook or
a second run on a cluster would. ``--warm`` runs syphon once on 500 messages before
measuring, so that every measured run is a warm one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: latency_proxy.py

from syphon.app.services import build_context, run_with_report
from syphon.core.configfile import load_config
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.servicebus.raw import lean

PRIMARY = "bench-primary"
QUEUES = 10
DESTINATIONS = 50
PER_BATCH = 20


def serve(ready: Any, stop: Any, delays: list[float]) -> None:
    """The child process: both namespaces until ``stop`` is set, and for each delay
    (milliseconds, one way) above 0 a delay proxy in front of each namespace's AMQP port
    and management API (tests/latency_proxy.py), all in this process."""
    from latency_proxy import DelayProxy
    from servicebus_emulator import Emulator, QueueSpec

    backlog = [QueueSpec(f"{PRIMARY}/x-servicebus-transfer/{i}", max_size_in_megabytes=5120)
               for i in range(QUEUES)]  # fmt: skip
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
                at[name] = {"conn": conn, "admin": admin, "ca": e.ca_bundle}
            endpoints[delay] = at
        ready.put({"pid": os.getpid(), "at": endpoints})
        stop.wait()
        for proxy in proxies:
            proxy.stop()


def park(secondary: str, total: int) -> None:
    """Fills the backlog queues (see the module docstring)."""
    rng = random.Random(7)
    body = bytes(1024)
    order: dict[tuple[str, str], int] = defaultdict(int)
    with ServiceBusClient.from_connection_string(secondary) as client:
        senders = [client.get_queue_sender(f"{PRIMARY}/x-servicebus-transfer/{q}")
                   for q in range(QUEUES)]  # fmt: skip
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
                    msg = ServiceBusMessage(body, message_id=f"m{i}", session_id=session,
                                            partition_key=key,
                                            application_properties={"n": n})  # fmt: skip
                    batch.add_message(to_backlog_message(msg, dest))
                    i += 1
                if len(batch):
                    sender.send_messages(batch)
        for sender in senders:
            sender.close()


def baseline(secondary: str, primary: str) -> tuple[int, dict[str, int]]:
    """The seed's loop. Returns (messages moved, operations)."""
    ops = {"receives": 0, "sends": 0, "completes": 0}
    with ServiceBusClient.from_connection_string(secondary) as source, \
            ServiceBusClient.from_connection_string(primary) as target:  # fmt: skip
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
                            b"".join(m.body), message_id=m.message_id,
                            session_id=session.decode() if session else None,
                            partition_key=m.partition_key, application_properties=props,
                        )  # fmt: skip
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
    body = bytes(1024)
    order: dict[tuple[str, str], int] = defaultdict(int)
    by_dest: dict[str, list[ServiceBusMessage]] = defaultdict(list)
    for i in range(total):
        dest = f"dest-{rng.randrange(DESTINATIONS):02d}"
        kind = rng.random()
        session = f"s{rng.randrange(97)}" if kind < 0.3 else None
        key = f"k{rng.randrange(89)}" if 0.3 <= kind < 0.6 else None
        n = order[(dest, session or key or "")]
        order[(dest, session or key or "")] += 1
        by_dest[dest].append(ServiceBusMessage(body, message_id=f"m{i}", session_id=session,
                                               partition_key=key,
                                               application_properties={"n": n}))  # fmt: skip
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
            with client.get_queue_receiver(dest, sub_queue="deadletter") as receiver, \
                    client.get_queue_sender(dest) as sender:  # fmt: skip
                while batch := receiver.receive_messages(max_message_count=100, max_wait_time=1):
                    ops["receives"] += len(batch)
                    for m in batch:
                        props = {k: v for k, v in (m.application_properties or {}).items()
                                 if k not in dropped}  # fmt: skip
                        sender.send_messages(ServiceBusMessage(
                            b"".join(m.body), message_id=m.message_id, session_id=m.session_id,
                            partition_key=m.partition_key, application_properties=props,
                        ))  # fmt: skip
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
    received = violations = 0
    with ServiceBusClient.from_connection_string(primary) as client:
        for d in range(DESTINATIONS):
            last: dict[str, int] = {}
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
                        key = m.session_id or m.partition_key
                        if key is None:
                            continue
                        n = (m.application_properties or {})[b"n"]
                        if n < last.get(key, -1):
                            violations += 1
                        last[key] = n
    return received, violations


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
""",
        encoding="utf-8",
    )
    return conf


def empty_run(conf: Path) -> tuple[float, str, dict[str, Any]]:
    """``syphon run`` as a process on the empty backlog: (wall, status, operations)."""
    syphon = Path(sys.executable).with_name("syphon")
    clock = time.monotonic()
    proc = subprocess.run([str(syphon), "run", "--config", str(conf)], capture_output=True,
                          text=True, env=os.environ, check=False)  # fmt: skip
    wall = time.monotonic() - clock
    from syphon.store.deltars import DeltaRsStore

    last = DeltaRsStore(load_config(conf).audit.path, lambda: None).runs()[-1]  # type: ignore[arg-type,return-value]
    spark_started = "Spark" in proc.stderr and "session ready" in proc.stderr
    status = f"{last.status} (exit {proc.returncode}, Spark started: {spark_started})"
    return wall, status, last.operations.as_map()


def measure(ns: dict[str, Any], direct: dict[str, Any], pid: int, total: int,
            with_baseline: bool = True, redrive: bool = False) -> list[Any]:  # fmt: skip
    """Both tools on the same work through the endpoints ``ns`` (parking and checking go
    direct): the backlog drain, or (``redrive``) the dead-letter re-drive (see the module
    docstring). Returns a row per tool, and syphon's run result."""
    from syphon.job.sources import run_source

    if redrive:
        names, source = ("dlq-loop", "dlq-syphon"), "redrive"

        def fill() -> None:
            park_dead_letters(direct["primary"]["conn"], total)

        def loop() -> tuple[int, dict[str, int]]:
            return baseline_redrive(ns["primary"]["conn"])
    else:
        names, source = ("baseline", "syphon"), "backlog"

        def fill() -> None:
            park(direct["secondary"]["conn"], total)

        def loop() -> tuple[int, dict[str, int]]:
            return baseline(ns["secondary"]["conn"], ns["primary"]["conn"])

    rows = []
    if with_baseline:
        fill()
        clock, cpu = time.monotonic(), cpu_seconds(pid)
        moved, ops = loop()
        wall, cpu_s = time.monotonic() - clock, cpu_seconds(pid) - cpu
        received, bad = drain_and_check(direct["primary"]["conn"])
        rows.append((names[0], wall, moved, received, bad, sum(ops.values()) / moved, cpu_s,
                     ops["sends"], ops["completes"]))  # fmt: skip

    fill()
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(Path(tmp), ns))
        clock, cpu = time.monotonic(), cpu_seconds(pid)
        ctx = build_context(config)
        result = run_with_report(ctx, source=run_source(ctx, source))
        wall, cpu_s = time.monotonic() - clock, cpu_seconds(pid) - cpu
    received, bad = drain_and_check(direct["primary"]["conn"])
    o = result.operations
    sent = o.replay_messages_sent or 0
    rows.append((names[1], wall, sent, received, bad, o.credits_estimated / max(sent, 1), cpu_s,
                 o.replay_send_transfers or 0, o.settle_requests or 0))  # fmt: skip
    return [rows, result]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument(
        "--delays", default="0,5", help="one-way network delays to measure at, in ms (default 0,5)"
    )
    parser.add_argument(
        "--warm", action="store_true",
        help="run syphon once on a small backlog first, so that every measured run finds "
             "the Spark session started and its JVM and Python workers warm (a notebook "
             "or a cluster's second run) rather than paying for them (spark-submit)",
    )  # fmt: skip
    parser.add_argument(
        "--syphon-only", action="store_true",
        help="leave the baseline out (to profile syphon's stages; no ratio is printed)",
    )  # fmt: skip
    parser.add_argument(
        "--redrive", action="store_true",
        help="also re-drive the same messages from their queues' dead-letter queues, by "
             "the explorer tools' loop and by syphon run --source redrive",
    )  # fmt: skip
    args = parser.parse_args()
    total = args.messages
    delays = sorted({0.0, *(float(d) for d in args.delays.split(","))})
    ctx = multiprocessing.get_context("spawn")
    ready, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=serve, args=(ready, stop, delays), daemon=True)
    server.start()
    info = ready.get(timeout=60)
    direct = info["at"][0.0]
    try:
        if args.warm:
            clock = time.monotonic()
            park(direct["secondary"]["conn"], 500)
            with tempfile.TemporaryDirectory() as tmp:
                run_with_report(build_context(load_config(write_config(Path(tmp), direct))))
            drain_and_check(direct["primary"]["conn"])
            print(
                f"warm-up run (500 messages, Spark session started): "
                f"{time.monotonic() - clock:.1f} s",
                flush=True,
            )
        table = []
        for delay in (float(d) for d in args.delays.split(",")):
            rows, result = measure(info["at"][delay], direct, info["pid"], total,
                                   not args.syphon_only)  # fmt: skip
            table.append((delay, rows))
            ratio = "" if args.syphon_only else (
                f"syphon / baseline {rows[0][1] / rows[-1][1]:.2f}x faster ")  # fmt: skip
            print(f"{delay:g} ms one way: {ratio}(status {result.status}; stages: "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.as_map().items())
                  + ")", flush=True)  # fmt: skip
            print(
                "  syphon operations: "
                + ", ".join(f"{k} {v}" for k, v in sorted(result.operations.as_map().items())),
                flush=True,
            )
            if args.redrive:
                more, again = measure(info["at"][delay], direct, info["pid"], total,
                                      not args.syphon_only, redrive=True)  # fmt: skip
                rows += more
                print(f"{delay:g} ms one way, re-drive: (status {again.status}; stages: "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in again.timings.as_map().items())
                      + ")", flush=True)  # fmt: skip

        head = (f"{'delay':>6} {'tool':<9} {'wall s':>8} {'msg/s':>8} {'delivered':>10} "
                f"{'violations':>11} {'credits/msg':>12} {'transfers':>10} {'settle req':>11} "
                f"{'SB CPU s':>9}")  # fmt: skip
        print(f"{total:,} messages")
        print(head)
        for delay, rows in table:
            for name, wall, n, received, bad, credits, cpu_s, transfers, settles in rows:
                print(f"{delay:>4g}ms {name:<9} {wall:>8.1f} {n / wall:>8,.0f} {received:>10,} "
                      f"{bad:>11} {credits:>12.3f} {transfers:>10,} {settles:>11,} "
                      f"{cpu_s:>9.1f}")  # fmt: skip
            walls = {name: wall for name, wall, *_ in rows}
            for loop, tool in (("baseline", "syphon"), ("dlq-loop", "dlq-syphon")):
                if loop in walls and tool in walls:
                    print(f"{'':>6} ratio     {walls[loop] / walls[tool]:>8.2f}x  ({tool})")

        for discovery in ("management", "probe"):
            with tempfile.TemporaryDirectory() as tmp:
                wall, status, ops = empty_run(write_config(Path(tmp), direct, discovery))
            shown = {k: v for k, v in ops.items() if v}
            print(
                f"empty run, discovery by {discovery}: {wall:.2f} s, {status}, operations {shown}"
            )
    finally:
        stop.set()
        server.join(timeout=30)


if __name__ == "__main__":
    main()
