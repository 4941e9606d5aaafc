"""Recording harness for the psycopg 3 tests.

:func:`recording` installs the psycopg 3 recorder and OpenTelemetry's psycopg instrumentation
with the real span processor, and yields a :class:`Session` whose ``operation`` context
manager makes one server span (an operation). :func:`record` runs one application function
(plain or ``async``) as one operation against the real PostgreSQL and returns what it returned
and the operation's events, like :func:`tests.integration.pg_support.record` for psycopg2, so
the same statements can be recorded through both drivers and compared.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass
class Session:
    tracer: Any
    sink: ListSink
    processor: ReproitSpanProcessor
    exporter: InMemorySpanExporter

    @contextmanager
    def operation(self, name: str = "GET /orders") -> Iterator[Any]:
        """A server span (its ``http.response.status_code`` may be set on what it yields)."""
        with self.tracer.start_as_current_span(name, kind=SpanKind.SERVER) as span:
            yield span

    def recorded(self, count: int = 1) -> list[Recorded]:
        traces = self.sink.wait_for(count)
        spans = [span.name for span in self.exporter.get_finished_spans()]
        return [Recorded(None, trace.events, spans) for trace in traces]


@contextmanager
def recording(
    *,
    otel: bool = True,
    otel_first: bool = False,
    recorder: bool = True,
    sink: ListSink | None = None,
) -> Iterator[Session]:
    """The recorder (unless ``recorder`` is false) and OpenTelemetry's psycopg instrumentation
    (unless ``otel`` is false); operations go to ``sink`` (a new :class:`ListSink`)."""
    sink = ListSink() if sink is None else sink
    processor = ReproitSpanProcessor(read_config({}), [sink])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = Session(provider.get_tracer("tests"), sink, processor, exporter)
    instrumentor = PsycopgInstrumentor()
    try:
        if otel and otel_first:
            instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
        if recorder:
            install_recorder()
        if otel and not otel_first:
            instrumentor.instrument(tracer_provider=provider, skip_dep_check=True)
        yield session
    finally:
        if otel:
            instrumentor.uninstrument()
        uninstall_recorder()
        provider.shutdown()


def call(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)``, run to its end on a new event loop when it is a coroutine."""
    result = function(*args)
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    return result


def record(
    dsn: str,
    app: Callable[..., Any],
    *,
    otel: bool = True,
    otel_first: bool = False,
    before: Callable[[str], Any] | None = None,
) -> Recorded:
    """Run ``app(dsn)`` as one captured server operation against the live database.

    ``before(dsn)`` runs first, recorded but outside any operation (a pool warmed at boot);
    what it returns is passed to ``app`` as a second argument.
    """
    with recording(otel=otel, otel_first=otel_first) as session:
        if before is None:
            with session.operation():
                result = call(app, dsn)
        else:
            prepared = before(dsn)
            with session.operation():
                result = call(app, dsn, prepared)
        [recorded] = session.recorded()
    recorded.result = result
    return recorded
