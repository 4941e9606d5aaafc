"""A defect in any reproit hook never changes what the application does.

Each case replaces one internal function of reproit-otel (span processor, requests and
psycopg2 recorders, WSGI middleware, uploader) with one that raises, runs the reliability
service through every kind of call with the guards in production mode
(``REPROIT_STRICT_INTERNAL=0``), and checks that

* every response (status, headers, body) is exactly the one the service gives without
  reproit-otel at all,
* every exception the application saw (class and message) is the same, and
* the guard that was expected to catch the fault counted it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reproit_otel import _guard
from reproit_otel.capture import uploader
from reproit_otel.capture.operation import Operation
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.capture.uploader import Uploader
from reproit_otel.instrumentation import _pg_record, _pg_statement, _requests_record, wsgi
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.upstream import Upstream
from tests.reliability.harness import exercise, served

pytestmark = pytest.mark.postgres

# (owner, attribute, the guard expected to count the fault, or None when no guard is involved)
HOOKS: list[tuple[Any, str, str | None]] = [
    (ReproitSpanProcessor, "_on_start", "processor.on_start"),
    (ReproitSpanProcessor, "_on_end", "processor.on_end"),
    (ReproitSpanProcessor, "start_exchange", "recording.start_exchange[requests]"),
    (Operation, "exchange_deferred", "recording.finish[psycopg2]"),
    (_requests_record.RecordedCall, "begin", "requests.record_request"),
    (_requests_record.RecordedCall, "responded", "requests.record_response"),
    (_requests_record.RecordedCall, "failed", "requests.record_error"),
    (_requests_record, "recorded_url", "requests.build_exchange"),
    (_pg_record, "recording_connection_class", "psycopg2.connect"),
    (_pg_record, "_finish", "psycopg2.record"),
    (_pg_statement, "_encode_rows", "psycopg2.record"),
    (_pg_statement, "_request", "psycopg2.request"),
    (wsgi._WSGIRequest, "__init__", "wsgi.inbound"),
    (Operation, "finish", "wsgi.finish"),
    (Uploader, "_record", "uploader.record"),
    (uploader, "build_capture_result", None),
    (Uploader, "_post", None),
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def expected(upstream: Upstream, postgres_dsn: str) -> tuple[list[Any], list[tuple[str, str]]]:
    """What the service answers, and which exceptions it sees, without reproit-otel."""
    with served(upstream.base, postgres_dsn) as service:
        answers = exercise(service.base)
        return answers, list(service.seen)


@pytest.mark.parametrize(
    "hook", HOOKS, ids=[f"{getattr(h[0], '__name__', h[0])}.{h[1]}" for h in HOOKS]
)
def test_an_injected_fault_changes_no_response_and_no_exception(
    hook: tuple[Any, str, str | None],
    upstream: Upstream,
    postgres_dsn: str,
    expected: tuple[list[Any], list[tuple[str, str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    owner, attribute, where = hook
    monkeypatch.setenv(_guard.STRICT_ENV, "0")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"injected fault in {attribute}")

    ingest = LoopbackIngest()
    environ = {
        "REPROIT_ENDPOINT": ingest.url,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
        "REPROIT_RETRY_LIMIT": "0",
    }
    before = _guard.internal_errors()
    try:
        monkeypatch.setattr(owner, attribute, broken)
        with served(upstream.base, postgres_dsn, environ) as service:
            answers = exercise(service.base)
            [sink] = [s for s in service.sinks() if isinstance(s, Uploader)]
            sink.flush(10)
            seen = list(service.seen)
    finally:
        ingest.stop()
    assert (answers, seen) == expected
    if where is not None:
        assert _guard.internal_errors().get(where, 0) > before.get(where, 0), where


def test_without_faults_the_same_run_captures_and_uploads(
    upstream: Upstream,
    postgres_dsn: str,
    expected: tuple[list[Any], list[tuple[str, str]]],
) -> None:
    """The control case: the harness really records (so the faults above hit live code)."""
    ingest = LoopbackIngest()
    environ = {
        "REPROIT_ENDPOINT": ingest.url,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
    }
    before = _guard.internal_errors()
    try:
        with served(upstream.base, postgres_dsn, environ) as service:
            answers = exercise(service.base)
            [sink] = [s for s in service.sinks() if isinstance(s, Uploader)]
            assert sink.flush(20) is True
            stats = sink.stats()
            seen = list(service.seen)
        received = ingest.wait_for(2)
    finally:
        ingest.stop()
    assert (answers, seen) == expected
    assert _guard.internal_errors() == before
    # /fail (502) and /refused (503) are captured; /raise (500) recorded no exchange.
    assert stats == {
        "captured_operations": 2,
        "dropped_operations": 0,
        "sent_batches": 2,
        "failed_batches": 0,
        "capture_dropped_effects": 0,
        "capture_replaced_values": 0,
        "artifacts_sent": 0,
        "artifacts_refused": 0,
        "artifacts_failed": 0,
        "capture_over_budget": 0,
        "capture_over_event_cap": 0,
        "ineligible": {"not-a-failure": 4, "no-exchanges": 1},
        "queued": 0,
    }
    assert len(received) == 2


def test_a_delivery_defect_drops_one_batch_and_the_uploader_keeps_sending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reproit_otel.capture.uploader import UploaderSettings
    from reproit_otel.wire.batch import CaptureSettings
    from tests.integration.capture_helpers import failing_trace

    monkeypatch.setenv(_guard.STRICT_ENV, "0")
    original = Uploader._post
    calls: list[int] = []

    def first_attempt_breaks(self: Uploader, body: bytes) -> int | None:
        calls.append(len(body))
        if len(calls) == 1:
            raise RuntimeError("injected fault while sending")
        return original(self, body)

    monkeypatch.setattr(Uploader, "_post", first_attempt_breaks)
    ingest = LoopbackIngest()
    sink = Uploader(
        UploaderSettings(
            endpoint=ingest.url, api_key="k", capture=CaptureSettings("shop"), retry_limit=0
        )
    )
    try:
        sink.record(failing_trace(trace_id="cap-1-1"))
        sink.record(failing_trace(trace_id="cap-1-2"))
        flushed = sink.flush(5)
        stats = sink.stats()
    finally:
        sink.close(0.1)
        ingest.stop()
    assert (flushed, stats["sent_batches"], stats["dropped_operations"]) == (True, 1, 1)
