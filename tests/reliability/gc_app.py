"""A Flask service whose requests leave recorded work to the garbage collector.

Loaded by the collector tests in a process of its own: by ``gc_run.py`` (werkzeug's threaded
server) or by gunicorn (``tests.reliability.gc_app:app``). OpenTelemetry (Flask, requests,
psycopg2) is installed on import, and reproit-otel the way production installs it
(:func:`reproit_otel.bootstrap.install`, configured by the ``REPROIT_*`` environment; with
``REPROIT_DISABLED=1`` it stays out and the service runs as it would without it).

Environment: ``UPSTREAM`` (the loopback upstream of ``tests/integration/upstream.py``),
``PG_DSN`` (PostgreSQL, for ``/cursor``), ``GC_THRESHOLD`` (``a,b,c``: passed to
``gc.set_threshold`` on import, so collections land everywhere, inside reproit-otel too).

=======================  =======================================================================
``GET /abandon``         makes three JSON calls, reads one chunk of a streamed upstream body,
                         lets a full collection move the response to the old generation, drops
                         it and answers a large JSON 500 (the issue's reduction)
``GET /partial``         reads one chunk of a stream and drops the response; 200
``GET /late-close``      reads one chunk of a stream, makes another call, then closes it; 200
``GET /unread``          opens a stream, reads nothing, drops it; 200
``GET /cursor``          a named cursor executed and dropped unfetched, then a plain query; 200
``GET /dropped-span``    drops an object whose finalizer ends an OpenTelemetry CLIENT span (the
                         application's finalizer, not reproit-otel's), then a call; 200
``GET /fail``            a healthy call, then a large JSON 500
``GET /order/<n>``       one call and one query; 200
=======================  =======================================================================

Every answer depends on the request alone (no clock, no pid), so the answers of a run with
reproit-otel and of a run without it can be compared byte for byte.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
from typing import Any

import psycopg2
import requests
from flask import Flask, jsonify
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from reproit_otel import bootstrap

UPSTREAM = os.environ["UPSTREAM"]
DSN = os.environ.get("PG_DSN", "")
LARGE = [{"item": n, "label": f"item number {n}", "tags": ["a", "b", str(n)]} for n in range(600)]
"""The body of a large failure: about 40 KB of JSON, decoded and redacted when captured."""

app = Flask(__name__)
provider = TracerProvider()
processor = bootstrap.install(provider)  # None with REPROIT_DISABLED=1
FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
RequestsInstrumentor().instrument(tracer_provider=provider)
Psycopg2Instrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
tracer = provider.get_tracer(__name__)
# SIGUSR2 (which gunicorn leaves to the application in its workers): every thread's stack
# to stderr, so a test can see where a request that does not answer is stuck.
faulthandler.register(signal.SIGUSR2, all_threads=True)
if os.environ.get("GC_THRESHOLD"):
    gc.set_threshold(*(int(part) for part in os.environ["GC_THRESHOLD"].split(",")))


def _rate(n: int) -> Any:
    return requests.get(f"{UPSTREAM}/query?n={n}", timeout=10).json()


def _echo(n: int) -> Any:
    """A JSON exchange of many small values each way (under 8 KiB: recorded whole, so
    building it when the failure is captured decodes and redacts all of them)."""
    values = [{"n": n, "i": i} for i in range(300)]
    return requests.post(f"{UPSTREAM}/echo", json=values, timeout=10).json()


@app.get("/abandon")
def abandon() -> Any:
    echoed = [len(_echo(n)) for n in range(3)]
    response = requests.get(f"{UPSTREAM}/big", stream=True, timeout=10)
    first = next(response.iter_content(1000))
    # A full collection now: the response, still referenced, moves to the old generation, and
    # the next full collection becomes due only once enough new objects outlived the young
    # ones, which is while the large failure is being built (decoded, redacted), whatever the
    # thresholds shift.
    gc.collect()
    del response  # garbage now, for that collection
    return jsonify({"first": first.decode(), "echoed": echoed, "items": LARGE}), 500


@app.get("/partial")
def partial() -> Any:
    response = requests.get(f"{UPSTREAM}/slow", stream=True, timeout=10)
    first = next(response.iter_content(None))
    return jsonify({"first": first.decode()})


@app.get("/late-close")
def late_close() -> Any:
    response = requests.get(f"{UPSTREAM}/big", stream=True, timeout=10)
    first = next(response.iter_content(500))
    rate = _rate(1)
    response.close()
    return jsonify({"first": first.decode(), "rate": rate})


@app.get("/unread")
def unread() -> Any:
    response = requests.get(f"{UPSTREAM}/json", stream=True, timeout=10)
    return jsonify({"status": response.status_code})


@app.get("/cursor")
def cursor() -> Any:
    connection = psycopg2.connect(DSN)
    try:
        named = connection.cursor(name="unfetched")
        named.execute("SELECT n FROM generate_series(1, 50) AS n")
        del named  # never fetched
        with connection.cursor() as plain:
            plain.execute("SELECT %s * 2", (21,))
            (value,) = plain.fetchone()
        connection.commit()
    finally:
        connection.close()
    return jsonify({"value": value})


class _Cleanup:
    """Holds a span open until the collector frees it (it refers to itself: a cycle)."""

    def __init__(self) -> None:
        self.span = tracer.start_span("cleanup", kind=SpanKind.CLIENT)
        self.me = self

    def __del__(self) -> None:
        self.span.end()  # on whatever thread collects, maybe inside reproit-otel


@app.get("/dropped-span")
def dropped_span() -> Any:
    _Cleanup()
    return jsonify({"rate": _rate(5)})


@app.get("/fail")
def fail() -> Any:
    rate = _rate(7)
    return jsonify({"error": "out of stock", "rate": rate, "items": LARGE}), 500


@app.get("/order/<int:number>")
def order(number: int) -> Any:
    rate = _rate(number)
    connection = psycopg2.connect(DSN)
    try:
        with connection.cursor() as plain:
            plain.execute("SELECT %s + 1", (number,))
            (next_number,) = plain.fetchone()
    finally:
        connection.close()
    return jsonify({"order": number, "next": next_number, "rate": rate})
