"""The ingest refuses numbers that are not numbers, and parses batches off its event loop.

Every number a client sends (a query parameter, the session cookie, a batch's return status,
an OTLP span's ``http.status_code``) is read as ASCII digits within a range: anything else is
a ``400`` with the rule, field and message, never a ``500`` (``str.isdigit`` takes ``²``;
``int`` refuses 5,000 digits). And a batch of megabytes is decompressed, parsed, checked and
canonicalised on a worker thread: a health probe sent while it is being parsed is answered
during the parse.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from reproit_otel.ingest.app import IngestApp, create_app
from reproit_otel.ingest.store import open_store
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_result
from reproit_otel.wire.canonical import canonical_json
from tests.integration.capture_helpers import built_batch, failing_trace, queued
from tests.integration.pipeline_support import ServedASGI
from tests.integration.served_ingest import ServedIngest

KEY = "team-key"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    folder = tmp_path_factory.mktemp("numbers")
    server = ServedIngest(f"sqlite:///{folder / 'ingest.db'}", "--api-key", KEY)
    yield server
    assert server.stop() == 0


@pytest.mark.parametrize(
    ("query", "field", "high"),
    [
        ("status=%C2%B2", "status", 65535),
        ("status=70000", "status", 65535),
        ("offset=99999999999999999999", "offset", 2**31 - 1),
        ("limit=%D9%A3", "limit", 10**9),
        ("offset=-1", "offset", 2**31 - 1),
    ],
)
def test_query_numbers_are_ascii_digits_in_range(
    served: ServedIngest, query: str, field: str, high: int
) -> None:
    response = httpx.get(f"{served.base_url}/v1/occurrences?{query}", headers=AUTH)
    assert (response.status_code, response.json()) == (
        400,
        {
            "error": {
                "rule": "query",
                "field": field,
                "message": f"{field} must be ASCII digits from 0 to {high}",
            }
        },
    )


def test_a_cookie_of_5000_digits_or_a_superscript_is_no_session(served: ServedIngest) -> None:
    plain = httpx.get(f"{served.base_url}/", follow_redirects=False)
    for issued in ("9" * 5000, "\u00b2"):
        cookie = f"reproit_session={issued}.{'0' * 64}".encode()  # raw UTF-8 bytes
        response = httpx.get(
            f"{served.base_url}/",
            headers={"cookie": cookie},
            follow_redirects=False,
        )
        assert (response.status_code, response.headers.get("location")) == (
            plain.status_code,
            plain.headers.get("location"),
        )
        assert response.status_code < 500
    for query, message in (
        ("status=%C2%B2", "status must be ASCII digits from 0 to 65535."),
        ("status=99999999999999999999", "status must be ASCII digits from 0 to 65535."),
        ("page=99999999999999999999", "page must be ASCII digits from 1 to 1000000000."),
        ("page=" + "9" * 5000, "page must be ASCII digits from 1 to 1000000000."),
    ):
        listed = httpx.get(f"{served.base_url}/?{query}", headers=AUTH)
        assert (listed.status_code, message in listed.text) == (400, True), query
    batch = canonical_json(built_batch("POST /paged")).encode()
    sent = httpx.post(
        f"{served.base_url}/v1/capture-batches",
        content=batch,
        headers={**AUTH, "content-type": "application/json"},
    )
    occurrence = sent.json()["occurrenceId"]
    for page in ("%C2%B2", "9" * 5000):
        shown = httpx.get(f"{served.base_url}/occurrences/{occurrence}?page={page}", headers=AUTH)
        assert (shown.status_code, "page must be ASCII digits" in shown.text) == (400, True)


def test_a_return_status_past_any_http_status_is_refused(served: ServedIngest) -> None:
    batch = built_batch("POST /huge-status", status=2**63)
    response = httpx.post(
        f"{served.base_url}/v1/capture-batches",
        content=canonical_json(batch).encode(),
        headers={**AUTH, "content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "rule": "status",
        "field": "events",
        # Canonical JSON writes 2**63 as JavaScript does.
        "message": "the operation-return status 9223372036854776000 is no HTTP status: send an "
        "integer from 0 to 65535",
    }


def _otlp(status: AnyValue) -> bytes:
    span = Span(
        trace_id=bytes(range(16)),
        span_id=bytes(range(8)),
        name="GET /x",
        kind=Span.SPAN_KIND_SERVER,
        attributes=[KeyValue(key="http.status_code", value=status)],
    )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    )
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("value", "shown"),
    [(AnyValue(string_value="\u00b2"), "'\u00b2'"), (AnyValue(int_value=2**62), str(2**62))],
)
def test_an_otlp_status_that_is_no_status_is_refused(
    served: ServedIngest, value: AnyValue, shown: str
) -> None:
    response = httpx.post(
        f"{served.base_url}/v1/traces",
        content=_otlp(value),
        headers={**AUTH, "content-type": "application/x-protobuf"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "rule": "otlp",
        "field": "body",
        "message": f"the span attribute http.status_code is {shown}: an HTTP status is an "
        "integer from 0 to 65535 (or its ASCII digits)",
    }


def _large_batch() -> bytes:
    """A valid batch of about 4 MB: 240 exchanges of 16 KB, no payload bound applied."""
    trace = failing_trace("POST /large", calls=240, body="z" * 16000)
    build = build_capture_result(
        queued(trace),
        config=CaptureSettings(project_id="orders-api", build="1.2.3", commit="abc123"),
        environment=CaptureEnvironment(
            now_ms=1_700_000_000_500, batch_number=1, runtime="python 3.11.0", os="linux"
        ),
        payload_limit=1 << 30,
    )
    return canonical_json(build.batch).encode()


def test_a_health_probe_is_answered_while_a_large_batch_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = _large_batch()
    assert len(body) > 3_500_000
    parsing = threading.Event()
    probed = threading.Event()
    outcome: dict[str, Any] = {}
    original = IngestApp._checked_batch

    def observed(self: IngestApp, raw: bytes, encoding: str | None) -> Any:
        parsing.set()
        # Parsing waits for the probe's answer: on the event loop, the probe could never be
        # answered and the wait would run out; on a worker thread it is answered at once.
        outcome["probe answered during the parse"] = probed.wait(30)
        return original(self, raw, encoding)

    monkeypatch.setattr(IngestApp, "_checked_batch", observed)
    store = open_store(f"sqlite:///{tmp_path / 'ingest.db'}")
    server = ServedASGI(create_app(store, api_keys=[KEY], max_body_bytes=8 * 1024 * 1024))
    try:

        def upload() -> None:
            outcome["upload"] = httpx.post(
                f"{server.base}/v1/capture-batches",
                content=body,
                headers={**AUTH, "content-type": "application/json"},
                timeout=60,
            ).status_code

        uploader = threading.Thread(target=upload)
        uploader.start()
        assert parsing.wait(30)
        health = httpx.get(f"{server.base}/healthz", timeout=60)
        probed.set()
        uploader.join(60)
    finally:
        server.stop()
        store.close()
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert outcome == {"probe answered during the parse": True, "upload": 202}
