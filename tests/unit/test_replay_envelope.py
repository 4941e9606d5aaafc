"""Envelope pinning: the pinned random stream serves the application, not the id generator."""

from __future__ import annotations

import random

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel.replay.envelope import pin_envelope
from reproit_otel.wire.rng import ReplayRNG

SEED = "00ff00ff00ff00ff"


def test_spans_do_not_draw_from_the_pinned_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    provider = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    tracer = provider.get_tracer("tests")  # created before the pin, like an instrumentor's
    pinned = pin_envelope({"replaySeed": SEED})
    try:
        for _ in range(5):
            with tracer.start_as_current_span("health check"):
                pass
        drawn = [random.random() for _ in range(3)]
        span = tracer.start_span("request")
        span.end()
        context = span.get_span_context()
    finally:
        pinned.restore()
    expected = ReplayRNG(SEED)
    assert drawn == [expected.random() for _ in range(3)]
    assert context.span_id != 0 and context.trace_id != 0
    assert "generate_span_id" not in vars(provider.id_generator)
    assert "generate_trace_id" not in vars(provider.id_generator)
    assert pinned.replay_seed == SEED
