"""Record-then-replay harness for the psycopg2 tests.

:func:`record` runs an application function inside a server span with the real span
processor, the psycopg2 recorder (and optionally OpenTelemetry's psycopg2 instrumentation)
against the real PostgreSQL, and returns what the function returned plus the finished
operation's events. :func:`replay` runs the same function with the psycopg2 replay
instrumentor serving a capsule made of those events, against a DSN whose port nothing listens
on. :func:`seen` turns what an application saw into a value that also compares Python types.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.psycopg2 import Psycopg2Instrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.instrumentation.psycopg2 import (
    Psycopg2ReplayInstrumentor,
    install_recorder,
    uninstall_recorder,
)
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.replay import ReplaySession
from tests.integration.pipeline_support import ListSink

App = Callable[[Callable[..., Any]], Any]


@dataclass
class Recorded:
    result: Any
    events: list[dict[str, Any]]
    spans: list[str]

    @property
    def exchanges(self) -> list[dict[str, Any]]:
        return [e["exchange"] for e in self.events if e.get("kind") == "effect"]

    @property
    def returned(self) -> dict[str, Any]:
        return self.events[-1]

    def capsule(self) -> dict[str, Any]:
        """The capsule a capture of this operation projects to, read back from its JSON."""
        capsule = {"format": "reproit-backend-capture", "version": 2, "events": self.events}
        parsed: dict[str, Any] = json.loads(canonical_json(capsule))
        return parsed


def closed_port_dsn() -> str:
    """A DSN naming a loopback port nothing listens on (the database is "stopped")."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://nobody:secret@127.0.0.1:{port}/stopped"


@contextmanager
def _otel(enabled: bool, provider: TracerProvider) -> Iterator[None]:
    if not enabled:
        yield
        return
    Psycopg2Instrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    try:
        yield
    finally:
        Psycopg2Instrumentor().uninstrument()


def record(dsn: str, app: App, *, otel: bool = True, otel_first: bool = False) -> Recorded:
    """Run ``app(connect)`` as one captured server operation against the live database."""
    sink = ListSink()
    processor = ReproitSpanProcessor(read_config({}), [sink])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")

    def connect(*args: Any, **kwargs: Any) -> Any:
        import psycopg2

        return psycopg2.connect(dsn, *args, **kwargs)

    try:
        if otel_first:
            with _otel(otel, provider):
                install_recorder()
                result = _run(tracer, app, connect)
        else:
            install_recorder()
            with _otel(otel, provider):
                result = _run(tracer, app, connect)
        traces = sink.wait_for(1)
    finally:
        uninstall_recorder()
        provider.shutdown()
    spans = [span.name for span in exporter.get_finished_spans()]
    return Recorded(result, traces[0].events, spans)


def _run(tracer: Any, app: App, connect: Callable[..., Any]) -> Any:
    with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
        return app(connect)


@dataclass
class Replayed:
    result: Any
    session: ReplaySession
    spans: list[str]


def replay(capsule: Mapping[str, Any], app: App, *, otel: bool = True) -> Replayed:
    """Run ``app(connect)`` with psycopg2 served from ``capsule``; the DSN's port is closed."""
    session = ReplaySession(dict(capsule))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    dsn = closed_port_dsn()

    def connect(*args: Any, **kwargs: Any) -> Any:
        import psycopg2

        return psycopg2.connect(dsn, *args, **kwargs)

    activate(session)
    Psycopg2ReplayInstrumentor().instrument()
    try:
        with _otel(otel, provider):
            result = app(connect)
    finally:
        Psycopg2ReplayInstrumentor().uninstrument()
        deactivate()
        provider.shutdown()
    return Replayed(result, session, [span.name for span in exporter.get_finished_spans()])


def seen(value: Any) -> Any:
    """``value`` with the type name of every part, so equal means "same values, same types"."""
    name = type(value).__name__
    if isinstance(value, Mapping):
        return (name, [(seen(k), seen(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (name, [seen(item) for item in value])
    if isinstance(value, (dt.datetime, dt.time)):
        return (name, value.isoformat(), repr(value.tzinfo))
    if isinstance(value, memoryview):
        return (name, value.tobytes())
    if isinstance(value, float) and math.isnan(value):
        return (name, "nan")
    if isinstance(value, decimal.Decimal):
        return (name, str(value))
    return (name, value)
