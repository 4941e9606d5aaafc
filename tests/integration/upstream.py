"""A real HTTP upstream on a loopback port, for the requests recorder and replay tests.

Routes (HTTP/1.1; every response carries ``server: upstream/1`` and a fixed ``date`` so
recorded exchanges can be asserted whole):

=================  ==========================================================================
``GET /json``      200 ``application/json`` ``{"rate":1.5,"currency":"EUR"}``, ``x-upstream: json``
``GET /text``      200 ``text/plain; charset=utf-8`` ``grüße, world``
``GET /binary``    200 ``application/octet-stream`` ``FF 00 'binary' 80``
``GET /sse``       200 ``text/event-stream``, chunked: one HTTP chunk per event (3 events)
``GET /slow``      200 ``text/plain``, chunked: ``one\\n``, ``two\\n``, ``three\\n`` 50 ms apart
``GET /fail``      500 ``application/json`` ``{"error":"boom"}``
``GET /sleep``     answers after 1 s (for client read timeouts)
``GET /big``       200 ``text/plain``, 10000 bytes
``GET /gzip``      200 ``application/json`` gzip-encoded ``{"zipped":true}``
``GET /cut``       200 chunked, one chunk ``partial``, then the connection is dropped
``GET /query``     200 ``application/json``: the query string as ``{"query": "..."}``
``GET /redirect``  302 to ``/json``
``HEAD <any>``     200 ``application/json``, ``content-length: 29``, no body
``POST /echo``     200: the request body (content-length or chunked) with its content type;
                   every received body is appended to :attr:`Upstream.received`; an
                   ``x-delay: <seconds>`` header holds the answer back that long
=================  ==========================================================================
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FIXED_DATE = "Thu, 01 Jan 2026 00:00:00 GMT"
SSE_EVENTS = (b"data: a\n\n", b"data: b\n\n", b'data: {"done":true}\n\n')
SLOW_CHUNKS = (b"one\n", b"two\n", b"three\n")
BIG_BODY = b"0123456789" * 1000


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def version_string(self) -> str:
        return "upstream/1"

    def date_time_string(self, timestamp: float | None = None) -> str:
        return FIXED_DATE

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _whole(
        self, status: int, content_type: str, body: bytes, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunked(self, content_type: str, chunks: tuple[bytes, ...], pause: float) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
            time.sleep(pause)
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/json":
            self._whole(
                200, "application/json", b'{"rate":1.5,"currency":"EUR"}', {"x-upstream": "json"}
            )
        elif path == "/text":
            self._whole(200, "text/plain; charset=utf-8", "grüße, world".encode())
        elif path == "/binary":
            self._whole(200, "application/octet-stream", b"\xff\x00binary\x80")
        elif path == "/sse":
            self._chunked("text/event-stream", SSE_EVENTS, 0.02)
        elif path == "/slow":
            self._chunked("text/plain", SLOW_CHUNKS, 0.05)
        elif path == "/fail":
            self._whole(500, "application/json", b'{"error":"boom"}')
        elif path == "/sleep":
            time.sleep(1.0)
            with contextlib.suppress(OSError):
                self._whole(200, "text/plain", b"late")
        elif path == "/big":
            self._whole(200, "text/plain", BIG_BODY)
        elif path == "/gzip":
            self._whole(
                200,
                "application/json",
                gzip.compress(b'{"zipped":true}'),
                {"content-encoding": "gzip"},
            )
        elif path == "/cut":
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"7\r\npartial\r\n")
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif path == "/redirect":
            self.send_response(302)
            self.send_header("location", "/json")
            self.send_header("content-length", "0")
            self.end_headers()
        elif path == "/query":
            self._whole(200, "application/json", json.dumps({"query": query}).encode())
        else:
            self._whole(404, "text/plain", b"no such route")

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "29")
        self.end_headers()

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def do_POST(self) -> None:
        body = self._read_body()
        self.server.received.append(body)
        time.sleep(float(self.headers.get("x-delay") or 0))  # answers in an order of our choice
        content_type = self.headers.get("content-type") or "application/octet-stream"
        self._whole(200, content_type, body)

    do_PUT = do_POST


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    received: list[bytes]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # dropped and timed-out connections are what some routes are for


class Upstream:
    """A running loopback upstream; :meth:`stop` closes its port (calls are then refused)."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.received = []
        self.port = self._server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self._stopped = False

    @property
    def received(self) -> list[bytes]:
        """Every request body ``POST /echo`` received, in order."""
        return self._server.received

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return int(port)


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a loopback port in a daemon thread; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
