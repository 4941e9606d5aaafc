"""A stand-in ingest whose health the outage benchmark chooses:
``python -m benchmarks._ingest healthy|500|hang``.

Prints ``listening <port>``. Every POST body is read in full; then ``healthy`` answers 202,
``500`` answers 500 and ``hang`` never answers (the connection stays open until the process
ends). ``GET /count`` answers the number of POSTs received so far.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_received = 0
_lock = threading.Lock()
_forever = threading.Event()


def _handler(mode: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are separate writes

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            global _received
            self.rfile.read(int(self.headers.get("content-length", "0")))
            with _lock:
                _received += 1
            if mode == "hang":
                _forever.wait()
                return
            self._answer(202 if mode == "healthy" else 500, b'{"accepted":true}')

        def do_GET(self) -> None:
            with _lock:
                count = _received
            self._answer(200, b'{"received":%d}' % count)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "healthy"
    if mode not in ("healthy", "500", "hang"):
        raise SystemExit(f"unknown mode {mode!r}: expected healthy, 500 or hang")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mode))
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
