"""Structured access logs: one JSON line per request, written by an ASGI middleware.

Each line goes to the ``reproit_otel.ingest.access`` logger (``reproit-otel serve`` prints it
on stderr) and holds::

    {"ts": "2026-11-30T00:08:51.593Z", "method": "POST", "path": "/v1/capture-batches",
     "status": 202, "bytesIn": 4096, "bytesOut": 74, "durationMs": 3.2, "client": "127.0.0.1"}

``bytesIn`` is the declared ``content-length`` (``null`` when the client streamed); the query
string is left out because it is not needed to follow traffic and keeps filters out of logs.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reproit_otel.ingest.numbers import ascii_int

ACCESS_LOGGER = "reproit_otel.ingest.access"

_log = logging.getLogger(ACCESS_LOGGER)


def _now_rfc3339() -> str:
    now = time.time()
    millis = int(now * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{millis:03d}Z"


class AccessLogMiddleware:
    """Wraps an ASGI app and logs every HTTP request it answers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state: dict[str, Any] = {"status": None, "bytes": 0}

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
            elif message["type"] == "http.response.body":
                state["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            headers = dict(scope.get("headers") or [])
            declared = headers.get(b"content-length", b"").decode("latin-1")
            client = scope.get("client")
            line = {
                "ts": _now_rfc3339(),
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": state["status"] if state["status"] is not None else 500,
                "bytesIn": ascii_int(declared),
                "bytesOut": state["bytes"],
                "durationMs": round((time.perf_counter() - started) * 1000, 3),
                "client": client[0] if client else None,
            }
            _log.info(json.dumps(line, separators=(",", ":")))
