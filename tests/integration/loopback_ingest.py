"""A real loopback HTTP server standing in for an ingest that misbehaves on demand.

``LoopbackIngest(answers=[500, 202], default=202)`` answers each POST with the next status of
``answers`` (then ``default``); the status ``HANG`` reads the request and never answers until
the server stops. Every request is kept (path, headers, body) in ``requests``.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = -1


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackIngest:
    answers: list[int] = field(default_factory=list)
    default: int = 202
    requests: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._arrived = threading.Condition(self._lock)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                with owner._arrived:
                    owner.requests.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    status = owner.answers.pop(0) if owner.answers else owner.default
                    owner._arrived.notify_all()
                if status == HANG:
                    owner._stopping.wait(60)
                    return
                payload = b'{"accepted":true}'
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/capture-batches"

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        """Block until ``count`` requests arrived (or the timeout), return them."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.requests) >= count, timeout)
            return list(self.requests)

    def stop(self) -> None:
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()


def down_url() -> str:
    """A loopback URL on which nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/capture-batches"
