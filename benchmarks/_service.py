"""The service the overhead and outage benchmarks measure (a gunicorn app module).

``GET /order?id=N`` makes one ``requests`` call to the upstream (``BENCH_UPSTREAM``, through a
pooled keep-alive session) and one psycopg2 query (``BENCH_PG_DSN``, one connection per
server thread), and answers JSON: 200, or 500 with ``fail=1`` (a failing request, which
reproit captures and uploads). With ``payload=large`` the upstream answers 64 KiB of JSON and
the query returns 1,000 rows (fetched with ``fetchall``) instead of 29 bytes and one row.
``GET /health`` answers 200 without touching either; ``GET /bench/stats`` reports the
worker's pid, RSS and reproit counters.

``BENCH_SHAPE`` chooses what is installed, each of the first three adding to the previous one:

``bare``         Flask alone;
``otel``         OpenTelemetry SDK: Flask, requests and psycopg2 instrumentations, a
                 ``BatchSpanProcessor`` with an exporter that drops every span;
``reproit``      plus ``reproit_otel.install()``, configured by the ``REPROIT_*`` environment
                 (no ``REPROIT_ENDPOINT``: capture off; with it: capture on).

``sentry``       instead of OpenTelemetry: sentry-sdk with tracing on (every transaction
                 sampled, its default and auto-enabled integrations: Flask, and outbound HTTP
                 through ``http.client``), and a transport that drops every envelope.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import psycopg2
import requests
from flask import Flask, jsonify, request

from benchmarks._common import dropping_provider

SHAPE = os.environ.get("BENCH_SHAPE", "bare")
UPSTREAM = os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:9")
DSN = os.environ.get("BENCH_PG_DSN", "")

app = Flask("bench")
_http = requests.Session()
_local = threading.local()
_processor: Any = None


def _connection() -> Any:
    connection = getattr(_local, "connection", None)
    if connection is None or connection.closed:
        connection = psycopg2.connect(DSN)
        connection.autocommit = True
        _local.connection = connection
    return connection


@app.get("/health")
def health() -> Any:
    return "ok"


@app.get("/order")
def order() -> Any:
    item = int(request.args.get("id", "1"))
    large = request.args.get("payload") == "large"
    rate = _http.get(f"{UPSTREAM}/rate" + ("?size=large" if large else ""), timeout=5).json()
    with _connection().cursor() as cursor:
        if large:
            cursor.execute(
                "SELECT g, 'item ' || g, g * 1.5::float8 FROM generate_series(%s, %s + 999) AS g",
                (item, item),
            )
            row = cursor.fetchall()[0]
        else:
            cursor.execute("SELECT id, name, price FROM bench_items WHERE id = %s", (item,))
            row = cursor.fetchone()
    body = {"id": row[0], "name": row[1], "price": row[2] * rate["rate"]}
    if request.args.get("fail") == "1":
        return jsonify({"error": "pricing failed", **body}), 500
    return jsonify(body)


@app.get("/bench/stats")
def stats() -> Any:
    rss = 0
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    document: dict[str, Any] = {"shape": SHAPE, "pid": os.getpid(), "rss_kib": rss}
    if _processor is not None:
        from reproit_otel._guard import internal_errors

        document["processor"] = _processor.stats()
        document["sinks"] = [
            sink.stats() for sink in _processor.sinks if callable(getattr(sink, "stats", None))
        ]
        document["internal_errors"] = internal_errors()
    return jsonify(document)


def _install_opentelemetry() -> Any:
    from opentelemetry.instrumentation.flask import FlaskInstrumentor
    from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    provider = dropping_provider()
    FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    RequestsInstrumentor().instrument(tracer_provider=provider)
    Psycopg2Instrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    return provider


def _install_sentry() -> None:
    import sentry_sdk
    from sentry_sdk.envelope import Envelope
    from sentry_sdk.transport import Transport

    class DropTransport(Transport):
        """Receives every envelope like a real transport and sends it nowhere."""

        def capture_envelope(self, envelope: Envelope) -> None:
            pass

    # A DSN is needed for the client to record; the transport never reaches it.
    sentry_sdk.init(
        dsn="http://bench@127.0.0.1:9/1", traces_sample_rate=1.0, transport=DropTransport
    )


if SHAPE == "sentry":
    _install_sentry()
elif SHAPE in ("otel", "reproit"):
    _provider = _install_opentelemetry()
    if SHAPE == "reproit":
        import reproit_otel.bootstrap

        _processor = reproit_otel.bootstrap.install(_provider)
        if _processor is None:
            raise SystemExit("reproit-otel did not install; check the REPROIT_* environment")
elif SHAPE != "bare":
    raise SystemExit(f"unknown BENCH_SHAPE {SHAPE!r}: expected bare, otel, reproit or sentry")
