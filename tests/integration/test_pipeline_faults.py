"""A defect in any reproit hook leaves every response exactly as the application made it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.flask import FlaskInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel import _guard
from reproit_otel.capture.operation import Operation
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.instrumentation import asgi, wsgi
from tests.integration import test_pipeline_fastapi, test_pipeline_flask
from tests.integration.pipeline_support import ServedASGI, ServedWSGI, pipeline
from tests.integration.test_pipeline_flask import comparable, fetch
from tests.integration.upstream import Upstream

# (owner, attribute, the guard expected to catch the fault; {server} is wsgi or asgi)
HOOKS: list[tuple[Any, str, str]] = [
    (ReproitSpanProcessor, "_on_start", "processor.on_start"),
    (ReproitSpanProcessor, "_on_end", "processor.on_end"),
    (ReproitSpanProcessor, "start_exchange", "recording.start_exchange[requests]"),
    (Operation, "exchange_deferred", "recording.finish[requests]"),
    (Operation, "header", "{server}.finish"),
    (Operation, "finish", "{server}.finish"),
    (wsgi._WSGIRequest, "__init__", "wsgi.inbound"),
    (asgi, "inbound_from_scope", "asgi.inbound"),
    (asgi._Response, "finish", "asgi.finish"),
]

FLASK_CALLS: list[tuple[str, str, bytes | None, dict[str, str]]] = [
    ("POST", "/orders/3", b'{"item":"x"}', {"content-type": "application/json"}),
    ("GET", "/stream", None, {}),
    ("GET", "/boom", None, {}),
    ("GET", "/ok", None, {"x-reproit-trace": "t-1"}),
]
FASTAPI_CALLS: list[tuple[str, str, bytes | None, dict[str, str]]] = [
    ("POST", "/orders/3", b'{"item":"x"}', {"content-type": "application/json"}),
    ("GET", "/stream", None, {}),
    ("GET", "/boom", None, {}),
    ("GET", "/ok", None, {"x-reproit-trace": "t-1"}),
]


def _flask(upstream: Upstream, provider: TracerProvider) -> tuple[Any, Callable[[], None]]:
    app = test_pipeline_flask.make_app(upstream.base)
    FlaskInstrumentor().instrument_app(app, tracer_provider=provider)
    server = ServedWSGI(app)

    def stop() -> None:
        server.stop()
        FlaskInstrumentor().uninstrument_app(app)

    return server, stop


def _fastapi(upstream: Upstream, provider: TracerProvider) -> tuple[Any, Callable[[], None]]:
    app = test_pipeline_fastapi.make_app(upstream.base)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
    server = ServedASGI(app)

    def stop() -> None:
        server.stop()
        FastAPIInstrumentor.uninstrument_app(app)

    return server, stop


SERVERS = {"wsgi": (_flask, FLASK_CALLS), "asgi": (_fastapi, FASTAPI_CALLS)}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


def _responses(
    kind: str, upstream: Upstream, provider: TracerProvider
) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    start, calls = SERVERS[kind]
    server, stop = start(upstream, provider)
    try:
        return [
            # x-reproit-events is the one intended addition (trusted scan request).
            (status, [h for h in comparable(headers) if h[0] != "x-reproit-events"], body)
            for status, headers, body in (fetch(server.base, *call) for call in calls)
        ]
    finally:
        stop()


@pytest.mark.parametrize("kind", sorted(SERVERS))
@pytest.mark.parametrize("hook", HOOKS, ids=[h[1] for h in HOOKS])
def test_an_injected_fault_leaves_the_responses_unchanged(
    kind: str, hook: tuple[Any, str, str], upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, attribute, where = hook
    expected = _responses(kind, upstream, TracerProvider())
    monkeypatch.setenv(_guard.STRICT_ENV, "0")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"injected fault in {attribute}")

    monkeypatch.setattr(owner, attribute, broken)
    before = _guard.internal_errors()
    with pipeline({"REPROIT_SCAN": "1"}) as active:
        got = _responses(kind, upstream, active.provider)
    assert got == expected
    other = "asgi" if kind == "wsgi" else "wsgi"
    if not where.startswith(other):
        name = where.format(server=kind)
        assert _guard.internal_errors().get(name, 0) > before.get(name, 0), name
