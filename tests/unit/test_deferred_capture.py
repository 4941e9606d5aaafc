"""Deferred capture: healthy operations never build their exchanges, failing ones get the
very events eager recording would have given them.

The trace level (``BackendTrace.defer_effect`` and ``input_factory``) is compared with eager
pushes under pinned clocks; the pipeline level (span processor, operation, uploader) counts
how often a recorder's ``build()`` runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from reproit_otel.capture import recording
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.capture.uploader import Uploader, UploaderSettings
from reproit_otel.config import read_config
from reproit_otel.errors import TraceError
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.batch import CaptureSettings
from reproit_otel.wire.canonical import canonical_json_bytes
from reproit_otel.wire.trace import (
    MAX_EVENTS,
    BackendTrace,
    TraceContext,
    reset_sequence,
)

CONTEXT = TraceContext("cap-1-1", build="b1", capture_envelope=True, replay_seed="0123456789abcdef")
INPUT = {"query": {"id": "7"}, "headers": {"authorization": "Bearer x", "accept": "*/*"}}
EXCHANGE: dict[str, Any] = {
    "protocol": "http",
    "request": {"method": "GET", "url": "http://api/a?token=$reproit", "headers": {"cookie": "c"}},
    "response": {"status": 200, "body": {"json": {"password": "p", "ok": True}}},
}


def _clocks() -> dict[str, Callable[[], int]]:
    wall = itertools.count(1_700_000_000_000, 7)
    mono = itertools.count(1000, 13)
    return {"wall_ms": lambda: next(wall), "mono_ns": lambda: next(mono)}


def _eager() -> BackendTrace:
    reset_sequence(40)
    trace = BackendTrace.begin(CONTEXT, "GET /orders", input=INPUT, **_clocks())
    trace.effect("call", resource="api", key="GET /a?token=$reproit", exchange=EXCHANGE)
    trace.oracle("agent-response-content", {"why": "x"})
    trace.effect("read", resource="pg", key="SELECT 1", exchange={"protocol": "pg"})
    trace.finish({"email": "e"}, 500, False, True)
    return trace


def _deferred() -> BackendTrace:
    reset_sequence(40)
    trace = BackendTrace.begin(CONTEXT, "GET /orders", input_factory=lambda: INPUT, **_clocks())
    trace.defer_effect("call", lambda: ("api", "GET /a?token=$reproit", EXCHANGE))
    trace.oracle("agent-response-content", {"why": "x"})
    trace.defer_effect("read", lambda: ("pg", "SELECT 1", {"protocol": "pg"}))
    trace.finish({"email": "e"}, 500, False, True)
    return trace


def test_deferred_events_are_the_eager_events_byte_for_byte() -> None:
    eager, deferred = _eager(), _deferred()
    assert deferred.deferred_count == 3
    assert canonical_json_bytes(deferred.events) == canonical_json_bytes(eager.events)
    assert deferred.events == eager.events
    assert deferred.deferred_count == 0
    assert deferred.header() == eager.header()


def test_a_capture_read_only_after_its_finish_is_the_eager_trace() -> None:
    """Nothing read before the finish: the common fields and the return event are built late."""
    reset_sequence(40)
    eager = BackendTrace.begin(CONTEXT, "GET /orders", input=INPUT, **_clocks())
    eager.effect("call", resource="api", key="GET /a?token=$reproit", exchange=EXCHANGE)
    eager.effect("read", resource="pg", key="SELECT 1", exchange={"protocol": "pg"})
    eager.finish({"ok": True}, 200, True, True)
    reset_sequence(40)
    lazy = BackendTrace.begin(CONTEXT, "GET /orders", input_factory=lambda: INPUT, **_clocks())
    lazy.defer_effect("call", lambda: ("api", "GET /a?token=$reproit", EXCHANGE))
    lazy.defer_effect("read", lambda: ("pg", "SELECT 1", {"protocol": "pg"}))
    lazy.finish(None, 200, True, True, output_factory=lambda: {"ok": True})
    assert (lazy.return_status, lazy.may_hold_oracle_marker) == (200, False)
    settled = lazy.settled_events()
    assert [(event["kind"], event["output"]) for event in settled] == [("return", None)]
    assert lazy.events == eager.events
    assert lazy.header() == eager.header()
    assert lazy.return_event is lazy.events[-1] is settled[0]
    assert (lazy.trace_id, lazy.operation) == ("cap-1-1", "GET /orders")


def test_a_capture_without_status_or_events_read_reports_unset() -> None:
    trace = BackendTrace.begin(CONTEXT, "GET /x", input_factory=dict)
    assert trace.return_status is UNSET
    trace.finish(None, UNSET, False, False)
    assert trace.return_status is UNSET
    assert [event["kind"] for event in trace.events] == ["start", "return"]
    assert "status" not in trace.events[-1]


def test_settled_events_leave_deferred_ones_unbuilt() -> None:
    calls: list[str] = []

    def note(name: str, value: Any) -> Any:
        calls.append(name)
        return value

    trace = BackendTrace.begin(CONTEXT, "GET /x", input_factory=lambda: note("input", None))
    trace.defer_effect("call", lambda: note("call", ("api", "GET /a", {})))
    trace.finish(None, 200, True, True)
    assert [event["kind"] for event in trace.settled_events()] == ["return"]
    assert calls == []
    trace.materialize()
    assert calls == ["input", "call"]
    assert [event["kind"] for event in trace.settled_events()] == ["start", "effect", "return"]
    trace.materialize()
    assert calls == ["input", "call"]  # built once


def test_a_build_that_gives_nothing_leaves_its_event_out() -> None:
    reset_sequence(1)
    trace = BackendTrace.begin(CONTEXT, "GET /x")
    trace.defer_effect("call", lambda: None)
    trace.defer_effect("call", lambda: ("reproit-oracle", "agent-response-content", {}))
    trace.defer_effect("write", lambda: ("pg", "INSERT", {}))
    trace.finish(None, 500, False, True)
    events = trace.events
    assert [(e["kind"], e["sequence"]) for e in events] == [
        ("start", 1),
        ("effect", 4),
        ("return", 5),
    ]


def test_deferred_events_count_against_the_event_limit() -> None:
    trace = BackendTrace.begin(CONTEXT, "GET /x")
    for _ in range(MAX_EVENTS - 1):
        trace.defer_effect("call", lambda: ("api", "GET /a", {}))
    with pytest.raises(TraceError) as raised:
        trace.defer_effect("call", lambda: ("api", "GET /a", {}))
    assert raised.value.code == "TooManyEvents"
    with pytest.raises(TraceError):
        trace.finish(None, 500, False, True)
    assert trace.deferred_count == MAX_EVENTS - 1


def test_only_boundary_effects_are_deferred_and_not_after_the_finish() -> None:
    trace = BackendTrace.begin(CONTEXT, "GET /x")
    with pytest.raises(TraceError) as raised:
        trace.defer_effect("emit", lambda: ("api", "k", {}))
    assert raised.value.code == "InvalidOperation"
    trace.finish(None, 200, True, True)
    with pytest.raises(TraceError) as raised:
        trace.defer_effect("call", lambda: ("api", "k", {}))
    assert raised.value.code == "AlreadyFinished"


# -- the pipeline ---------------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.traces: list[BackendTrace] = []

    def submit(self, trace: BackendTrace) -> None:
        self.traces.append(trace)


class Rig:
    def __init__(self, *, with_sink: bool = True) -> None:
        """``with_sink=False``: the uploader is the only sink (as in production), so a
        failing capture is opened by the uploader, not by a sink on the request thread."""
        self.sink = Sink()
        self.uploader = Uploader(
            UploaderSettings(
                endpoint="http://127.0.0.1:9/v1/capture-batches",
                api_key="k",
                capture=CaptureSettings("shop"),
                flush_interval_ms=60_000,
            )
        )
        config = read_config({"REPROIT_SECRET_VALUES": "sk_live_1234"})
        sinks: list[Any] = [self.uploader, self.sink] if with_sink else [self.uploader]
        self.processor = ReproitSpanProcessor(config, sinks)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("tests.deferred")
        self.builds: list[str] = []
        self.build_threads: set[int] = set()

    def request(self, status: int, *, unrecordable: bool = False) -> BackendTrace | None:
        attributes = {"http.request.method": "GET", "url.path": "/x"}
        attributes_with_status: dict[str, Any] = {
            **attributes,
            "http.response.status_code": status,
        }
        with self.tracer.start_as_current_span(
            "GET /x", kind=SpanKind.SERVER, attributes=attributes_with_status
        ):
            with self.tracer.start_as_current_span("GET", kind=SpanKind.CLIENT):
                recorder = recording.start_exchange("requests")
                assert recorder is not None
                recorder.finish_deferred("call", self._build("call-1", unrecordable=False))
            recorder = recording.start_exchange("psycopg2")
            assert recorder is not None
            recorder.finish_deferred("read", self._build("read-1", unrecordable=unrecordable))
        return self.sink.traces[-1] if self.sink.traces else None

    def _build(
        self, name: str, *, unrecordable: bool
    ) -> Callable[[], tuple[str, str, dict[str, Any]]]:
        def build() -> tuple[str, str, dict[str, Any]]:
            self.builds.append(name)
            self.build_threads.add(threading.get_ident())
            if unrecordable:
                raise recording.Unrecordable("a value with no encoding")
            return "api", "GET /a?k=sk_live_1234", {"protocol": "http", "note": "sk_live_1234"}

        return build


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.provider.shutdown()
    made.uploader.close(0.1)


def _request(rig: Rig, status: int, *, unrecordable: bool = False) -> BackendTrace:
    trace = rig.request(status, unrecordable=unrecordable)
    assert trace is not None
    return trace


def test_a_healthy_capture_builds_nothing_and_the_uploader_judges_it(rig: Rig) -> None:
    trace = _request(rig, 200)
    assert rig.builds == []
    assert rig.uploader.stats()["ineligible"] == {"not-a-failure": 1}
    assert rig.builds == []
    # Whoever reads the events gets them, built then (once).
    effects = [event for event in trace.events if event["kind"] == "effect"]
    assert rig.builds == ["call-1", "read-1"]
    assert [(e["effect"], e["key"], e["exchange"]) for e in effects] == [
        ("call", "GET /a?k=$reproit", {"protocol": "http", "note": "$reproit"}),
        ("read", "GET /a?k=$reproit", {"protocol": "http", "note": "$reproit"}),
    ]


def test_a_failing_capture_is_built_before_its_return_and_uploaded(rig: Rig) -> None:
    trace = _request(rig, 503)
    assert rig.builds == ["call-1", "read-1"]
    assert trace.deferred_count == 0
    events = trace.events
    assert [event["kind"] for event in events] == ["start", "effect", "effect", "return"]
    sequences = [event["sequence"] for event in events]
    assert sequences == sorted(sequences) and len(set(sequences)) == 4
    assert events[-1]["effectsComplete"] is True
    assert rig.uploader.stats()["captured_operations"] == 1


def test_an_unrecordable_exchange_found_at_the_finish_makes_effects_incomplete(
    rig: Rig,
) -> None:
    trace = _request(rig, 500, unrecordable=True)
    events = trace.events
    assert [event["kind"] for event in events] == ["start", "effect", "return"]
    assert events[-1]["effectsComplete"] is False
    assert rig.uploader.stats()["ineligible"] == {"effects-incomplete": 1}
    reasons = rig.processor.stats()["incomplete_reasons"]
    assert reasons == {"psycopg2: a value with no encoding": 1}


@pytest.mark.parametrize("unrecordable", [False, True], ids=["recordable", "unrecordable"])
def test_a_failing_capture_is_built_on_the_uploaders_thread(unrecordable: bool) -> None:
    # The uploader as the only sink: the request's thread builds nothing; the uploader's
    # thread opens the operation (builds, scrubs, finds the unrecordable exchange) and queues
    # or refuses it, with what a sink reading on the request thread would have seen.
    rig = Rig(with_sink=False)
    try:
        assert rig.request(500, unrecordable=unrecordable) is None
        assert rig.builds == []
        deadline = time.monotonic() + 10
        while len(rig.builds) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # the uploader's thread looks every second
        assert rig.builds == ["call-1", "read-1"]
        assert threading.get_ident() not in rig.build_threads
        stats = rig.uploader.stats()
        processor = rig.processor.stats()
        if unrecordable:
            assert stats["ineligible"] == {"effects-incomplete": 1}
            assert processor["incomplete_reasons"] == {"psycopg2: a value with no encoding": 1}
            assert processor["incomplete_operations"] == 1
            return
        assert "incomplete_operations" not in processor
        assert stats["captured_operations"] == 1
        (queued,) = list(rig.uploader._queue)
        events = queued["events"]
        assert [event["kind"] for event in events] == ["start", "effect", "effect", "return"]
        assert events[-1]["effectsComplete"] is True and events[-1]["status"] == 500
        assert [e["key"] for e in events if e["kind"] == "effect"] == ["GET /a?k=$reproit"] * 2
    finally:
        rig.provider.shutdown()
        rig.uploader.close(0.1)


def test_stats_open_what_waits_so_their_counts_are_exact() -> None:
    rig = Rig(with_sink=False)
    try:
        for _ in range(3):
            rig.request(502)
        rig.request(200)
        # Asked at once, before the uploader's thread looked: stats() opens the three first.
        stats = rig.uploader.stats()
        assert stats["captured_operations"] == 3
        assert stats["ineligible"] == {"not-a-failure": 1}
        assert stats["queued"] == 3
    finally:
        rig.provider.shutdown()
        rig.uploader.close(0.1)


def test_stats_wait_for_the_failure_the_uploaders_thread_is_opening() -> None:
    # The uploader's thread has taken the failure and is building it when stats() is asked:
    # stats() waits for it rather than answering without it.
    rig = Rig(with_sink=False)
    building = threading.Event()

    def slow_build() -> tuple[str, str, dict[str, Any]]:
        building.set()
        time.sleep(0.3)
        return "api", "GET /slow", {"protocol": "http"}

    try:
        with rig.tracer.start_as_current_span(
            "GET /x",
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "GET", "url.path": "/x"},
        ) as span:
            recorder = recording.start_exchange("requests")
            assert recorder is not None
            recorder.finish_deferred("call", slow_build)
            span.set_attribute("http.response.status_code", 500)
        assert building.wait(10), "the uploader's thread never opened the failure"
        assert rig.uploader.stats()["captured_operations"] == 1
    finally:
        rig.provider.shutdown()
        rig.uploader.close(0.1)


def test_failures_past_the_queue_limit_are_dropped_before_they_are_built() -> None:
    rig = Rig(with_sink=False)
    rig.uploader.settings = dataclasses.replace(rig.uploader.settings, queue_limit=2)
    try:
        for _ in range(5):
            rig.request(500)
        stats = rig.uploader.stats()
        assert (stats["captured_operations"], stats["dropped_operations"]) == (5, 3)
        assert stats["queued"] == 2
        assert rig.builds == ["call-1", "read-1"] * 2  # only the two kept were built
    finally:
        rig.provider.shutdown()
        rig.uploader.close(0.1)


def test_a_healthy_request_and_its_operation_leave_no_reference_cycle(rig: Rig) -> None:
    """The request, its operation, its trace and the deferred builders hold no cycle: they
    are freed by reference counting, not left to the cyclic collector on every request."""
    import gc

    from reproit_otel.capture.inbound import InboundRequest, inbound_scope

    def one() -> None:
        inbound = InboundRequest(
            "GET", "/x", {}, lambda name: None, input_factory=lambda: {"query": {"a": "1"}}
        )
        with (
            inbound_scope(inbound),
            rig.tracer.start_as_current_span("GET /x", kind=SpanKind.SERVER),
        ):
            with rig.tracer.start_as_current_span("GET", kind=SpanKind.CLIENT):
                recorder = recording.start_exchange("requests")
                assert recorder is not None
                recorder.finish_deferred("call", lambda: ("api", "GET /a", {"protocol": "http"}))
            assert inbound.operation is not None
            inbound.operation.finish(200, output_factory=lambda: {"ok": True})

    one()
    rig.sink.traces.clear()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            one()
        rig.sink.traces.clear()
        gc.collect()
        ours = sorted(
            {
                type(thing).__module__ + "." + type(thing).__qualname__
                for thing in gc.garbage
                if type(thing).__module__.startswith("reproit_otel")
            }
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert ours == []


def _uncovered_request(rig: Rig, status: int) -> None:
    """A request whose CLIENT span no recorder covers (a library reproit-otel does not
    record), beside a covered one."""
    attributes = {"http.request.method": "GET", "url.path": "/x"}
    with rig.tracer.start_as_current_span(
        "GET /x",
        kind=SpanKind.SERVER,
        attributes={**attributes, "http.response.status_code": status},
    ):
        with rig.tracer.start_as_current_span("GET", kind=SpanKind.CLIENT):
            recorder = recording.start_exchange("requests")
            assert recorder is not None
            recorder.finish_deferred("call", rig._build("call-1", unrecordable=False))
        with rig.tracer.start_as_current_span("GET shop", kind=SpanKind.CLIENT):
            pass


def test_span_coverage_is_decided_only_for_a_failure_on_the_uploaders_thread() -> None:
    # A healthy request's spans are only noted: nothing is judged, nothing counted. A failing
    # one's coverage is decided when the uploader's thread opens it: the uncovered span makes
    # its effects incomplete, with its reason, as if it had been judged when it ended.
    rig = Rig(with_sink=False)
    try:
        _uncovered_request(rig, 200)
        processor = rig.processor.stats()
        assert (processor["incomplete_reasons"], processor.get("incomplete_operations")) == (
            {},
            None,
        )
        _uncovered_request(rig, 500)
        stats = rig.uploader.stats()  # opens the failure, as the uploader's thread would
        assert (stats["ineligible"], stats["captured_operations"]) == (
            {"not-a-failure": 1, "effects-incomplete": 1},
            0,
        )
        processor = rig.processor.stats()
        assert processor["incomplete_reasons"] == {"tests.deferred: GET shop": 1}
        assert processor["incomplete_operations"] == 1
    finally:
        rig.provider.shutdown()
        rig.uploader.close(0.1)


def test_a_span_still_running_at_the_response_is_judged_at_the_finish(rig: Rig) -> None:
    attributes = {"http.request.method": "GET", "url.path": "/x"}
    with rig.tracer.start_as_current_span(
        "GET /x", kind=SpanKind.SERVER, attributes={**attributes, "http.response.status_code": 200}
    ):
        running = rig.tracer.start_span("GET background", kind=SpanKind.CLIENT)
    running.end()
    assert rig.processor.stats()["incomplete_reasons"] == {
        "tests.deferred: GET background still running at the response": 1
    }
