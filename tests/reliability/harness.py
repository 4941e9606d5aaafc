"""A production-shaped service for the reliability tests, and the way to run it.

:func:`make_app` builds a Flask service whose routes use every recorded library:

=====================  ========================================================================
``GET /order/<n>``     ``requests`` GET upstream ``/json``, one parametrised psycopg2 query;
                       200 JSON
``GET /fail``          ``requests`` GET upstream ``/fail`` and a query; 502 JSON (a capture)
``POST /echo``         ``requests`` POST of the request body to upstream ``/echo``; 200 with
                       the upstream's answer
``GET /pgerror``       a query that divides by zero; the application catches the psycopg2
                       error and answers 409 with its class and message
``GET /refused``       ``requests`` to a port nothing listens on; the application catches the
                       error and answers 503 with its class
``GET /raise``         raises ``ValueError`` (Flask answers 500)
=====================  ========================================================================

Every exception the application sees is appended to ``app.config["SEEN"]`` as
``(class name, message)``, so a test can check that reproit changed none of them.

:func:`served` serves it on a loopback werkzeug server, with OpenTelemetry (Flask, requests,
psycopg2 instrumentations) and, when ``environ`` is given, reproit-otel installed the way
production installs it (:func:`reproit_otel.bootstrap.install` with that configuration).
:func:`exercise` makes one call of every kind and returns what a client saw.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg2
import requests
from flask import Flask, got_request_exception, jsonify, request
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel import bootstrap
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from tests.integration.pipeline_support import ServedWSGI
from tests.integration.upstream import closed_port

Answer = tuple[int, list[tuple[str, str]], bytes]


def make_app(upstream: str, dsn: str) -> Flask:
    app = Flask("reliability")
    seen: list[tuple[str, str]] = []
    app.config["SEEN"] = seen
    refused = f"http://127.0.0.1:{closed_port()}/"

    def query(sql: str, values: tuple[Any, ...]) -> list[Any]:
        connection = psycopg2.connect(dsn)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, values)
                return list(cursor.fetchall())
        finally:
            connection.close()

    @app.get("/order/<int:number>")
    def order(number: int) -> Any:
        rate = requests.get(f"{upstream}/json", timeout=5).json()
        [(doubled, label)] = query("SELECT %s * 2, %s", (number, f"order {number}"))
        return jsonify({"order": number, "doubled": doubled, "label": label, "rate": rate})

    @app.get("/fail")
    def fail() -> Any:
        answer = requests.get(f"{upstream}/fail", timeout=5)
        [(count,)] = query("SELECT count(*) FROM generate_series(1, %s)", (3,))
        return jsonify(
            {"error": "upstream failed", "upstream": answer.status_code, "n": count}
        ), 502

    @app.post("/echo")
    def echo() -> Any:
        answer = requests.post(
            f"{upstream}/echo",
            data=request.get_data(),
            headers={"content-type": request.content_type or "text/plain"},
            timeout=5,
        )
        return answer.content, answer.status_code, {"content-type": "application/octet-stream"}

    @app.get("/pgerror")
    def pgerror() -> Any:
        try:
            query("SELECT 1 / %s", (0,))
        except psycopg2.Error as error:
            seen.append((type(error).__name__, str(error).strip()))
            return jsonify({"error": type(error).__name__, "pgcode": error.pgcode}), 409
        return "unreachable", 200

    @app.get("/refused")
    def refused_call() -> Any:
        try:
            requests.get(refused, timeout=5)
        except requests.RequestException as error:
            seen.append((type(error).__name__, "refused"))
            return jsonify({"error": type(error).__name__}), 503
        return "unreachable", 200

    @app.get("/raise")
    def explode() -> Any:
        raise ValueError("the application exploded")

    def note(sender: Any, exception: BaseException, **extra: Any) -> None:
        seen.append((type(exception).__name__, str(exception)))

    got_request_exception.connect(note, app, weak=False)
    return app


CALLS: list[tuple[str, str, bytes | None, dict[str, str]]] = [
    ("GET", "/order/7", None, {}),
    ("GET", "/fail", None, {}),
    ("POST", "/echo", b'{"item":"tea","n":2}', {"content-type": "application/json"}),
    ("GET", "/pgerror", None, {}),
    ("GET", "/refused", None, {}),
    ("GET", "/raise", None, {}),
    ("GET", "/order/8", None, {}),
]


def fetch(
    base: str, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] = {}
) -> Answer:
    """One request over a plain connection: status, headers without ``date``, body."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(method, path, body=body, headers=dict(headers))
        response = connection.getresponse()
        kept = [(k.lower(), v) for k, v in response.getheaders() if k.lower() != "date"]
        return response.status, kept, response.read()
    finally:
        connection.close()


@dataclass
class Served:
    app: Flask
    server: ServedWSGI
    provider: TracerProvider
    processor: ReproitSpanProcessor | None
    seen: list[tuple[str, str]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.server.base

    def sinks(self) -> list[Any]:
        return [] if self.processor is None else list(self.processor.sinks)


@contextmanager
def served(
    upstream: str, dsn: str, environ: Mapping[str, str] | None = None, *, app: Flask | None = None
) -> Iterator[Served]:
    """The service (or ``app``) on a loopback port; reproit-otel installed when ``environ``
    is given."""
    app = app if app is not None else make_app(upstream, dsn)
    provider = TracerProvider()
    processor = None
    if environ is not None:
        processor = bootstrap.install(provider, config=read_config(dict(environ)))
        assert processor is not None
    FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    RequestsInstrumentor().instrument(tracer_provider=provider)
    Psycopg2Instrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    server = ServedWSGI(app)
    try:
        yield Served(app, server, provider, processor, app.config.setdefault("SEEN", []))
    finally:
        server.stop()
        Psycopg2Instrumentor().uninstrument()
        RequestsInstrumentor().uninstrument()
        FlaskInstrumentor().uninstrument_app(app)
        bootstrap.uninstall()
        provider.shutdown()


def exercise(base: str) -> list[Answer]:
    """One call of every kind, in order."""
    return [fetch(base, *call) for call in CALLS]
