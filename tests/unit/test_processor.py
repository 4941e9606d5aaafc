"""The span processor's bookkeeping, driven through a real SDK TracerProvider."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import NoOpTracerProvider, SpanKind

from reproit_otel import _guard, bootstrap
from reproit_otel.capture import recording
from reproit_otel.capture.inbound import InboundRequest, defer_until_operation, inbound_scope
from reproit_otel.capture.operation import HEAVY_MAX_EVENTS
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.wire.trace import BackendTrace

EXCHANGE = {"protocol": "http", "request": {"method": "GET", "url": "http://api/a"}}


class Sink:
    def __init__(self) -> None:
        self.traces: list[BackendTrace] = []

    def submit(self, trace: BackendTrace) -> None:
        self.traces.append(trace)


class Rig:
    def __init__(self, environ: dict[str, str] | None = None, **options: Any) -> None:
        self.sink = Sink()
        self.processor = ReproitSpanProcessor(read_config(environ or {}), [self.sink], **options)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("tests.processor")

    def server(self, name: str = "GET /x", status: int = 500) -> Any:
        method, path = name.split(" ", 1)
        attributes: dict[str, Any] = {"http.request.method": method, "url.path": path}
        attributes["http.response.status_code"] = status
        return self.tracer.start_as_current_span(name, kind=SpanKind.SERVER, attributes=attributes)

    def client(self, name: str = "GET", **attributes: Any) -> Any:
        return self.tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=attributes)

    def returned(self) -> dict[str, Any]:
        [trace] = self.sink.traces
        event: dict[str, Any] = trace.events[-1]
        return event


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.provider.shutdown()


def record(key: str = "GET /a") -> None:
    recorder = recording.start_exchange("requests")
    assert recorder is not None
    recorder.finish("call", resource="api", key=key, exchange=EXCHANGE)


def test_no_operation_means_nothing_records(rig: Rig) -> None:
    assert recording.start_exchange("requests") is None
    assert recording.recording_enabled() is False
    with rig.tracer.start_as_current_span("job"):
        assert recording.start_exchange("requests") is None


def test_suppressed_instrumentation_is_never_recorded(rig: Rig) -> None:
    with rig.server():
        assert recording.recording_enabled() is True
        token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            assert recording.start_exchange("requests") is None
            assert recording.recording_enabled() is False
        finally:
            detach(token)
    assert rig.returned()["effectsComplete"] is True


def test_without_middleware_the_span_attributes_name_and_finish_the_operation(rig: Rig) -> None:
    with rig.server("POST /orders", status=503), rig.client():
        record()
    [trace] = rig.sink.traces
    events = trace.events
    assert [(e["kind"], e["operation"]) for e in events] == [
        ("start", "POST /orders"),
        ("effect", "POST /orders"),
        ("return", "POST /orders"),
    ]
    assert {k: events[-1][k] for k in ("status", "success", "effectsComplete", "output")} == {
        "status": 503,
        "success": False,
        "effectsComplete": True,
        "output": None,
    }


@pytest.mark.parametrize("name", ["http.url", "url.full"])
def test_without_a_target_attribute_the_full_url_names_the_operation(rig: Rig, name: str) -> None:
    # A WSGI server that sets neither RAW_URI nor REQUEST_URI (wsgiref, Django's runserver):
    # OpenTelemetry leaves only the full URL, and the span is named after the route pattern.
    attributes = {
        "http.method": "GET",
        name: "http://127.0.0.1:8000/api/customers/a%20b/statement?month=2026-11&x=1&x=2",
    }
    with rig.tracer.start_as_current_span(
        "GET api/customers/<str:name>/statement", kind=SpanKind.SERVER, attributes=attributes
    ):
        pass
    [trace] = rig.sink.traces
    start = trace.events[0]
    assert (start["operation"], start["input"]) == (
        "GET /api/customers/a b/statement",
        {"query": {"month": "2026-11", "x": ["1", "2"]}},
    )


def test_a_transport_span_under_a_covered_client_span_is_covered(rig: Rig) -> None:
    with rig.server(), rig.client("requests GET"):
        recorder = recording.start_exchange("requests")
        with rig.client("urllib3 GET"):
            pass
        assert recorder is not None
        recorder.finish("call", resource="api", key="GET /a", exchange=EXCHANGE)
    assert rig.returned()["effectsComplete"] is True


def test_a_dependency_span_started_under_an_unbound_exchange_is_adopted(rig: Rig) -> None:
    with rig.server():
        recorder = recording.start_exchange("requests")  # bound to the server span
        with rig.client("urllib3 GET"):
            pass
        assert recorder is not None
        recorder.finish("call", resource="api", key="GET /a", exchange=EXCHANGE)
    assert rig.returned()["effectsComplete"] is True


def test_unrecorded_dependency_spans_make_effects_incomplete_with_their_reason(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="reproit_otel"), rig.server():
        with rig.client("GET"):
            pass
        with rig.tracer.start_as_current_span("SELECT shop", attributes={"db.system": "redis"}):
            pass
    assert rig.returned()["effectsComplete"] is False
    assert rig.processor.stats()["incomplete_reasons"] == {
        "tests.processor: GET": 1,
        "tests.processor: SELECT shop": 1,
    }
    assert sum("effects of 'GET /x' are incomplete" in r.getMessage() for r in caplog.records) == 2


def _sqlalchemy_statement(rig: Rig) -> Any:
    """A statement span as SQLAlchemy's instrumentation makes it: started, never made current."""
    tracer = rig.provider.get_tracer("opentelemetry.instrumentation.sqlalchemy")
    return tracer.start_span("SELECT shop", kind=SpanKind.CLIENT, attributes={"db.system": "pg"})


def _statement(library: str = "psycopg2") -> None:
    recorder = recording.start_exchange(library)
    assert recorder is not None
    recorder.finish("read", resource="pg", key="SELECT 1", exchange=EXCHANGE)


def test_a_database_exchange_beside_a_sqlalchemy_statement_span_covers_it(rig: Rig) -> None:
    with rig.server():
        span = _sqlalchemy_statement(rig)
        _statement()
        span.end()
    assert rig.returned()["effectsComplete"] is True


def test_a_sqlalchemy_span_is_not_covered_by_an_http_call_or_another_thread(rig: Rig) -> None:
    with rig.server():
        span = _sqlalchemy_statement(rig)
        with rig.client("GET"):
            record()  # an HTTP exchange beside it is no statement of the engine
        context = otel_context.get_current()

        def elsewhere() -> None:
            token = attach(context)
            try:
                _statement()  # a statement of the same request, on another thread
            finally:
                detach(token)

        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        span.end()
    assert rig.returned()["effectsComplete"] is False
    assert rig.processor.stats()["incomplete_reasons"] == {"sqlalchemy: SELECT shop": 1}


def test_a_covered_checkout_span_needs_no_exchange_of_its_own(rig: Rig) -> None:
    tracer = rig.provider.get_tracer("opentelemetry.instrumentation.sqlalchemy")
    with rig.server():
        with tracer.start_as_current_span("connect", kind=SpanKind.CLIENT):
            recording.cover_current_span()
        with tracer.start_as_current_span("connect", kind=SpanKind.CLIENT):
            pass
    assert rig.returned()["effectsComplete"] is False
    assert rig.processor.stats()["incomplete_reasons"] == {"sqlalchemy: connect": 1}


def test_failed_exchanges_and_unrecordable_calls_give_their_reason(rig: Rig) -> None:
    with rig.server(), rig.client():
        recorder = recording.start_exchange("requests")
        assert recorder is not None
        recorder.fail("body could not be read")
        recording.mark_incomplete("psycopg2: copy_expert")
    assert rig.returned()["effectsComplete"] is False
    assert rig.processor.stats()["incomplete_reasons"] == {
        "requests: body could not be read": 1,
        "psycopg2: copy_expert": 1,
    }


def test_an_exchange_still_pending_at_the_response_is_incomplete(rig: Rig) -> None:
    with rig.server():
        recorder = recording.start_exchange("requests")
    assert rig.returned()["effectsComplete"] is False
    assert rig.processor.stats()["incomplete_reasons"] == {
        "1 exchange(s) unfinished at the response": 1
    }
    assert recorder is not None
    recorder.finish("call", resource="api", key="GET /late", exchange=EXCHANGE)  # ignored
    assert [e["kind"] for e in rig.sink.traces[0].events] == ["start", "return"]


def test_effects_after_the_response_keep_the_operation_from_the_sinks(rig: Rig) -> None:
    inbound = InboundRequest("GET", "/x", {}, lambda name: None)
    with inbound_scope(inbound), rig.server():
        assert inbound.operation is not None
        inbound.operation.finish(500, {"error": 1})
        with rig.client("GET background"):
            pass
    assert rig.sink.traces == []
    assert rig.processor.stats()["late_effect_operations"] == 1


def test_work_deferred_before_the_server_span_runs_once_the_operation_begins(rig: Rig) -> None:
    inbound = InboundRequest("GET", "/x", {}, lambda name: None)
    seen: list[object] = []
    with inbound_scope(inbound):
        # What Flask does when it opens its session, before the span exists.
        defer_until_operation(inbound, lambda: seen.append(inbound.operation))
        defer_until_operation(inbound, lambda: record("GET /early"))
        assert seen == []
        with rig.server():
            assert seen == [inbound.operation]
            assert inbound.operation is not None
            with rig.client():
                record("GET /later")
            inbound.operation.finish(500, None)
    keys = [e["key"] for e in rig.sink.traces[0].events if e["kind"] == "effect"]
    assert keys == ["GET /early", "GET /later"]
    assert rig.returned()["effectsComplete"] is True


def test_never_mode_reports_incomplete_effects() -> None:
    rig = Rig({"REPROIT_EFFECTS_COMPLETE": "never"})
    with rig.server(), rig.client():
        record()
    assert rig.returned()["effectsComplete"] is False
    rig.provider.shutdown()


def test_secret_values_are_scrubbed_from_exchanges_keys_and_resources() -> None:
    rig = Rig({"REPROIT_SECRET_VALUES": "s3cr3t-value"})
    with rig.server(), rig.client():
        recorder = recording.start_exchange("requests")
        assert recorder is not None
        exchange = {"protocol": "http", "request": {"body": "token is s3cr3t-value!"}}
        recorder.finish(
            "call", resource="s3cr3t-value.api", key="GET /?k=s3cr3t-value", exchange=exchange
        )
    effect = rig.sink.traces[0].events[1]
    assert (effect["resource"], effect["key"], effect["exchange"]) == (
        "$reproit.api",
        "GET /?k=$reproit",
        {"protocol": "http", "request": {"body": "token is $reproit!"}},
    )
    rig.provider.shutdown()


def test_operations_past_the_limit_or_too_old_are_evicted() -> None:
    rig = Rig(max_operations=2)
    spans = [rig.tracer.start_span(f"GET /{n}", kind=SpanKind.SERVER) for n in range(3)]
    assert rig.processor.stats()["evicted_operations"] == 1
    for span in spans:
        span.end()
    assert [t.events[0]["operation"] for t in rig.sink.traces] == ["GET /1", "GET /2"]
    rig.provider.shutdown()

    old = Rig(operation_ttl_s=0.0)
    first = old.tracer.start_span("GET /old", kind=SpanKind.SERVER)
    old.tracer.start_span("GET /new", kind=SpanKind.SERVER).end()
    first.end()
    assert [t.events[0]["operation"] for t in old.sink.traces] == ["GET /new"]
    old.provider.shutdown()


def test_a_local_child_server_span_does_not_begin_another_operation(rig: Rig) -> None:
    with rig.server(), rig.tracer.start_as_current_span("inner", kind=SpanKind.SERVER):
        pass
    assert len(rig.sink.traces) == 1


def test_too_many_exchanges_are_refused_and_counted() -> None:
    rig = Rig({"REPROIT_CAPTURE_BUDGET": "0"})  # heavy capture off: the trace's 256 events
    with rig.server():
        for number in range(300):
            record(f"GET /{number}")
    rig.provider.shutdown()
    stats = rig.processor.stats()
    assert (stats["exchanges_recorded"], stats["exchanges_lost"]) == (255, 45)
    assert stats["incomplete_reasons"] == {
        "exchange not recorded: TooManyEvents": 1,
        "operation not finished: TooManyEvents": 1,
    }


def test_heavy_capture_records_past_the_trace_limit_up_to_its_own(rig: Rig) -> None:
    """With a capture budget (the default) a capture holds up to HEAVY_MAX_EVENTS events;
    exchanges past that cap are settled and counted, and the operation still finishes."""
    with rig.server():
        for number in range(HEAVY_MAX_EVENTS):
            record(f"GET /{number}")
    stats = rig.processor.stats()
    # start, the effects that fit, and room kept for the return
    assert (stats["exchanges_recorded"], stats["exchanges_lost"]) == (HEAVY_MAX_EVENTS - 2, 2)
    assert stats.get("incomplete_reasons", {}) == {}
    [trace] = rig.sink.traces
    assert (trace.capped_effects, trace.unheld_effects) == ({"call": 2}, {})
    assert len(trace.events) == HEAVY_MAX_EVENTS
    assert rig.returned()["effectsComplete"] is True


@pytest.mark.parametrize(("cap", "kept"), [("300", 298), ("10", 254), ("99999", 400)])
def test_the_event_cap_of_a_heavy_capture_comes_from_the_config(cap: str, kept: int) -> None:
    """REPROIT_CAPTURE_MAX_EVENTS lowers the cap (clamped to 256..16384); the first exchanges
    are kept, the later ones counted by kind."""
    rig = Rig({"REPROIT_CAPTURE_MAX_EVENTS": cap})
    with rig.server():
        for number in range(400):
            record(f"GET /{number}")
    rig.provider.shutdown()
    [trace] = rig.sink.traces
    effects = [event for event in trace.events if event["kind"] == "effect"]
    assert [event["key"] for event in effects] == [f"GET /{n}" for n in range(kept)]
    assert trace.capped_effects == ({"call": 400 - kept} if kept < 400 else {})
    assert rig.returned()["effectsComplete"] is True


def test_heavy_capture_keeps_a_whole_operation_of_a_few_hundred_calls(rig: Rig) -> None:
    with rig.server():
        for number in range(300):
            record(f"GET /{number}")
    stats = rig.processor.stats()
    assert (stats["exchanges_recorded"], stats.get("exchanges_lost", 0)) == (300, 0)
    [trace] = rig.sink.traces
    assert [e["kind"] for e in trace.events] == ["start", *["effect"] * 300, "return"]


def test_scan_context_needs_scan_mode_and_the_token() -> None:
    headers = {"x-reproit-trace": "t-1", "x-reproit-scan-token": "tok"}
    for environ, expected in (
        ({}, None),
        ({"REPROIT_SCAN": "1"}, "t-1"),
        ({"REPROIT_SCAN": "1", "REPROIT_SCAN_TOKEN": "tok"}, "t-1"),
        ({"REPROIT_SCAN": "1", "REPROIT_SCAN_TOKEN": "other"}, None),
    ):
        rig = Rig(environ, capture=False)
        inbound = InboundRequest("GET", "/x", {}, headers.get)
        with inbound_scope(inbound), rig.server():
            pass
        operation = inbound.operation
        assert (operation.trace.trace_id if operation else None) == expected, environ
        assert rig.sink.traces == []  # scan operations are never captured
        rig.provider.shutdown()


def test_guard_swallows_counts_or_reraises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_guard.STRICT_ENV, "0")
    before = _guard.internal_errors().get("tests.guard", 0)

    @_guard.guarded("tests.guard")
    def broken() -> int:
        raise ValueError("defect")

    assert broken() is None
    assert _guard.guard_call("tests.guard", int, "x", default=7) == 7
    assert _guard.internal_errors()["tests.guard"] == before + 2
    with pytest.raises(KeyboardInterrupt), _guard.guarded("tests.guard"):
        raise KeyboardInterrupt
    monkeypatch.setenv(_guard.STRICT_ENV, "1")
    with pytest.raises(ValueError, match="defect"):
        broken()


@pytest.mark.parametrize(
    ("arg", "decision"),
    [
        ("0", Decision.RECORD_ONLY),
        ("1", Decision.RECORD_AND_SAMPLE),
        (None, Decision.RECORD_AND_SAMPLE),
    ],
)
def test_the_sampler_records_what_the_ratio_drops(arg: str | None, decision: Decision) -> None:
    sampler = bootstrap.reproit_parentbased_traceidratio(arg)
    result = sampler.should_sample(None, 0x1234, "GET /x")
    assert result.decision is decision
    assert sampler.get_description().startswith("RecordDropped{ParentBased{")


def test_install_is_idempotent_and_needs_an_sdk_provider() -> None:
    provider = TracerProvider()
    config = read_config({})
    try:
        first = bootstrap.install(provider, config=config)
        assert first is not None
        assert bootstrap.install(provider, config=config) is first
        assert bootstrap.install(NoOpTracerProvider(), config=config) is None
        assert bootstrap.install(provider, config=read_config({"REPROIT_DISABLED": "1"})) is None
    finally:
        bootstrap.uninstall()
        provider.shutdown()
    assert recording.current_pipeline() is None


def test_secret_values_registered_later_are_scrubbed_from_input_output_and_exchanges(
    rig: Rig,
) -> None:
    secret = "registered-later-9f3a"
    recording.register_secret_values([secret])
    inbound = InboundRequest("POST", "/x", {"body": {"note": f"use {secret}"}}, lambda _: None)
    with inbound_scope(inbound), rig.server("POST /x"):
        recorder = recording.start_exchange("requests")
        assert recorder is not None
        recorder.finish("call", resource="api", key="GET /a", exchange={"body": secret})
        assert inbound.operation is not None
        inbound.operation.finish(500, {"echo": secret})
    start, effect, returned = rig.sink.traces[0].events
    assert (start["input"], effect["exchange"], returned["output"]) == (
        {"body": {"note": "use $reproit"}},
        {"body": "$reproit"},
        {"echo": "$reproit"},
    )
