"""Streaming responses, once for Flask (``flask_app``) and once for FastAPI (``fastapi_app``).

No reproit-otel code; ``test_streaming.py`` serves them under ``opentelemetry-instrument``
(gunicorn and uvicorn). Routes, the same in both:

* ``GET /sse?id=N``: a server-sent-events stream whose second event waits until the client
  acknowledged the first (``POST /ack?id=N``): the client can only acknowledge what it has
  already received, so the stream completes only if its first event reached the client while
  the response was still open;
* ``POST /ack?id=N``: that acknowledgement;
* ``GET /endless``: an event every 20 ms, forever (until the client goes away);
* ``GET /broken``: a 503 stream whose body raises after its first chunk;
* ``GET /failing-stream``: asks the upstream at ``UPSTREAM`` for its rate (a dependency call
  for the capture to hold), then answers a 500 streamed in three JSON chunks.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator

import requests
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from flask import Flask, Response, request

ACK_WAIT_S = 60.0
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
EVENT = "text/event-stream"

flask_app = Flask(__name__)
_flask_acks: dict[str, threading.Event] = {}
_lock = threading.Lock()


def _flask_ack(identifier: str) -> threading.Event:
    with _lock:
        return _flask_acks.setdefault(identifier, threading.Event())


@flask_app.get("/sse")
def flask_sse() -> Response:
    acked = _flask_ack(request.args["id"])

    def events() -> Iterator[bytes]:
        yield b"data: first\n\n"
        acked.wait(ACK_WAIT_S)
        yield b"data: second\n\n" if acked.is_set() else b"data: never acknowledged\n\n"

    return Response(events(), mimetype=EVENT)


@flask_app.post("/ack")
def flask_ack() -> str:
    _flask_ack(request.args["id"]).set()
    return "ok"


@flask_app.get("/endless")
def flask_endless() -> Response:
    def events() -> Iterator[bytes]:
        for number in itertools.count():
            yield f"data: {number}\n\n".encode()
            time.sleep(0.02)

    return Response(events(), mimetype=EVENT)


@flask_app.get("/broken")
def flask_broken() -> Response:
    def chunks() -> Iterator[bytes]:
        yield b"partial"
        raise RuntimeError("the stream broke")

    return Response(chunks(), status=503, mimetype="text/plain")


def _failing_parts() -> tuple[bytes, ...]:
    rate = requests.get(f"{UPSTREAM}/json", timeout=10).json()["rate"]
    return (b'{"error":', b'"ledger down",', f'"rate":{rate}}}'.encode())


@flask_app.get("/failing-stream")
def flask_failing_stream() -> Response:
    parts = _failing_parts()

    def chunks() -> Iterator[bytes]:
        yield from parts

    return Response(chunks(), status=500, mimetype="application/json")


fastapi_app = FastAPI()
_fastapi_acks: dict[str, asyncio.Event] = {}


def _fastapi_ack(identifier: str) -> asyncio.Event:
    return _fastapi_acks.setdefault(identifier, asyncio.Event())


@fastapi_app.get("/sse")
async def fastapi_sse(id: str) -> StreamingResponse:
    acked = _fastapi_ack(id)

    async def events() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        try:
            await asyncio.wait_for(acked.wait(), ACK_WAIT_S)
        except TimeoutError:
            yield b"data: never acknowledged\n\n"
        else:
            yield b"data: second\n\n"

    return StreamingResponse(events(), media_type=EVENT)


@fastapi_app.post("/ack")
async def fastapi_ack(id: str) -> str:
    _fastapi_ack(id).set()
    return "ok"


@fastapi_app.get("/endless")
async def fastapi_endless() -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        for number in itertools.count():
            yield f"data: {number}\n\n".encode()
            await asyncio.sleep(0.02)

    return StreamingResponse(events(), media_type=EVENT)


@fastapi_app.get("/broken")
async def fastapi_broken() -> StreamingResponse:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"partial"
        raise RuntimeError("the stream broke")

    return StreamingResponse(chunks(), status_code=503, media_type="text/plain")


@fastapi_app.get("/failing-stream")
def fastapi_failing_stream() -> StreamingResponse:
    parts = _failing_parts()

    async def chunks() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    return StreamingResponse(chunks(), status_code=500, media_type="application/json")
