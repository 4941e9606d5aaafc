"""A FastAPI app under uvicorn: operations, asyncio isolation, unchanged bytes, scan headers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel.capture.recording import start_exchange
from tests.integration.pipeline_support import (
    Pipeline,
    ServedASGI,
    decode_events_header,
    pipeline,
    stable,
)
from tests.integration.test_pipeline_flask import comparable, fetch
from tests.integration.upstream import Upstream

STREAM_CHUNKS = [bytes([97 + i % 26]) * 9000 for i in range(12)]


def make_app(upstream: str) -> FastAPI:
    app = FastAPI()

    @app.post("/orders/{number}")
    def order(number: int, payload: dict[str, Any]) -> JSONResponse:
        rate = requests.get(f"{upstream}/json", timeout=5).json()
        body = {"order": number, "rate": rate["rate"], "item": payload.get("item")}
        return JSONResponse(body, status_code=503)

    @app.get("/tick/{number}")
    async def tick(number: int) -> JSONResponse:
        # Interleave the tasks: each one starts an exchange, yields, then finishes it.
        recorder = start_exchange("tests")
        await asyncio.sleep(0.001 * (number % 7))
        assert recorder is not None
        exchange = {"protocol": "http", "request": {"method": "GET", "url": f"http://t/{number}"}}
        recorder.finish("call", resource="t", key=f"GET /{number}", exchange=exchange)
        return JSONResponse({"number": number}, status_code=500)

    @app.get("/ok")
    async def ok() -> dict[str, Any]:
        return {"ok": True, "text": "grüße"}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def generate() -> AsyncIterator[bytes]:
            for chunk in STREAM_CHUNKS:
                yield chunk

        return StreamingResponse(generate(), media_type="application/octet-stream")

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("handler failed")

    @app.post("/echo")
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"received": (await request.body()).decode()})

    return app


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


def served(upstream: Upstream, provider: TracerProvider) -> tuple[ServedASGI, FastAPI]:
    app = make_app(upstream.base)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
    return ServedASGI(app), app


@pytest.fixture
def running(upstream: Upstream) -> Iterator[tuple[Pipeline, ServedASGI]]:
    with pipeline() as active:
        server, app = served(upstream, active.provider)
        try:
            yield active, server
        finally:
            server.stop()
            FastAPIInstrumentor.uninstrument_app(app)


def test_a_failing_fastapi_request_is_one_operation_with_its_exchange(
    running: tuple[Pipeline, ServedASGI], upstream: Upstream
) -> None:
    active, server = running
    body = json.dumps({"item": "tea", "secret": "xyz"}).encode()
    status, _, answer = fetch(
        server.base, "POST", "/orders/9?x=1", body, {"content-type": "application/json"}
    )
    assert (status, json.loads(answer)) == (503, {"order": 9, "rate": 1.5, "item": "tea"})
    [trace] = active.sink.wait_for(1)
    events = stable(trace.events)
    host = server.base.removeprefix("http://")
    assert events[0] == {
        "actionIndex": 0,
        "operation": "POST /orders/9",
        "traceId": "<trace>",
        "spanId": "<trace>:POST /orders/9",
        "sequence": 0,
        "kind": "start",
        "input": {
            "body": {
                "item": "tea",
                "secret": {"$reproit": {"length": 3, "redacted": True, "type": "string"}},
            },
            "query": {"x": "1"},
            "headers": {
                "accept-encoding": "identity",
                "content-length": str(len(body)),
                "content-type": "application/json",
                "host": host,
            },
            "request": {
                "headers": [
                    ["host", host],
                    ["accept-encoding", "identity"],
                    ["content-length", str(len(body))],
                    ["content-type", "application/json"],
                ],
                "body": {
                    "item": "tea",
                    "secret": {"$reproit": {"length": 3, "redacted": True, "type": "string"}},
                },
                "server": ["127.0.0.1", int(host.rsplit(":", 1)[1])],
            },
        },
    }
    assert [(e["kind"], e.get("key"), e.get("sequence")) for e in events[1:]] == [
        ("effect", "GET /json", 1),
        ("return", None, 2),
    ]
    assert events[1]["exchange"]["response"]["body"] == '{"rate":1.5,"currency":"EUR"}'
    assert {key: events[2][key] for key in ("output", "status", "success", "effectsComplete")} == {
        "output": {"order": 9, "rate": 1.5, "item": "tea"},
        "status": 503,
        "success": False,
        "effectsComplete": True,
    }


def test_64_concurrent_asyncio_requests_keep_their_own_exchanges(
    running: tuple[Pipeline, ServedASGI],
) -> None:
    active, server = running
    with ThreadPoolExecutor(max_workers=64) as pool:
        statuses = list(pool.map(lambda n: fetch(server.base, "GET", f"/tick/{n}")[0], range(64)))
    assert statuses == [500] * 64
    traces = active.sink.wait_for(64)
    keys = {
        trace.events[0]["operation"]: [e["key"] for e in trace.events if e["kind"] == "effect"]
        for trace in traces
    }
    assert keys == {f"GET /tick/{n}": [f"GET /{n}"] for n in range(64)}
    assert all(trace.events[-1]["effectsComplete"] is True for trace in traces)


def test_fastapi_responses_are_byte_identical_with_and_without_reproit(
    upstream: Upstream,
) -> None:
    calls: list[tuple[str, str, bytes | None, dict[str, str]]] = [
        ("GET", "/ok", None, {}),
        ("GET", "/stream", None, {}),
        ("GET", "/boom", None, {}),
        ("POST", "/echo", b'{"a": [1, 2]}', {"content-type": "application/json"}),
        ("POST", "/echo", b"x" * 70000, {"content-type": "application/json"}),
        ("GET", "/missing", None, {}),
    ]

    def run_all(provider: TracerProvider) -> list[tuple[int, list[tuple[str, str]], bytes]]:
        server, app = served(upstream, provider)
        try:
            return [
                (status, comparable(headers), body)
                for status, headers, body in (fetch(server.base, *call) for call in calls)
            ]
        finally:
            server.stop()
            FastAPIInstrumentor.uninstrument_app(app)

    plain = run_all(TracerProvider())
    with pipeline() as active:
        recorded = run_all(active.provider)
        traces = active.sink.wait_for(6)
    assert recorded == plain
    assert plain[1][2] == b"".join(STREAM_CHUNKS)
    by_operation = {trace.events[0]["operation"]: trace.events for trace in traces}
    assert by_operation["GET /boom"][-1]["status"] == 500
    assert by_operation["GET /stream"][-1]["output"] is None


def test_trusted_scan_requests_carry_the_events_header(upstream: Upstream) -> None:
    with pipeline({"REPROIT_SCAN": "1"}) as active:
        server, app = served(upstream, active.provider)
        try:
            _, headers, _ = fetch(server.base, "GET", "/ok", None, {"x-reproit-trace": "t-1"})
        finally:
            server.stop()
            FastAPIInstrumentor.uninstrument_app(app)
    header = {name.lower(): value for name, value in headers}["x-reproit-events"]
    events = decode_events_header(header)
    assert [(e["traceId"], e["kind"], e["sequence"] - events[0]["sequence"]) for e in events] == [
        ("t-1", "start", 0),
        ("t-1", "return", 1),
    ]
    assert {key: events[1][key] for key in ("output", "status", "success", "effectsComplete")} == {
        "output": {"ok": True, "text": "grüße"},
        "status": 200,
        "success": True,
        "effectsComplete": True,
    }
