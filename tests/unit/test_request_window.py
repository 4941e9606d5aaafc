"""The request window: which server span begins the recorded request, and what it starts."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from reproit_otel.replay.request_window import (
    USAGE_MARKER,
    RequestWindow,
    request_matches_operation,
)
from reproit_otel.wire.replay import ReplaySession

START_MS = 1_764_600_000_000


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"http.method": "POST", "http.target": "/orders/7?x=1"}, True),
        ({"http.request.method": "POST", "url.path": "/orders/7"}, True),
        ({"http.method": "POST", "http.url": "http://127.0.0.1:8000/orders/7?x=1"}, True),
        ({"http.request.method": "post", "url.full": "http://h/orders/7"}, True),
        ({"http.method": "GET", "http.target": "/"}, False),  # check's boot probe
        ({"http.method": "POST", "http.target": "/orders/8"}, False),
        ({"http.method": "GET", "http.target": "/orders/7"}, False),
        ({"http.method": "POST"}, True),  # no path to compare: counts as the request
        ({}, True),
    ],
)
def test_which_server_span_is_the_recorded_request(attributes: Any, expected: bool) -> None:
    assert request_matches_operation(attributes, "POST /orders/7") is expected


def _session() -> ReplaySession:
    return ReplaySession(
        {
            "format": "reproit-backend-capture",
            "version": 2,
            "operation": "POST /orders/7",
            "envelope": {"observedAtMs": START_MS},
            "events": [
                {"kind": "start", "at": START_MS, "input": {}},
                {
                    "kind": "effect",
                    "at": START_MS + 3,
                    "exchange": {
                        "protocol": "pg",
                        "request": {"text": "SELECT 42"},
                        "response": {"rowCount": 1, "rows": []},
                    },
                },
            ],
        }
    )


def test_the_request_begins_once_with_the_clock_restarted_and_reports_when_it_ends() -> None:
    session = _session()
    session.usage.await_request()
    now = [START_MS + 5_000.0]  # the boot took five seconds of the pinned clock
    session.usage._clock = lambda: now[0] / 1000.0
    lines: list[str] = []
    begun: list[float] = []

    def restart_clock() -> None:
        begun.append(now[0])
        now[0] = START_MS  # what PinnedEnvelope.restart_clock does

    window = RequestWindow(session, "POST /orders/7", restart_clock, lines.append)
    provider = TracerProvider()
    provider.add_span_processor(window)
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span(
        "GET /", kind=SpanKind.SERVER, attributes={"http.method": "GET", "http.target": "/"}
    ):
        pass
    assert session.usage.awaiting and lines == []
    request = {"http.method": "POST", "http.target": "/orders/7"}
    with tracer.start_as_current_span("POST", kind=SpanKind.SERVER, attributes=request):
        assert not session.usage.awaiting
        # The request's start is read from the restarted clock, not from the boot's end.
        assert session.usage.live_start_ms == START_MS
        with tracer.start_as_current_span("inner", kind=SpanKind.SERVER, attributes=request):
            pass
        assert session.match("pg", {"text": "SELECT 42"}) is not None
    with tracer.start_as_current_span("POST", kind=SpanKind.SERVER, attributes=request):
        pass
    assert begun == [START_MS + 5_000.0]
    assert lines == [
        USAGE_MARKER + '{"dataExchanges":1,"consumed":1,"unused":0,"ambientExchanges":0,'
        '"ambient":0,"beforeRequest":0,"beforeRequestCalls":[],"consumedOrder":[0],'
        '"unusedCalls":[]}'
    ]
    provider.shutdown()
    assert window.stopped
