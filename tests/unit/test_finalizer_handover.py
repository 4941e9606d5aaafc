"""What finalizers hand over, and what the hooks do while the garbage collector runs.

The collector runs finalizers inside whatever the thread was doing, reproit-otel's locked
sections included, so nothing a finalizer reaches may take a lock there: the work waits in
``recording.handed_over`` for the next hook. Driven through a real SDK ``TracerProvider`` and
the real span processor; collections are real (``gc.collect()`` over a reference cycle).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from reproit_otel.capture import recording
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.wire.trace import BackendTrace

EXCHANGE = {"protocol": "http", "request": {"method": "GET", "url": "http://api/a"}}


class _Finalized:
    """Runs ``action`` from its finalizer; it refers to itself, so only the cyclic collector
    frees it (from inside ``gc.collect()`` here, from any allocation in production)."""

    def __init__(self, action: Callable[[], None]) -> None:
        self.action = action
        self.me = self

    def __del__(self) -> None:
        self.action()


def _collect_running(action: Callable[[], None]) -> None:
    _Finalized(action)
    gc.collect()


class _Sink:
    def __init__(self) -> None:
        self.traces: list[BackendTrace] = []

    def submit(self, trace: BackendTrace) -> None:
        self.traces.append(trace)


Rig = tuple[TracerProvider, ReproitSpanProcessor, _Sink]


@pytest.fixture
def rig() -> Iterator[Rig]:
    sink = _Sink()
    processor = ReproitSpanProcessor(read_config({}), [sink])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    recording.watch_collections()
    yield provider, processor, sink
    provider.shutdown()
    recording.settle_handed_over()


def test_the_collecting_flag_is_up_only_inside_a_collection_on_its_thread() -> None:
    recording.watch_collections()
    seen: list[bool] = []
    _collect_running(lambda: seen.append(recording.collecting.active))
    assert (seen, recording.collecting.active) == ([True], False)


def test_handed_over_work_runs_once_in_order_at_the_next_settle() -> None:
    ran: list[str] = []
    recording.hand_over(lambda: ran.append("first"))
    recording.hand_over(lambda: ran.append("second"))
    assert ran == []
    recording.settle_handed_over()
    recording.settle_handed_over()
    assert ran == ["first", "second"]


def test_work_handed_over_again_while_settling_waits_for_the_next_settle() -> None:
    ran: list[int] = []

    def again() -> None:
        ran.append(len(ran))
        if len(ran) < 3:
            recording.hand_over(again)

    recording.hand_over(again)
    recording.settle_handed_over()
    assert ran == [0]
    recording.settle_handed_over()
    recording.settle_handed_over()
    assert ran == [0, 1, 2]
    assert not recording.handed_over


def test_an_exchange_finished_by_a_finalizer_is_recorded_at_the_next_hook(rig: Rig) -> None:
    provider, _, sink = rig
    tracer = provider.get_tracer("tests")
    attributes: dict[str, Any] = {"http.request.method": "GET", "url.path": "/x"}
    attributes["http.response.status_code"] = 500
    with tracer.start_as_current_span("GET /x", kind=SpanKind.SERVER, attributes=attributes):
        recorder = recording.start_exchange("requests")
        assert recorder is not None
        _collect_running(
            lambda: recorder.finish("call", resource="api", key="GET /a", exchange=EXCHANGE)
        )
        assert not recorder.done  # nothing taken on the collector's thread
        assert len(recording.handed_over) == 1
        assert recording.start_exchange("requests") is not None  # the next hook settles it
        assert recorder.done
    [trace] = sink.traces
    assert [e["key"] for e in trace.events if e["kind"] == "effect"] == ["GET /a"]


def test_a_span_ended_by_a_finalizer_is_settled_before_the_operation_finishes(rig: Rig) -> None:
    provider, processor, sink = rig
    tracer = provider.get_tracer("tests")
    attributes: dict[str, Any] = {"http.request.method": "GET", "url.path": "/x"}
    attributes["http.response.status_code"] = 500
    with tracer.start_as_current_span("GET /x", kind=SpanKind.SERVER, attributes=attributes):
        span = tracer.start_span("cleanup", kind=SpanKind.CLIENT)
        _collect_running(span.end)
        assert len(recording.handed_over) == 1  # on_end waits for a hook with no lock held
    [trace] = sink.traces
    # The span ended (handed over, settled at the finish) with no exchange: incomplete, and
    # for that reason, not for a span still running at the response.
    assert trace.events[-1]["effectsComplete"] is False
    assert processor.stats()["incomplete_reasons"] == {"tests: cleanup": 1}
    assert not recording.handed_over
