"""Recording harness for the psycopg 3 tests.

:func:`record` runs an application function (plain or ``async``) inside a server span with the
real span processor, the psycopg 3 recorder and OpenTelemetry's psycopg instrumentation
against the real PostgreSQL, and returns what the function returned, the finished operation's
events and the names of the spans made. It mirrors :func:`tests.integration.pg_support.record`
(psycopg2), so the same statements can be recorded through both drivers and compared.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.instrumentation.psycopg import install_recorder, uninstall_recorder
from tests.integration.pg_support import Recorded
from tests.integration.pipeline_support import ListSink


@contextmanager
def _otel(enabled: bool, provider: TracerProvider) -> Iterator[None]:
    if not enabled:
        yield
        return
    PsycopgInstrumentor().instrument(tracer_provider=provider, skip_dep_check=True)
    try:
        yield
    finally:
        PsycopgInstrumentor().uninstrument()


def record(
    dsn: str,
    app: Callable[[str], Any],
    *,
    otel: bool = True,
    otel_first: bool = False,
    before: Callable[[str], Any] | None = None,
) -> Recorded:
    """Run ``app(dsn)`` as one captured server operation against the live database.

    ``before(dsn)`` runs first, with the recorder installed but outside any operation (a
    warm pool, a connection set up at boot); what it returns is passed to ``app`` as its
    second argument.
    """
    sink = ListSink()
    processor = ReproitSpanProcessor(read_config({}), [sink])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    try:
        if otel_first:
            with _otel(otel, provider):
                install_recorder()
                result = _run(tracer, app, dsn, before)
        else:
            install_recorder()
            with _otel(otel, provider):
                result = _run(tracer, app, dsn, before)
        traces = sink.wait_for(1)
    finally:
        uninstall_recorder()
        provider.shutdown()
    spans = [span.name for span in exporter.get_finished_spans()]
    return Recorded(result, traces[0].events, spans)


def _call(function: Callable[..., Any], *args: Any) -> Any:
    result = function(*args)
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    return result


def _run(
    tracer: Any, app: Callable[..., Any], dsn: str, before: Callable[[str], Any] | None
) -> Any:
    if before is None:
        with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
            return _call(app, dsn)
    prepared = before(dsn)
    with tracer.start_as_current_span("GET /orders", kind=SpanKind.SERVER):
        return _call(app, dsn, prepared)
