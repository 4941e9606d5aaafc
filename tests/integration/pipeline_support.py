"""Real servers and the real capture pipeline for the inbound (WSGI/ASGI) tests.

* :class:`ServedWSGI` serves a WSGI app with werkzeug's threaded server on a loopback port;
* :class:`ServedASGI` serves an ASGI app with uvicorn on a loopback port;
* :func:`pipeline` installs the span processor (with a list sink), the requests recorder, the
  Flask/Starlette patches and OpenTelemetry's requests and httpx instrumentations on a
  private ``TracerProvider``, and removes all of it afterwards;
* :func:`stable` replaces the per-run parts of an event list (trace id, clock, seed,
  ``traceparent``) so whole event lists can be compared.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from werkzeug.serving import make_server

from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.instrumentation import asgi, wsgi
from reproit_otel.instrumentation.requests import install_recorder, uninstall_recorder
from reproit_otel.wire.trace import BackendTrace


class ListSink:
    """Keeps every operation the processor hands off."""

    def __init__(self) -> None:
        self.traces: list[BackendTrace] = []
        self._lock = threading.Lock()

    def submit(self, trace: BackendTrace) -> None:
        with self._lock:
            self.traces.append(trace)

    def wait_for(self, count: int, timeout: float = 5.0) -> list[BackendTrace]:
        """The handed-off traces once there are ``count`` of them (hand-off may trail the
        response by a moment: the server span ends after the last byte is written)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.traces) >= count:
                    return list(self.traces)
            time.sleep(0.01)
        with self._lock:
            raise AssertionError(f"expected {count} operations, got {len(self.traces)}")


@dataclass
class Pipeline:
    provider: TracerProvider
    processor: ReproitSpanProcessor
    sink: ListSink
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def pipeline(environ: Mapping[str, str] | None = None) -> Iterator[Pipeline]:
    """The real processor, recorder and middleware patches, for one test."""
    sink = ListSink()
    processor = ReproitSpanProcessor(read_config(dict(environ or {})), [sink])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    install_recorder()
    wsgi.install_flask()
    asgi.install_starlette()
    RequestsInstrumentor().instrument(tracer_provider=provider)
    HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    try:
        yield Pipeline(provider, processor, sink)
    finally:
        HTTPXClientInstrumentor().uninstrument()
        RequestsInstrumentor().uninstrument()
        asgi.uninstall_starlette()
        wsgi.uninstall_flask()
        uninstall_recorder()
        provider.shutdown()


class ServedWSGI:
    """A WSGI app behind werkzeug's threaded server on 127.0.0.1."""

    def __init__(self, app: Any) -> None:
        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self._server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServedASGI:
    """An ASGI app behind uvicorn on 127.0.0.1, in a thread of its own."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        port = _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="error", lifespan="off", access_log=False
        )
        self._server = uvicorn.Server(config)
        self.base = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-3]$")


def stable(events: list[Any]) -> list[dict[str, Any]]:
    """The events with per-run values replaced by their shape (after checking that shape)."""
    result: list[dict[str, Any]] = []
    # One process-wide counter: within a trace sequences strictly increase, with gaps where
    # another operation drew a number meanwhile (PROTOCOL 2.3). Compared by rank.
    sequences = [event["sequence"] for event in events]
    assert sequences == sorted(set(sequences)), sequences
    for rank, event in enumerate(events):
        copy = json.loads(json.dumps(event))
        assert re.fullmatch(r"cap-\d{13}-\d+", copy["traceId"]), copy["traceId"]
        assert copy["spanId"] == f"{copy['traceId']}:{copy['operation']}"
        assert re.fullmatch(r"[0-9a-f]{16}", copy.pop("replaySeed"))
        assert isinstance(copy.pop("at"), int) and isinstance(copy.pop("monoNs"), int)
        copy["traceId"] = "<trace>"
        copy["spanId"] = "<trace>:" + copy["operation"]
        copy["sequence"] = rank
        exchange = copy.get("exchange")
        if isinstance(exchange, dict):
            headers = exchange.get("request", {}).get("headers", {})
            if "traceparent" in headers:
                assert _TRACEPARENT.match(headers["traceparent"]), headers["traceparent"]
                headers["traceparent"] = "<traceparent>"
        result.append(copy)
    return result


def decode_events_header(value: str) -> list[Any]:
    """The events carried by an ``x-reproit-events`` header value."""
    padded = value + "=" * (-len(value) % 4)
    parsed: list[Any] = json.loads(base64.urlsafe_b64decode(padded))
    return parsed
