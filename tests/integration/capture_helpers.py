"""Failing operations and capture batches built with the real wire layer, for ingest tests."""

from __future__ import annotations

from typing import Any

from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.trace import BackendTrace, TraceContext

SEED = "00ff00ff00ff00ff"


def http_exchange(
    path: str = "/charge", status: int = 502, body: str = "upstream down"
) -> dict[str, Any]:
    """A recorded outbound HTTP exchange (PROTOCOL 4.1 shape, enough for the pipeline)."""
    return {
        "protocol": "http",
        "request": {"method": "POST", "url": f"http://payments:8080{path}", "headers": {}},
        "response": {"status": status, "headers": {}, "body": {"text": body}},
    }


def failing_trace(
    operation: str = "POST /orders",
    *,
    trace_id: str = "cap-1-1",
    status: int = 500,
    calls: int = 1,
    body: str = "upstream down",
    effects_complete: bool = True,
) -> BackendTrace:
    """A finished capture trace: ``calls`` recorded exchanges, then a ``status`` return."""
    context = TraceContext(trace_id=trace_id, capture_envelope=True, replay_seed=SEED)
    trace = BackendTrace.begin(
        context, operation, input={"body": {"sku": "widget"}}, wall_ms=lambda: 1_700_000_000_000
    )
    for index in range(calls):
        trace.effect(
            "call",
            resource="payments:8080",
            key=f"POST /charge/{index}",
            exchange=http_exchange(f"/charge/{index}", body=body),
        )
    trace.finish({"error": "payment failed"}, status, False, effects_complete)
    return trace


def queued(trace: BackendTrace) -> dict[str, Any]:
    """The queue entry the uploader builds a batch from."""
    events = trace.events
    returned = [event for event in events if event.get("kind") == "return"][-1]
    return {"operation": events[0]["operation"], "status": returned.get("status"), "events": events}


def built_batch(
    operation: str = "POST /orders",
    *,
    project_id: str = "orders-api",
    batch_number: int = 1,
    now_ms: int = 1_700_000_000_500,
    build: str | None = "1.2.3",
    commit: str | None = "abc123",
    **trace_options: Any,
) -> dict[str, Any]:
    """A capture batch for a failing ``operation``, built by the wire builder."""
    trace = failing_trace(operation, **trace_options)
    return build_capture_batch(
        queued(trace),
        config=CaptureSettings(project_id=project_id, build=build, commit=commit),
        environment=CaptureEnvironment(
            now_ms=now_ms,
            batch_number=batch_number,
            runtime="python 3.11.0",
            os="linux",
            arch="x64",
            tz="UTC",
        ),
    )
