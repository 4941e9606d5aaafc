"""The quotes service the tests call: a loopback HTTP server on a free port.

``GET /quotes?weight=<kg>`` answers ``{"quotes": [...]}``, three carriers priced by weight,
listed cheapest first or most expensive first at random, as a real search service may.
``QUOTES_ORDER=sorted`` or ``QUOTES_ORDER=reversed`` in the environment fixes the order (the
example's own tests use it to make the flaky test pass or fail on purpose).
"""

from __future__ import annotations

import json
import os
import random
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RATES = (("postal", 150, 150), ("courier", 600, 300), ("drone", 2000, 250))
"""Carrier, base price in cents, price per kg in cents."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        weight = int(urllib.parse.parse_qs(url.query).get("weight", ["1"])[0])
        listed = [{"carrier": c, "cents": base + per_kg * weight} for c, base, per_kg in RATES]
        order = os.environ.get("QUOTES_ORDER") or random.choice(["sorted", "reversed"])
        if order == "reversed":
            listed.reverse()
        body = json.dumps({"quotes": listed}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class QuotesService:
    """The service on ``127.0.0.1:<free port>``, served from a daemon thread."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
