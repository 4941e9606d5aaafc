"""An HTTP/2 upstream as a plain ASGI app, served by hypercorn (cleartext, prior knowledge).

``GET /json``: ``{"rate":1.5}`` with ``x-version`` (the HTTP version the request came in);
``GET /stream``: three body pieces sent 50 ms apart; ``POST /echo``: the request body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Message = dict[str, Any]
PIECES = (b"alpha\n", b"beta\n", b"gamma\n")


async def app(
    scope: Message,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    version = scope["http_version"].encode()
    path = scope["path"]
    if path == "/stream":
        start = {"type": "http.response.start", "status": 200, "headers": [(b"x-version", version)]}
        start["headers"].append((b"content-type", b"text/plain"))
        await send(start)
        for piece in PIECES:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/json":
        status, content_type, body = 200, b"application/json", b'{"rate":1.5}'
    elif path == "/echo":
        status, content_type = 200, b"application/octet-stream"
    else:
        status, content_type, body = 404, b"text/plain", b"no such route"
    headers = [(b"content-type", content_type), (b"x-version", version)]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
