"""The uploader against a real loopback ingest: healthy, down, hanging, 5xx, 429, 4xx."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from reproit_otel.capture.uploader import Uploader, UploaderSettings, backoff_ms
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.canonical import canonical_json_bytes
from reproit_otel.wire.trace import BackendTrace, TraceContext
from tests.integration.capture_helpers import SEED, failing_trace, queued
from tests.integration.loopback_ingest import HANG, LoopbackIngest, down_url

CAPTURE = CaptureSettings(project_id="orders-api", build="1.2.3", commit="abc123")


def environment(number: int) -> CaptureEnvironment:
    return CaptureEnvironment(
        now_ms=1_700_000_000_000 + number, batch_number=number, runtime="python 3.11.0"
    )


def settings(endpoint: str, **overrides: Any) -> UploaderSettings:
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "api_key": "secret-key",
        "capture": CAPTURE,
        "flush_interval_ms": 100,
        "request_timeout_ms": 2000,
        "retry_limit": 2,
    }
    values.update(overrides)
    return UploaderSettings(**values)


@pytest.fixture
def ingest() -> Iterator[LoopbackIngest]:
    server = LoopbackIngest()
    yield server
    server.stop()


def expected_stats(**counts: Any) -> dict[str, Any]:
    stats: dict[str, Any] = {
        "captured_operations": 0,
        "dropped_operations": 0,
        "sent_batches": 0,
        "failed_batches": 0,
        "capture_dropped_effects": 0,
        "capture_replaced_values": 0,
        "artifacts_sent": 0,
        "artifacts_refused": 0,
        "artifacts_failed": 0,
        "capture_over_budget": 0,
        "capture_over_event_cap": 0,
        "ineligible": {},
        "queued": 0,
    }
    stats.update(counts)
    return stats


def test_a_failing_operation_is_posted_as_one_canonical_batch(ingest: LoopbackIngest) -> None:
    uploader = Uploader(settings(ingest.url), environment)
    trace = failing_trace()
    assert uploader.record(trace) is True
    # No flush call: the armed timer drains the queue.
    [received] = ingest.wait_for(1)
    expected = build_capture_batch(queued(trace), config=CAPTURE, environment=environment(1))
    assert received.path == "/v1/capture-batches"
    assert received.body == canonical_json_bytes(expected)
    assert received.headers["authorization"] == "Bearer secret-key"
    assert received.headers["content-type"] == "application/json"
    assert uploader.flush(10) is True
    assert uploader.stats() == expected_stats(captured_operations=1, sent_batches=1)
    uploader.close()


def test_submit_takes_the_trace_the_processor_hands_over(ingest: LoopbackIngest) -> None:
    uploader = Uploader(settings(ingest.url), environment)
    uploader.submit(failing_trace())
    assert uploader.flush(10) is True
    assert len(ingest.requests) == 1
    uploader.close()


@pytest.mark.parametrize(
    ("answers", "requests", "outcome"),
    [
        ([500, 500, 500], 3, "failed"),  # every attempt of retry_limit 2
        ([503, 202], 2, "sent"),
        ([429], 1, "failed"),  # a 4xx, never retried
        ([400], 1, "failed"),
        ([401], 1, "failed"),
    ],
)
def test_retries_follow_the_answer(answers: list[int], requests: int, outcome: str) -> None:
    ingest = LoopbackIngest(answers=list(answers))
    try:
        uploader = Uploader(settings(ingest.url), environment)
        uploader.record(failing_trace())
        assert uploader.flush(20) is True
        assert len(ingest.requests) == requests
        bodies = {received.body for received in ingest.requests}
        assert len(bodies) == 1  # a retry resends the same bytes
        if outcome == "sent":
            assert uploader.stats() == expected_stats(captured_operations=1, sent_batches=1)
        else:
            assert uploader.stats() == expected_stats(
                captured_operations=1, failed_batches=1, dropped_operations=1
            )
        uploader.close()
    finally:
        ingest.stop()


def test_retry_limit_is_clamped_to_five_with_the_documented_backoff() -> None:
    assert UploaderSettings("http://x", "k", CAPTURE, retry_limit=9).retry_limit == 5
    assert UploaderSettings("http://x", "k", CAPTURE, retry_limit=-3).retry_limit == 0
    assert UploaderSettings("http://x", "k", CAPTURE, flush_interval_ms=5).flush_interval_ms == 100
    assert [backoff_ms(attempt) for attempt in range(5)] == [200, 400, 600, 800, 1000]


def test_an_ingest_that_is_down_costs_the_batch_not_the_caller() -> None:
    uploader = Uploader(settings(down_url(), retry_limit=1), environment)
    assert uploader.record(failing_trace()) is True
    assert uploader.flush(20) is True
    assert uploader.stats() == expected_stats(
        captured_operations=1, failed_batches=1, dropped_operations=1
    )
    uploader.close()


def test_a_hanging_ingest_is_cut_by_the_request_timeout() -> None:
    ingest = LoopbackIngest(default=HANG)
    try:
        uploader = Uploader(
            settings(ingest.url, request_timeout_ms=300, retry_limit=1), environment
        )
        uploader.record(failing_trace())
        assert uploader.flush(20) is True
        assert len(ingest.requests) == 2
        assert uploader.stats() == expected_stats(
            captured_operations=1, failed_batches=1, dropped_operations=1
        )
        uploader.close()
    finally:
        ingest.stop()


def test_a_full_queue_drops_the_oldest(ingest: LoopbackIngest) -> None:
    # A long flush interval keeps everything queued until the explicit flush.
    uploader = Uploader(settings(ingest.url, flush_interval_ms=600_000), environment)
    for index in range(66):
        assert uploader.record(failing_trace(f"POST /orders/{index}")) is True
    assert uploader.stats() == expected_stats(
        captured_operations=66, dropped_operations=2, queued=64
    )
    assert ingest.requests == []
    assert uploader.flush(60) is True
    names = [
        json.loads(received.body)["events"][0]["event"]["name"] for received in ingest.requests
    ]
    assert names == [f"POST /orders/{index}" for index in range(2, 66)]
    assert uploader.stats() == expected_stats(
        captured_operations=66, dropped_operations=2, sent_batches=64
    )
    uploader.close()


def test_ineligible_operations_are_counted_by_reason(ingest: LoopbackIngest) -> None:
    uploader = Uploader(settings(ingest.url), environment)
    context = TraceContext(trace_id="cap-9-1", capture_envelope=True, replay_seed=SEED)
    unfinished = BackendTrace.begin(context, "GET /a")
    healthy = failing_trace(status=200)
    no_exchange = BackendTrace.begin(context, "GET /b")
    no_exchange.finish(None, 500, False, True)
    incomplete = failing_trace(effects_complete=False)
    for trace in (unfinished, healthy, no_exchange, incomplete, incomplete):
        assert uploader.record(trace) is False
    assert uploader.stats() == expected_stats(
        ineligible={
            "unfinished": 1,
            "not-a-failure": 1,
            "no-exchanges": 1,
            "effects-incomplete": 2,
        }
    )
    assert uploader.flush(1) is True
    assert ingest.requests == []
    uploader.close()


def test_the_payload_bound_drops_effects_and_counts_them(ingest: LoopbackIngest) -> None:
    uploader = Uploader(settings(ingest.url), environment)
    trace = failing_trace(calls=12, body="x" * 6000)
    uploader.record(trace)
    assert uploader.flush(10) is True
    [received] = ingest.requests
    batch = json.loads(received.body)
    dependencies = [e for e in batch["events"] if e["event"]["kind"] == "dependency"]
    dropped = uploader.stats()["capture_dropped_effects"]
    assert dropped > 0
    assert len(dependencies) == 12 - dropped
    network = [c for c in batch["capabilities"] if c["capability"] == "network"]
    assert network == [
        {
            "capability": "network",
            "completeness": "partial",
            "detail": f"{dropped} effect event(s) dropped to fit the 49152-byte capture "
            "payload bound",
        }
    ]
    uploader.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_uploads_on_its_own_thread(ingest: LoopbackIngest) -> None:
    uploader = Uploader(settings(ingest.url, flush_interval_ms=600_000), environment)
    uploader.record(failing_trace("POST /parent"))  # queued in the parent only
    pid = os.fork()
    if pid == 0:  # the child: its own queue, counters and thread
        code = 1
        try:
            fresh = uploader.stats() == expected_stats()
            uploader.record(failing_trace("POST /child"))
            sent = uploader.flush(20) and uploader.stats()["sent_batches"] == 1
            code = 0 if fresh and sent else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert uploader.flush(20) is True
    names = sorted(
        json.loads(received.body)["events"][0]["event"]["name"] for received in ingest.requests
    )
    assert names == ["POST /child", "POST /parent"]
    uploader.close()


def test_uploads_run_with_instrumentation_suppressed(
    ingest: LoopbackIngest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What every OpenTelemetry instrumentation (and our recorders) checks before recording.
    import http.client

    from opentelemetry.instrumentation.utils import is_instrumentation_enabled

    seen: list[bool] = []
    original = http.client.HTTPConnection.request

    def spy(self: http.client.HTTPConnection, *args: Any, **kwargs: Any) -> None:
        seen.append(is_instrumentation_enabled())
        original(self, *args, **kwargs)

    monkeypatch.setattr(http.client.HTTPConnection, "request", spy)
    uploader = Uploader(settings(ingest.url), environment)
    uploader.record(failing_trace())
    assert uploader.flush(10) is True
    assert seen == [False]
    uploader.close()
