"""A TCP proxy that delays every chunk by a fixed one-way delay, keeping order: a network
with a round trip of twice the delay, for measuring clients against the local Service Bus
as if it were in another building (5 ms one way is about an in-region round trip).

    proxy = DelayProxy("127.0.0.1", upstream_port, delay=0.005).start()
    ... connect to 127.0.0.1:proxy.port ...
    proxy.stop()

Bytes pass through untouched (TLS included); each direction of each connection is a
queue of (due time, chunk) written in order by its own thread, so a chunk never
overtakes an earlier one and the delay does not add up across chunks in flight.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time


class DelayProxy:
    """Forwards connections on a free loopback port to ``host:port`` with ``delay``
    seconds added to every chunk in each direction."""

    def __init__(self, host: str, port: int, delay: float) -> None:
        self.upstream = (host, port)
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []

    def start(self) -> DelayProxy:
        threading.Thread(target=self._accept, name="delay-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._listener.close()
        for s in list(self._sockets):
            _close(s)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(s)
            self._pipe(client, server)
            self._pipe(server, client)

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        """One direction: a reader stamps each chunk with its due time, a writer sends it
        then, in order; an end of stream is passed on after the chunks before it."""
        chunks: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

        def read() -> None:
            while True:
                try:
                    data = source.recv(65536)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if not data:
                    _shutdown(target)
                    return
                try:
                    target.sendall(data)
                except OSError:
                    _close(source)
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()


def _shutdown(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_WR)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.close()
