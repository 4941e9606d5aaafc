"""Record requests calls through the real capture pipeline and turn them into capsules."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import requests
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.instrumentation.requests import install_recorder, uninstall_recorder
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.trace import BackendTrace

T = TypeVar("T")


class ListSink:
    """Keeps every finished operation the processor hands off."""

    def __init__(self) -> None:
        self.traces: list[BackendTrace] = []

    def submit(self, trace: BackendTrace) -> None:
        self.traces.append(trace)


class Capture:
    """A tracer provider with the reproit span processor and the requests recorder."""

    def __init__(self, provider: TracerProvider, sink: ListSink) -> None:
        self.provider = provider
        self.sink = sink
        self.tracer = provider.get_tracer("tests.requests")

    def operation(self, app: Callable[[], T], name: str = "GET /orders") -> tuple[T, list[Any]]:
        """Run ``app`` as one failing server operation; return its result and its events."""
        method, _, path = name.partition(" ")
        attributes = {"http.method": method, "http.target": path, "http.status_code": 500}
        before = list(self.sink.traces)
        with self.tracer.start_as_current_span(name, kind=SpanKind.SERVER, attributes=attributes):
            result = app()
        # Other threads may hand off their own operations meanwhile: pick ours by name.
        mine = [
            trace
            for trace in self.sink.traces
            if trace not in before and trace.events[0]["operation"] == name
        ]
        assert len(mine) == 1, "the operation was not handed off"
        return result, mine[0].events


@contextmanager
def capturing(environ: dict[str, str] | None = None) -> Iterator[Capture]:
    """The real processor (configured from ``environ``) and recorder, for the block."""
    sink = ListSink()
    processor = ReproitSpanProcessor(read_config(environ or {}), [sink])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    install_recorder()
    try:
        yield Capture(provider, sink)
    finally:
        uninstall_recorder()
        provider.shutdown()


def effects(events: list[Any]) -> list[dict[str, Any]]:
    """The effect events without their per-run fields (trace id, sequence, clock)."""
    return [
        {key: event[key] for key in ("effect", "resource", "key", "exchange") if key in event}
        for event in events
        if event["kind"] == "effect"
    ]


def capsule_of(events: list[Any]) -> dict[str, Any]:
    """A version 2 capsule of the operation, as it would be read back from its file."""
    capsule = {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": events[0]["operation"],
        "oracle": "backend-server-error",
        "events": events,
    }
    parsed: dict[str, Any] = json.loads(canonical_json(capsule))
    return parsed


def sent_headers(**extra: str) -> dict[str, str]:
    """The request headers requests sends by default (lowercased, sorted), plus ``extra``."""
    headers = {name.lower(): value for name, value in requests.utils.default_headers().items()}
    headers.update(extra)
    return dict(sorted(headers.items()))


def upstream_headers(**extra: str) -> dict[str, str]:
    """The headers every upstream response carries, plus ``extra`` (sorted as recorded)."""
    headers = {"date": "Thu, 01 Jan 2026 00:00:00 GMT", "server": "upstream/1", **extra}
    return dict(sorted(headers.items()))
