"""The shop's upstream services, small enough to read in one sitting.

Run one, or all three in one process::

    python examples/shop/upstreams.py pricing   --port 8101
    python examples/shop/upstreams.py assistant --port 8102
    python examples/shop/upstreams.py tax       --port 8103
    python examples/shop/upstreams.py all       # 8101, 8102, 8103; --port 0 for free ports

Each service prints one line ``<name> listening on <address>`` on standard output once it
accepts connections (``--port 0`` lets the system pick a free port), and runs until SIGINT or
SIGTERM.

pricing (HTTP, JSON)
    ``GET /prices/<sku>`` answers ``{"sku", "unit_cents", "discount_percent"}``, or 404
    ``{"error": "unknown sku"}``. The gift card has no discount at all, and the service says
    so with ``"discount_percent": null`` (the shop does not expect that: see its README).
assistant (HTTP, server-sent events)
    ``POST /v1/notes`` with ``{"sku", "quantity"}`` streams a short packing note as
    ``text/event-stream``: one ``data: {"text": ...}`` event per word, then ``data: [DONE]``.
tax (a line protocol over TCP, not HTTP)
    The client sends ``RATE <country>\\n`` and reads one line back: ``OK <rate>`` or
    ``ERR <message>``. The shop calls it through an invoke boundary, because no HTTP or SQL
    recorder can see a raw socket.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PRICES: dict[str, dict[str, Any]] = {
    "mug": {"sku": "mug", "unit_cents": 1200, "discount_percent": 0},
    "tea": {"sku": "tea", "unit_cents": 850, "discount_percent": 10},
    "gift-card": {"sku": "gift-card", "unit_cents": 2500, "discount_percent": None},
}

TAX_RATES = {"DE": "0.19", "FR": "0.20", "US": "0.07"}

DEFAULT_PORTS = {"pricing": 8101, "assistant": 8102, "tax": 8103}


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: the demo's output stays readable."""

    def _json(self, status: int, value: Any) -> None:
        body = json.dumps(value).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class PricingHandler(_Quiet):
    """``GET /prices/<sku>``."""

    def do_GET(self) -> None:
        prefix = "/prices/"
        sku = self.path[len(prefix) :] if self.path.startswith(prefix) else None
        if sku in PRICES:
            self._json(200, PRICES[sku])
        else:
            self._json(404, {"error": "unknown sku"})


class AssistantHandler(_Quiet):
    """``POST /v1/notes``: a packing note, streamed word by word."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        try:
            asked = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": "a JSON body is expected"})
            return
        if self.path != "/v1/notes" or not isinstance(asked, dict):
            self._json(404, {"error": "not found"})
            return
        words = f"Pack {asked.get('quantity')} x {asked.get('sku')} with care".split()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for word in words:
                self._chunk(f"data: {json.dumps({'text': word})}\n\n".encode())
                time.sleep(0.01)
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True  # the client stopped reading; nothing to tell it

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class TaxHandler(socketserver.StreamRequestHandler):
    """``RATE <country>`` -> ``OK <rate>`` or ``ERR <message>``, one line each way."""

    def handle(self) -> None:
        for raw in self.rfile:
            words = raw.decode("utf-8", "replace").split()
            if len(words) == 2 and words[0] == "RATE" and words[1] in TAX_RATES:
                answer = f"OK {TAX_RATES[words[1]]}"
            elif len(words) == 2 and words[0] == "RATE":
                answer = f"ERR no tax rate for {words[1]}"
            else:
                answer = "ERR expected: RATE <country>"
            self.wfile.write(answer.encode("utf-8") + b"\n")


class _TaxServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def start(name: str, host: str, port: int) -> socketserver.BaseServer:
    """Start service ``name`` on a daemon thread; returns its server."""
    server: socketserver.BaseServer
    if name == "tax":
        server = _TaxServer((host, port), TaxHandler)
        address = f"{host}:{server.server_address[1]}"
    else:
        handler = PricingHandler if name == "pricing" else AssistantHandler
        http_server = ThreadingHTTPServer((host, port), handler)
        http_server.daemon_threads = True
        server = http_server
        address = f"http://{host}:{http_server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"{name} listening on {address}", flush=True)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The shop example's upstream services.")
    parser.add_argument("service", choices=[*DEFAULT_PORTS, "all"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="port of the service (default: pricing 8101, assistant 8102, tax 8103); "
        "with `all`, only 0 is accepted (every service on a free port)",
    )
    args = parser.parse_args(argv)
    names = list(DEFAULT_PORTS) if args.service == "all" else [args.service]
    if args.service == "all" and args.port not in (None, 0):
        parser.error("`all` takes no --port other than 0")
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    servers = [
        start(name, args.host, DEFAULT_PORTS[name] if args.port is None else args.port)
        for name in names
    ]
    with contextlib.suppress(KeyboardInterrupt):
        stopped.wait()
    for server in servers:
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
