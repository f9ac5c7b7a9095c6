"""A loopback HTTP endpoint that lets another process inject faults.

``POST /faults`` with JSON ``{"action": A, "entity": E, "seconds": S, "partition": P}``
where A is one of ``unavailable``, ``available``, ``throttle``, ``unthrottle``, ``slow``,
``drop`` (drop every connection), ``partition-down`` and ``partition-up`` (partition P of
a partitioned entity) or ``clear``. Answers ``{"ok": true}`` or 400 with a reason.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from servicebus_emulator.admin import SHUTDOWN_POLL_SECONDS
from servicebus_emulator.model import BrokerError

if TYPE_CHECKING:
    from servicebus_emulator.server import Emulator

ACTIONS = (
    "unavailable",
    "available",
    "throttle",
    "unthrottle",
    "slow",
    "drop",
    "partition-down",
    "partition-up",
    "clear",
)


def apply_fault(
    emulator: Emulator,
    action: str,
    entity: str = "*",
    seconds: float = 0.0,
    partition: int | None = None,
) -> None:
    """Applies one fault action (see the module docstring).

    Raises:
        ValueError: an unknown action, or a partition action without a partition.
    """
    if action in ("partition-down", "partition-up"):
        if partition is None:
            raise ValueError(f"{action} needs a partition number")
        emulator.make_partition_unavailable(entity, partition, action == "partition-down")
    elif action == "unavailable":
        emulator.make_unavailable(entity)
    elif action == "available":
        emulator.make_unavailable(entity, unavailable=False)
    elif action == "throttle":
        emulator.throttle(entity)
    elif action == "unthrottle":
        emulator.throttle(entity, busy=False)
    elif action == "slow":
        emulator.slow_down(seconds, entity)
    elif action == "drop":
        emulator.drop_connections()
    elif action == "clear":
        emulator.clear_faults()
    else:
        raise ValueError(f"unknown fault action {action!r} (one of {', '.join(ACTIONS)})")


class ControlServer:
    """The control endpoint of one emulator, on 127.0.0.1."""

    def __init__(self, emulator: Emulator, port: int = 0) -> None:
        handler = _handler_for(emulator)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            name="servicebus-emulator-control",
            daemon=True,
            # shutdown() waits for the loop to look at its flag: every 50 ms, not 0.5 s
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ControlServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler_for(emulator: Emulator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/faults":
                self._answer(404, {"ok": False, "error": "not found"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                apply_fault(
                    emulator,
                    str(body.get("action")),
                    str(body.get("entity") or "*"),
                    float(body.get("seconds") or 0.0),
                    None if body.get("partition") is None else int(body["partition"]),
                )
            except (ValueError, TypeError, BrokerError) as exc:
                self._answer(400, {"ok": False, "error": str(exc)})
                return
            self._answer(200, {"ok": True})

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def send_fault(
    url: str,
    action: str,
    entity: str = "*",
    seconds: float = 0.0,
    partition: int | None = None,
) -> None:
    """Asks a running emulator's control endpoint to apply a fault.

    Raises:
        RuntimeError: the endpoint refused the request.
    """
    if not url.startswith("http://127.0.0.1:") and not url.startswith("http://localhost:"):
        raise ValueError("the control endpoint is only served on loopback")
    payload = {"action": action, "entity": entity, "seconds": seconds, "partition": partition}
    data = json.dumps(payload).encode()
    request = urllib.request.Request(  # noqa: S310 (loopback http only, checked above)
        url.rstrip("/") + "/faults", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(json.loads(exc.read()).get("error", str(exc))) from exc
