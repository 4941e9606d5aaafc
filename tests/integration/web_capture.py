"""Real failures for the web page tests: a Flask shop under reproit capture, uploading to a
real ``reproit-otel serve``.

:func:`capture_failures` runs the app on a loopback WSGI server with the OpenTelemetry Flask,
requests and psycopg2 instrumentations and reproit-otel installed (the uploader pointed at the
ingest), sends it two failing requests and waits until both batches were delivered:

``POST /checkout/7`` (500)
    a JSON body with a ``password`` (redacted at the source); calls the upstream's ``/json``,
    ``/query`` with a secret ``token`` parameter, the streamed ``/sse`` and ``POST /echo``
    with a body holding an HTML/script payload; then three SQL statements on the real
    PostgreSQL (rows, a write, a failing one).
``GET /inventory`` (503)
    one call to the upstream's failing ``/fail``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg2
import requests
from flask import Flask, jsonify, request
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel import bootstrap
from reproit_otel.capture.uploader import Uploader
from reproit_otel.config import read_config
from tests.integration.pipeline_support import ServedWSGI

XSS = '<script>alert("xss")</script><img src=x onerror=alert(1)>'


def make_shop(upstream: str, dsn: str) -> Flask:
    app = Flask("shop")

    @app.post("/checkout/<int:number>")
    def checkout(number: int) -> Any:
        order = request.get_json()
        rate = requests.get(f"{upstream}/json", timeout=5).json()
        requests.get(f"{upstream}/query", params={"token": "s3cr3t-value", "n": 1}, timeout=5)
        with requests.get(f"{upstream}/sse", stream=True, timeout=5) as answer:
            events = [line for line in answer.iter_lines() if line]
        requests.post(f"{upstream}/echo", json={"note": XSS, "item": order["item"]}, timeout=5)
        connection = psycopg2.connect(dsn)
        try:
            cursor = connection.cursor()
            cursor.execute(
                "SELECT n AS id, 'tea-' || n AS item, n * 1.5 AS price "
                "FROM generate_series(1, %s) AS n",
                (3,),
            )
            rows = cursor.fetchall()
            cursor.execute("CREATE TEMP TABLE basket (id int)")
            with contextlib.suppress(psycopg2.Error):
                cursor.execute("SELECT * FROM missing_prices WHERE order_id = %s", (number,))
        finally:
            connection.close()
        body = {"error": "checkout failed", "rate": rate["rate"], "events": len(events)}
        body["rows"] = len(rows)
        return jsonify(body), 500

    @app.get("/inventory")
    def inventory() -> Any:
        requests.get(f"{upstream}/fail", timeout=5)
        return jsonify({"error": "inventory unavailable"}), 503

    return app


def capture_failures(ingest_url: str, key: str, upstream: str, dsn: str) -> None:
    """Serve the shop under capture, send both failing requests, deliver both batches."""
    config = read_config(
        {
            "REPROIT_ENDPOINT": f"{ingest_url}/v1/capture-batches",
            "REPROIT_API_KEY": key,
            "REPROIT_APP_ID": "shop",
            "REPROIT_BUILD": "2026.11.30-1",
            "REPROIT_COMMIT": "9f1c2ab44d0e5b7c81f3a6d2e4b5c6d7e8f90123",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
    )
    app = make_shop(upstream, dsn)
    provider = TracerProvider()
    processor = bootstrap.install(provider, config=config)
    assert processor is not None
    [uploader] = [sink for sink in processor.sinks if isinstance(sink, Uploader)]
    FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    RequestsInstrumentor().instrument(tracer_provider=provider)
    Psycopg2Instrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    served = ServedWSGI(app)
    try:
        answer = requests.post(
            f"{served.base}/checkout/7",
            json={"item": "tea", "password": "hunter2"},
            timeout=10,
        )
        assert answer.status_code == 500
        assert requests.get(f"{served.base}/inventory", timeout=10).status_code == 503
        for _ in range(200):
            if uploader.stats()["captured_operations"] >= 2:
                break
            processor.force_flush(100)
        assert uploader.flush(20) is True
        stats = uploader.stats()
    finally:
        served.stop()
        Psycopg2Instrumentor().uninstrument()
        RequestsInstrumentor().uninstrument()
        FlaskInstrumentor().uninstrument_app(app)
        bootstrap.uninstall()
        provider.shutdown()
    assert (stats["sent_batches"], stats["failed_batches"]) == (2, 0), stats
