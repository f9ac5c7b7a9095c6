"""``python -m servicebus_emulator``: run the local Service Bus, or inject a fault.

    python -m servicebus_emulator [--port 5672] [--config entities.yaml] [--auto-create]
                                  [--control-port 0] [--admin-port 0]
    python -m servicebus_emulator fault --control URL ACTION [ENTITY] [--seconds S]
                                        [--partition P]

The first form prints the connection string, the management API's connection string
and CA bundle, and the control URL, then serves until interrupted (Ctrl-C or SIGTERM).
The second talks to a running emulator's control URL.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from servicebus_emulator.control import ACTIONS, ControlServer, send_fault
from servicebus_emulator.entities import EntityConfigError, NamespaceSpec, load_entities
from servicebus_emulator.server import Emulator


def _serve(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m servicebus_emulator")
    parser.add_argument("--port", type=int, default=5672, help="AMQP port; 0 picks a free one")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--config", help="YAML file declaring the queues and topics")
    parser.add_argument("--auto-create", action="store_true", help="create unknown queues on use")
    parser.add_argument("--control-port", type=int, default=0, help="fault endpoint port")
    parser.add_argument(
        "--admin-port", type=int, default=0, help="HTTPS management API port; 0 picks a free one"
    )
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        declared = load_entities(args.config) if args.config else NamespaceSpec()
    except (OSError, EntityConfigError) as exc:
        print(f"servicebus_emulator: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with Emulator(
        queues=declared.queues,
        topics=declared.topics,
        port=args.port,
        host=args.host,
        auto_create=args.auto_create,
        admin_port=args.admin_port,
    ) as sb:
        control = ControlServer(sb, args.control_port).start()
        print(f"connection string: {sb.connection_string}", flush=True)
        print(f"port: {sb.port}", flush=True)
        print(f"admin connection string: {sb.admin_connection_string}", flush=True)
        print(f"admin port: {sb.admin_port}", flush=True)
        print(f"ca bundle: {sb.ca_bundle}", flush=True)
        print(f"control: {control.url}", flush=True)
        try:
            stop.wait()
        finally:
            control.stop()
    return 0


def _fault(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m servicebus_emulator fault")
    parser.add_argument("--control", required=True, help="the control URL the emulator printed")
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("entity", nargs="?", default="*", help="queue name (default: all)")
    parser.add_argument("--seconds", type=float, default=0.0, help="delay, for 'slow'")
    parser.add_argument("--partition", type=int, help="partition, for 'partition-down/up'")
    args = parser.parse_args(argv)
    try:
        send_fault(args.control, args.action, args.entity, args.seconds, args.partition)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"servicebus_emulator fault: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["fault"]:
        return _fault(argv[1:])
    return _serve(argv)


if __name__ == "__main__":
    sys.exit(main())
