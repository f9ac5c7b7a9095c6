"""Wall time of ``syphon plan`` on a large backlog, split by stage.

    .venv/bin/python tests/benchmarks/bench_plan.py [--messages 100000]

Starts two local Service Bus namespaces in this process, fills 10 backlog queues of
the primary with backlog-form messages (1 KB bodies, 50 destinations, sessions and
partition keys) through the SDK, then runs the plan with local Spark (2 cores) and
prints the time of each stage and the rows per second.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from servicebus_emulator import Emulator, QueueSpec
from syphon.app.services import build_context
from syphon.app.spark import build_spark_session
from syphon.app.text import format_summary
from syphon.core.configfile import load_config
from syphon.job.plan.planning import plan
from syphon.job.request import run_request
from syphon.servicebus.backlog_messages import to_backlog_message

PRIMARY = "bench-primary"
QUEUES = 10
DESTINATIONS = 50


def fill(sb: Emulator, total: int) -> float:
    rng = random.Random(1)
    body = bytes(1024)
    started = time.monotonic()
    with ServiceBusClient.from_connection_string(sb.connection_string) as client:
        for q in range(QUEUES):
            path = f"{PRIMARY}/x-servicebus-transfer/{q}"
            with client.get_queue_sender(path) as sender:
                # the SDK's count leaves the batch's envelope out; the service does not
                room = 256 * 1024 - 2048
                batch = sender.create_message_batch(room)
                for i in range(q, total, QUEUES):
                    dest = f"dest-{rng.randrange(DESTINATIONS):02d}"
                    kind = rng.random()
                    msg = ServiceBusMessage(
                        body,
                        message_id=f"m{i}",
                        session_id=f"s{i % 97}" if kind < 0.3 else None,
                        partition_key=f"k{i % 89}" if 0.3 <= kind < 0.6 else None,
                    )
                    item = to_backlog_message(msg, dest)
                    try:
                        batch.add_message(item)
                    except ValueError:
                        sender.send_messages(batch)
                        batch = sender.create_message_batch(room)
                        batch.add_message(item)
                sender.send_messages(batch)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args()
    queues = [
        QueueSpec(f"{PRIMARY}/x-servicebus-transfer/{i}", max_size_in_megabytes=5120)
        for i in range(QUEUES)
    ]
    destinations = [QueueSpec(f"dest-{i:02d}") for i in range(DESTINATIONS)]
    with Emulator(queues=queues) as secondary, Emulator(queues=destinations) as primary:
        filled = fill(secondary, args.messages)
        print(f"backlog of {args.messages} messages written in {filled:.1f} s")
        os.environ["BENCH_SECONDARY"] = secondary.connection_string
        os.environ["BENCH_PRIMARY"] = primary.connection_string
        with tempfile.TemporaryDirectory() as tmp:
            conf = Path(tmp) / "bench.yaml"
            conf.write_text(
                f"""
secondary:
  namespace: bench-secondary
  connection_string: {{env: BENCH_SECONDARY}}
  management_endpoint: "{secondary.admin_endpoint}"
  ca_bundle: "{secondary.ca_bundle}"
primaries:
  - namespace: {PRIMARY}
    connection_string: {{env: BENCH_PRIMARY}}
    management_endpoint: "{primary.admin_endpoint}"
    ca_bundle: "{primary.ca_bundle}"
audit:
  path: "{Path(tmp) / "delta"}"
""",
                encoding="utf-8",
            )
            config = load_config(conf)
            clock = time.monotonic()
            spark = build_spark_session(config.spark)
            session = time.monotonic() - clock
            clock = time.monotonic()
            ctx = build_context(config, spark_factory=lambda: spark)
            result = plan(ctx, run_request(ctx))
            wall = time.monotonic() - clock
    print(format_summary(result).splitlines()[0])
    print(f"spark session start        {session:7.1f} s")
    for stage, seconds in result.timings.as_map().items():
        print(f"{stage:<26} {seconds:7.1f} s")
    print(f"plan wall time             {wall:7.1f} s  ({args.messages / wall:,.0f} messages/s)")


if __name__ == "__main__":
    main()
