"""The whole capture of a failing Flask request: HTTP (one streamed) and SQL (one failing)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
import requests
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor

from reproit_otel.instrumentation import psycopg2 as pg_recorder
from tests.integration.pipeline_support import Pipeline, ServedWSGI, pipeline, stable
from tests.integration.requests_helpers import sent_headers, upstream_headers
from tests.integration.test_pipeline_flask import fetch
from tests.integration.upstream import SSE_EVENTS, Upstream

pytestmark = pytest.mark.postgres


def make_app(upstream: str, dsn: str) -> Flask:
    app = Flask("checkout")

    @app.get("/checkout/<int:number>")
    def checkout(number: int) -> Any:
        rate = requests.get(f"{upstream}/json", timeout=5).json()
        with requests.get(f"{upstream}/sse", stream=True, timeout=5) as answer:
            events = [line.decode() for line in answer.iter_lines() if line]
        connection = psycopg2.connect(dsn)
        try:
            cursor = connection.cursor()
            cursor.execute("SELECT %s::int AS n, 'tea' AS item", (number,))
            row = cursor.fetchone()
            cursor.execute("CREATE TEMP TABLE basket (id int)")
            try:
                cursor.execute("SELECT * FROM missing_prices")
            except psycopg2.Error as error:
                code = error.pgcode
        finally:
            connection.close()
        body = {"rate": rate["rate"], "events": len(events), "row": list(row), "code": code}
        return jsonify(body), 500

    return app


@pytest.fixture
def served(postgres_dsn: str) -> Iterator[tuple[Pipeline, ServedWSGI, Upstream]]:
    upstream = Upstream()
    with pipeline() as active:
        pg_recorder.install_recorder()
        Psycopg2Instrumentor().instrument(tracer_provider=active.provider)
        app = make_app(upstream.base, postgres_dsn)
        FlaskInstrumentor().instrument_app(app, tracer_provider=active.provider)
        server = ServedWSGI(app)
        try:
            yield active, server, upstream
        finally:
            server.stop()
            FlaskInstrumentor().uninstrument_app(app)
            Psycopg2Instrumentor().uninstrument()
            pg_recorder.uninstall_recorder()
            upstream.stop()


def test_a_failing_checkout_yields_exactly_its_exchanges(
    served: tuple[Pipeline, ServedWSGI, Upstream],
) -> None:
    active, server, upstream = served
    status, _, body = fetch(server.base, "GET", "/checkout/7")
    assert (status, json.loads(body)) == (
        500,
        {"rate": 1.5, "events": 3, "row": [7, "tea"], "code": "42P01"},
    )
    [trace] = active.sink.wait_for(1)
    host = upstream.base.removeprefix("http://")
    common = {
        "traceId": "<trace>",
        "spanId": "<trace>:GET /checkout/7",
        "actionIndex": 0,
        "operation": "GET /checkout/7",
    }

    def call(sequence: int, path: str, response: dict[str, Any]) -> dict[str, Any]:
        return {
            **common,
            "sequence": sequence,
            "kind": "effect",
            "effect": "call",
            "resource": host,
            "key": f"GET {path}",
            "exchange": {
                "protocol": "http",
                "request": {
                    "method": "GET",
                    "url": f"{upstream.base}{path}",
                    "headers": sent_headers(traceparent="<traceparent>"),
                },
                "response": response,
            },
        }

    def sql(sequence: int, effect: str, request: dict[str, Any], response: Any) -> dict[str, Any]:
        return {
            **common,
            "sequence": sequence,
            "kind": "effect",
            "effect": effect,
            "resource": "pg",
            "key": request["text"],
            "exchange": {"protocol": "pg", "request": request, "response": response},
        }

    missing = 'relation "missing_prices" does not exist\nLINE 1: SELECT * FROM missing_prices\n'
    missing += " " * 22 + "^\n"
    assert stable(trace.events) == [
        {
            **common,
            "sequence": 0,
            "kind": "start",
            "input": {
                "headers": {
                    "accept-encoding": "identity",
                    "host": server.base.removeprefix("http://"),
                },
                "request": {
                    "headers": [
                        ["Host", server.base.removeprefix("http://")],
                        ["Accept-Encoding", "identity"],
                    ],
                    "server": ["127.0.0.1", int(server.base.rsplit(":", 1)[1])],
                },
            },
        },
        call(
            1,
            "/json",
            {
                "status": 200,
                "headers": upstream_headers(
                    **{"content-length": "29", "content-type": "application/json"},
                    **{"x-upstream": "json"},
                ),
                "body": '{"rate":1.5,"currency":"EUR"}',  # as read: keys unsorted
            },
        ),
        call(
            2,
            "/sse",
            {
                "status": 200,
                "headers": upstream_headers(
                    **{"content-type": "text/event-stream", "transfer-encoding": "chunked"}
                ),
                "body": b"".join(SSE_EVENTS).decode(),
                "stream": {"chunks": [len(event) for event in SSE_EVENTS]},
            },
        ),
        sql(
            3,
            "read",
            {"text": "SELECT %s::int AS n, 'tea' AS item", "values": [7]},
            {
                "command": "SELECT",
                "rowCount": 1,
                "rows": [{"n": 7, "item": "tea"}],
                "columns": [
                    ["n", 23, None, 4, None, None, None, None, None],
                    ["item", 25, None, -1, None, None, None, None, None],
                ],
            },
        ),
        sql(
            4,
            "write",
            {"text": "CREATE TEMP TABLE basket (id int)"},
            # The reference's command word and count (PROTOCOL 4.4); the whole status beside.
            {
                "command": "CREATE",
                "rowCount": 0,
                "rows": [],
                "status": "CREATE TABLE",
                "columns": None,
            },
        ),
        sql(
            5,
            "read",
            {"text": "SELECT * FROM missing_prices"},
            {
                "error": {
                    "message": missing,
                    "code": "42P01",
                    "type": "psycopg2.errors.UndefinedTable",
                    "pgerror": "ERROR:  " + missing,
                }
            },
        ),
        {
            **common,
            "sequence": 6,
            "kind": "return",
            "output": {"code": "42P01", "events": 3, "rate": 1.5, "row": [7, "tea"]},
            "status": 500,
            "success": False,
            "effectsComplete": True,
        },
    ]
    stats = active.processor.stats()
    assert (stats["exchanges_recorded"], stats["incomplete_reasons"]) == (5, {})
