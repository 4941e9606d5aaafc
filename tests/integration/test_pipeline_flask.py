"""A Flask app behind a real WSGI server: operations, exchanges, completeness, scan headers."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import requests
from flask import Flask, Response, jsonify, request, stream_with_context
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from tests.integration.pipeline_support import (
    Pipeline,
    ServedWSGI,
    decode_events_header,
    pipeline,
    stable,
)
from tests.integration.requests_helpers import sent_headers, upstream_headers
from tests.integration.upstream import Upstream

STREAM_CHUNKS = [bytes([65 + i % 26]) * 10000 for i in range(10)]


def make_app(upstream: str) -> Flask:
    app = Flask("shop")

    @app.post("/orders/<int:number>")
    def order(number: int) -> Any:
        rate = requests.get(f"{upstream}/json", timeout=5).json()
        requests.get(f"{upstream}/fail", timeout=5)
        body = {"error": "pricing unavailable", "order": number, "rate": rate["rate"]}
        return jsonify(body), 502

    @app.get("/echo-query")
    def echo_query() -> Any:
        answer = requests.get(f"{upstream}/query", params={"n": request.args["n"]}, timeout=5)
        return jsonify(answer.json()), 500

    @app.get("/httpx")
    def with_httpx() -> Any:
        httpx.get(f"{upstream}/json", timeout=5)
        return jsonify({"ok": False}), 500

    @app.get("/ok")
    def ok() -> Any:
        return jsonify({"ok": True, "text": "grüße"})

    @app.get("/stream")
    def stream() -> Response:
        def generate() -> Iterator[bytes]:
            yield from STREAM_CHUNKS

        return Response(stream_with_context(generate()), mimetype="application/octet-stream")

    @app.get("/boom")
    def boom() -> Any:
        raise RuntimeError("handler failed")

    return app


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def served(upstream: Upstream) -> Iterator[tuple[Pipeline, ServedWSGI]]:
    with pipeline() as active:
        app = make_app(upstream.base)
        FlaskInstrumentor().instrument_app(app, tracer_provider=active.provider)
        server = ServedWSGI(app)
        try:
            yield active, server
        finally:
            server.stop()
            FlaskInstrumentor().uninstrument_app(app)


def served_app(upstream: Upstream, active: Pipeline) -> ServedWSGI:
    app = make_app(upstream.base)
    FlaskInstrumentor().instrument_app(app, tracer_provider=active.provider)
    return ServedWSGI(app)


def fetch(
    base: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, list[tuple[str, str]], bytes]:
    """One request over a plain (uninstrumented) connection: status, headers, body."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheaders(), response.read()
    finally:
        connection.close()


def comparable(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name.lower() != "date"]


def test_a_failing_request_is_one_operation_with_its_exchanges_in_order(
    served: tuple[Pipeline, ServedWSGI], upstream: Upstream
) -> None:
    active, server = served
    body = json.dumps({"item": "tea", "password": "hunter2"}).encode()
    status, _, answer = fetch(
        server.base,
        "POST",
        "/orders/42?q=1&q=2&empty=",
        body,
        {"content-type": "application/json", "x-api-key": "k-123"},
    )
    assert (status, json.loads(answer)) == (
        502,
        {"error": "pricing unavailable", "order": 42, "rate": 1.5},
    )
    [trace] = active.sink.wait_for(1)
    host = upstream.base.removeprefix("http://")
    common = {"actionIndex": 0, "operation": "POST /orders/42", "traceId": "<trace>"}
    common["spanId"] = "<trace>:POST /orders/42"
    placeholder = {"$reproit": {"length": 7, "redacted": True, "type": "string"}}
    assert stable(trace.events) == [
        {
            **common,
            "sequence": 0,
            "kind": "start",
            "input": {
                "body": {"item": "tea", "password": placeholder},
                "query": {"q": ["1", "2"], "empty": ""},
                "headers": {
                    "accept-encoding": "identity",
                    "content-length": str(len(body)),
                    "content-type": "application/json",
                    "host": host.replace(str(upstream.port), server.base.rsplit(":", 1)[1]),
                    "x-api-key": {"$reproit": {"length": 5, "redacted": True, "type": "string"}},
                },
                "request": {
                    "headers": [
                        ["Host", host.replace(str(upstream.port), server.base.rsplit(":", 1)[1])],
                        ["Accept-Encoding", "identity"],
                        ["Content-Length", str(len(body))],
                        ["Content-Type", "application/json"],
                        ["X-Api-Key", "$reproit"],
                    ],
                    "body": {"item": "tea", "password": placeholder},
                    "server": ["127.0.0.1", int(server.base.rsplit(":", 1)[1])],
                },
            },
        },
        {
            **common,
            "sequence": 1,
            "kind": "effect",
            "effect": "call",
            "resource": host,
            "key": "GET /json",
            "exchange": {
                "protocol": "http",
                "request": {
                    "method": "GET",
                    "url": f"{upstream.base}/json",
                    "headers": sent_headers(traceparent="<traceparent>"),
                },
                "response": {
                    "status": 200,
                    "headers": upstream_headers(
                        **{"content-length": "29", "content-type": "application/json"},
                        **{"x-upstream": "json"},
                    ),
                    "body": '{"rate":1.5,"currency":"EUR"}',  # as read: keys unsorted
                },
            },
        },
        {
            **common,
            "sequence": 2,
            "kind": "effect",
            "effect": "call",
            "resource": host,
            "key": "GET /fail",
            "exchange": {
                "protocol": "http",
                "request": {
                    "method": "GET",
                    "url": f"{upstream.base}/fail",
                    "headers": sent_headers(traceparent="<traceparent>"),
                },
                "response": {
                    "status": 500,
                    "headers": upstream_headers(
                        **{"content-length": "16", "content-type": "application/json"}
                    ),
                    "body": {"error": "boom"},
                },
            },
        },
        {
            **common,
            "sequence": 3,
            "kind": "return",
            "output": {"error": "pricing unavailable", "order": 42, "rate": 1.5},
            "status": 502,
            "success": False,
            "effectsComplete": True,
        },
    ]
    stats = active.processor.stats()
    assert (stats["exchanges_recorded"], stats["incomplete_reasons"]) == (2, {})


def test_an_unrecorded_library_span_makes_effects_incomplete(
    served: tuple[Pipeline, ServedWSGI],
) -> None:
    active, server = served
    status, _, _ = fetch(server.base, "GET", "/httpx")
    assert status == 500
    [trace] = active.sink.wait_for(1)
    returned = trace.events[-1]
    assert (returned["kind"], returned["effectsComplete"]) == ("return", False)
    assert [event["kind"] for event in trace.events] == ["start", "return"]
    assert active.processor.stats()["incomplete_reasons"] == {"httpx: GET": 1}


def test_64_concurrent_requests_keep_their_own_exchanges(
    served: tuple[Pipeline, ServedWSGI],
) -> None:
    active, server = served
    barrier = threading.Barrier(16)

    def one(number: int) -> int:
        if number < 16:
            barrier.wait(5)
        status, _, _ = fetch(server.base, "GET", f"/echo-query?n={number}")
        return status

    with ThreadPoolExecutor(max_workers=64) as pool:
        statuses = list(pool.map(one, range(64)))
    assert statuses == [500] * 64
    traces = active.sink.wait_for(64)
    seen: dict[str, list[str]] = {}
    for trace in traces:
        events = trace.events
        asked = events[0]["input"]["query"]["n"]
        seen[asked] = [
            json.loads(event["exchange"]["response"]["body"])["query"]
            for event in events
            if event["kind"] == "effect"
        ]
        assert events[-1]["output"] == {"query": f"n={asked}"}
        assert events[-1]["effectsComplete"] is True
    assert seen == {str(n): [f"n={n}"] for n in range(64)}


def test_responses_are_byte_identical_with_and_without_reproit(upstream: Upstream) -> None:
    requests_to_make = [
        ("GET", "/ok", None, {}),
        ("GET", "/stream", None, {}),
        ("GET", "/boom", None, {}),
        ("POST", "/orders/7", b'{"item":1}', {"content-type": "application/json"}),
        ("GET", "/missing", None, {}),
    ]

    def run_all(provider: TracerProvider) -> list[tuple[int, list[tuple[str, str]], bytes]]:
        app = make_app(upstream.base)
        FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
        server = ServedWSGI(app)
        try:
            return [
                (status, comparable(headers), body)
                for status, headers, body in (
                    fetch(server.base, *call) for call in requests_to_make
                )
            ]
        finally:
            server.stop()
            FlaskInstrumentor().uninstrument_app(app)

    plain = run_all(TracerProvider())
    with pipeline() as active:
        recorded = run_all(active.provider)
        assert len(active.sink.wait_for(5)) == 5
    assert recorded == plain
    assert plain[1][2] == b"".join(STREAM_CHUNKS)


def test_scan_requests_get_their_events_header_only_when_trusted(upstream: Upstream) -> None:
    trace_headers = {"x-reproit-trace": "rpt-a-1-1", "x-reproit-actor": "a"}
    environ = {"REPROIT_SCAN": "1", "REPROIT_SCAN_TOKEN": "s3cret-token"}
    with pipeline(environ) as active:
        server = served_app(upstream, active)
        try:
            trusted = fetch(
                server.base,
                "GET",
                "/ok",
                None,
                {**trace_headers, "x-reproit-scan-token": "s3cret-token"},
            )
            untrusted = fetch(
                server.base, "GET", "/ok", None, {**trace_headers, "x-reproit-scan-token": "wrong"}
            )
            missing = fetch(server.base, "GET", "/ok", None, trace_headers)
        finally:
            server.stop()
        # Untrusted requests are ordinary capture operations; scan operations are not captured.
        assert len(active.sink.wait_for(2)) == 2
        assert active.processor.stats()["scan_requests_refused"] == 2
    header = {name.lower(): value for name, value in trusted[1]}["x-reproit-events"]
    events = decode_events_header(header)
    assert [
        {key: event[key] for key in ("traceId", "actor", "kind", "operation")} for event in events
    ] == [
        {"traceId": "rpt-a-1-1", "actor": "a", "kind": "start", "operation": "GET /ok"},
        {"traceId": "rpt-a-1-1", "actor": "a", "kind": "return", "operation": "GET /ok"},
    ]
    assert events[1]["output"] == {"ok": True, "text": "grüße"}
    for response in (untrusted, missing):
        assert "x-reproit-events" not in {name.lower() for name, _ in response[1]}
        assert "x-reproit-trace" not in {name.lower() for name, _ in response[1]}


def test_scan_headers_are_ignored_when_scan_mode_is_off(upstream: Upstream) -> None:
    with pipeline() as active:
        server = served_app(upstream, active)
        try:
            _, headers, _ = fetch(server.base, "GET", "/ok", None, {"x-reproit-trace": "rpt-a-1-1"})
        finally:
            server.stop()
        [trace] = active.sink.wait_for(1)
    assert "x-reproit-events" not in {name.lower() for name, _ in headers}
    assert trace.events[0]["traceId"].startswith("cap-")
