"""Record-then-replay round trips of requests calls, with the upstream stopped for the replay.

The same application code runs twice: once against a real loopback upstream with the recorder
and the real capture pipeline, once with the upstream stopped, every socket connection made
to fail, and :class:`RequestsReplayInstrumentor` serving the capsule built from the recorded
events. What the application saw (status, reason, headers that matter, body bytes, chunk
sequences, ``json()``, exceptions) must be the same both times. JSON bodies are compared
as values: the capture records the parsed value and replay serves it re-serialized.
"""

from __future__ import annotations

import io
import json
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import requests
import requests.adapters
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from reproit_otel.instrumentation.requests import RequestsReplayInstrumentor
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.replay import ReplaySession
from reproit_otel.wire.standins import text_standins
from tests.integration.requests_helpers import capsule_of, capturing, effects, sent_headers
from tests.integration.upstream import SLOW_CHUNKS, SSE_EVENTS, Upstream, closed_port

Observation = dict[str, Any]


def observe(make: Callable[[], requests.Response], *, chunks: bool = False) -> Observation:
    """What the application sees of one call (the exception, if it raised)."""
    seen: Observation = {}
    try:
        response = make()
        seen.update(
            status=response.status_code,
            reason=response.reason,
            content_type=response.headers.get("content-type"),
            x_upstream=response.headers.get("x-upstream"),
            encoding=response.encoding,
            url=response.url,
            request_url=response.request.url,
            has_elapsed=isinstance(response.elapsed, timedelta),
        )
        if chunks:
            seen["chunks"] = []
            for chunk in response.iter_content(None):
                seen["chunks"].append(chunk)
        elif "application/json" in (response.headers.get("content-type") or ""):
            # A recorded JSON body is a value: it is served re-serialized (PROTOCOL 7.4).
            seen["json"] = response.json()
        else:
            seen["body"] = response.content
    except requests.RequestException as error:
        seen["raised"] = type(error)
        seen["message"] = str(error)
    return seen


def application(base: str, refused: str) -> list[Observation]:
    """The application under test: one of every kind of call."""

    def lines() -> requests.Response:
        response = requests.get(base + "/slow", stream=True)
        response.lines = list(response.iter_lines())  # type: ignore[attr-defined]
        return response

    observations = [
        observe(lambda: requests.get(base + "/json")),
        {"json": requests.get(base + "/json").json()},
        observe(lambda: requests.get(base + "/text")),
        observe(lambda: requests.get(base + "/sse", stream=True), chunks=True),
        {"lines": lines().lines},  # type: ignore[attr-defined]
        observe(lambda: requests.get(base + "/slow", stream=True), chunks=True),
        observe(lambda: requests.get(base + "/fail")),
        observe(lambda: requests.get(refused)),
        observe(lambda: requests.get(base + "/sleep", timeout=0.2)),
        observe(lambda: requests.post(base + "/echo", json={"q": "weather?", "n": 1})),
        observe(lambda: requests.post(base + "/echo", data={"a": "1"})),
        observe(lambda: requests.post(base + "/echo", data=iter([b"gen", b"erated"]))),
        observe(lambda: requests.put(base + "/echo", data=io.BytesIO(b"file body"))),
        observe(lambda: requests.get(base + "/gzip")),
        observe(lambda: requests.get(base + "/cut")),
        observe(lambda: requests.get(base + "/cut", stream=True), chunks=True),
        observe(lambda: requests.get(base + "/query?page=2&token=abc")),
        {"raw": requests.get(base + "/text", stream=True).raw.read()},
    ]
    with requests.Session() as session:
        redirected = session.get(base + "/redirect")
        observations.append(
            {
                "session": redirected.json(),
                "history": [(r.status_code, r.headers.get("location")) for r in redirected.history],
                "url": redirected.url,
            }
        )
        head = session.head(base + "/json")
        observations.append(
            {"head": (head.status_code, head.content, head.headers["content-type"])}
        )
    return observations


CALLS = 21


@contextmanager
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any socket connection attempt fails the test."""

    def refuse(self: socket.socket, address: Any) -> None:
        raise AssertionError(f"replay opened a socket to {address!r}")

    with monkeypatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket.socket, "connect_ex", refuse)
        yield


@contextmanager
def replaying(capsule: dict[str, Any], secrets: tuple[str, ...] = ()) -> Iterator[ReplaySession]:
    session = ReplaySession(capsule)
    activate(session)
    instrumentor = RequestsReplayInstrumentor()
    instrumentor.instrument(secret_values=secrets)
    try:
        yield session
    finally:
        instrumentor.uninstrument()
        deactivate()


def record(app: Callable[[], Any]) -> tuple[Any, list[Any]]:
    with capturing() as capture:
        return capture.operation(app)


def test_round_trip_serves_what_the_application_saw(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    refused = f"http://127.0.0.1:{closed_port()}/rates"
    try:
        live, events = record(lambda: application(upstream.base, refused))
    finally:
        upstream.stop()
    assert len(effects(events)) == CALLS
    # The live run saw every kind of answer the replay has to reproduce.
    assert live[3]["chunks"] == list(SSE_EVENTS)
    assert live[4] == {"lines": [b"one", b"two", b"three"]}
    assert live[5]["chunks"] == list(SLOW_CHUNKS)
    assert live[7]["raised"] is requests.exceptions.ConnectionError
    assert live[8]["raised"] is requests.exceptions.ReadTimeout
    assert live[11]["body"] == b"generated"
    assert live[12]["body"] == b"file body"
    assert live[14]["raised"] is requests.exceptions.ChunkedEncodingError
    assert live[15]["raised"] is requests.exceptions.ChunkedEncodingError
    assert live[-2]["history"] == [(302, "/json")]
    assert live[-1] == {"head": (200, b"", "application/json")}
    capfd.readouterr()

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = application(upstream.base, refused)

    assert replayed == live
    assert (session.consumed, session.total, session.diverged) == (CALLS, CALLS, False)
    assert capfd.readouterr().err == ""


def test_binary_bodies_replay_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream()
    try:
        live, events = record(lambda: requests.get(upstream.base + "/binary").content)
    finally:
        upstream.stop()
    with replaying(capsule_of(events)), no_sockets(monkeypatch):
        replayed = requests.get(upstream.base + "/binary").content
    # PROTOCOL 4.2's body is lossy text; the exact bytes ride along in bodyBase64.
    assert live == b"\xff\x00binary\x80"
    assert replayed == live


def test_replayed_response_is_a_real_response(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream()
    try:
        _, events = record(lambda: requests.get(upstream.base + "/sse").status_code)
    finally:
        upstream.stop()
    with replaying(capsule_of(events)), no_sockets(monkeypatch):
        response = requests.get(upstream.base + "/sse", stream=True)
        first = response.raw.read(4)
        rest = response.raw.read()
    assert isinstance(response, requests.Response)
    assert dict(response.headers) == {
        "content-type": "text/event-stream",
        "date": "Thu, 01 Jan 2026 00:00:00 GMT",
        "server": "upstream/1",
    }
    assert isinstance(response.headers, requests.structures.CaseInsensitiveDict)
    assert (first, rest) == (b"data", b"".join(SSE_EVENTS)[4:])
    assert response.raw.closed


def test_divergence_answers_599_and_writes_the_exact_line(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        _, events = record(
            lambda: requests.post(upstream.base + "/echo", json={"q": "weather?"}).json()
        )
    finally:
        upstream.stop()
    capfd.readouterr()
    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        other = requests.get(upstream.base + "/unknown?x=1")
        drifted = requests.post(upstream.base + "/echo", json={"q": "DIFFERENT"})
    expected_request = {
        "body": {"q": "weather?"},
        "headers": sent_headers(**{"content-length": "17", "content-type": "application/json"}),
        "method": "POST",
        "url": upstream.base + "/echo",
    }
    lines = [
        {
            "protocol": "http",
            "got": {"method": "GET", "url": upstream.base + "/unknown?x=1"},
            "expected": expected_request,
            "consumed": 0,
            "total": 1,
        },
        {
            "protocol": "http",
            "got": {"method": "POST", "url": upstream.base + "/echo", "body": {"q": "DIFFERENT"}},
            "expected": expected_request,
            "consumed": 0,
            "total": 1,
            "bodyDelta": {"kind": "byte", "offset": 6},
        },
    ]
    assert capfd.readouterr().err == "".join(
        "REPROIT:DIVERGENCE " + json.dumps(line, separators=(",", ":"), ensure_ascii=False) + "\n"
        for line in lines
    )
    for response in (other, drifted):
        assert (response.status_code, response.reason) == (599, "Reproit Diverged")
        assert dict(response.headers) == {"content-type": "application/json"}
        assert response.content == b'{"reproit":"diverged"}'
    assert session.diverged


def test_truncated_body_fails_closed(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        _, events = record(lambda: requests.get(upstream.base + "/big").status_code)
    finally:
        upstream.stop()
    capfd.readouterr()
    with replaying(capsule_of(events)), no_sockets(monkeypatch):
        response = requests.get(upstream.base + "/big")
    assert (response.status_code, response.content) == (
        599,
        b'{"reproit":"truncated-exchange-body"}',
    )
    got = {"method": "GET", "url": upstream.base + "/big", "truncated": True}
    line = {"protocol": "http", "got": got, "expected": None, "consumed": 1, "total": 1}
    assert capfd.readouterr().err == (
        "REPROIT:DIVERGENCE " + json.dumps(line, separators=(",", ":")) + "\n"
    )


def test_live_calls_are_redacted_before_matching(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream()
    url = upstream.base + "/query?token=abc&page=2"
    try:
        live, events = record(lambda: requests.get(url).json())
    finally:
        upstream.stop()
    # A different secret value still matches: the capture kept only its placeholder.
    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = requests.get(upstream.base + "/query?token=other&page=2").json()
    assert replayed == live == {"query": "token=abc&page=2"}
    assert not session.diverged


def test_configured_secret_values_are_scrubbed_from_live_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "sk_live_0123456789"
    upstream = Upstream()
    try:
        with capturing({"REPROIT_SECRET_VALUES": secret}) as capture:
            live, events = capture.operation(
                lambda: requests.post(upstream.base + "/echo", json={"key": secret}).json()
            )
    finally:
        upstream.stop()
    [effect] = effects(events)
    assert effect["exchange"]["request"]["body"] == {"key": "$reproit"}
    assert effect["exchange"]["response"]["body"] == '{"key": "$reproit"}'
    with replaying(capsule_of(events), (secret,)) as session, no_sockets(monkeypatch):
        replayed = requests.post(upstream.base + "/echo", json={"key": secret}).json()
    assert live == {"key": secret}
    # The secret itself was never recorded: the placeholder's stand-in is served.
    assert replayed == {"key": text_standins("$reproit")}
    assert secret not in replayed["key"]
    assert not session.diverged


def test_spans_are_still_produced_during_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    upstream = Upstream()
    try:
        _, events = record(lambda: requests.get(upstream.base + "/fail").status_code)
    finally:
        upstream.stop()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel = RequestsInstrumentor()
    otel.instrument(tracer_provider=provider)
    try:
        with replaying(capsule_of(events)), no_sockets(monkeypatch):
            status = requests.get(upstream.base + "/fail").status_code
    finally:
        otel.uninstrument()
    [span] = exporter.get_finished_spans()
    assert status == 500
    assert span.kind is SpanKind.CLIENT
    attributes = dict(span.attributes or {})
    assert attributes.get("http.status_code", attributes.get("http.response.status_code")) == 500


def test_no_active_session_refuses_instead_of_calling_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    instrumentor = RequestsReplayInstrumentor()
    instrumentor.instrument(secret_values=())
    try:
        with no_sockets(monkeypatch), pytest.raises(requests.exceptions.ConnectionError) as raised:
            requests.get("http://127.0.0.1:9/x")
    finally:
        instrumentor.uninstrument()
    assert "no replay session is active" in str(raised.value)


def test_uninstrument_restores_exactly() -> None:
    original = requests.adapters.HTTPAdapter.__dict__["send"]
    instrumentor = RequestsReplayInstrumentor()
    assert tuple(instrumentor.instrumentation_dependencies()) == ("requests >= 2.0",)
    instrumentor.instrument(secret_values=())
    assert requests.adapters.HTTPAdapter.__dict__["send"] is not original
    instrumentor.uninstrument()
    assert requests.adapters.HTTPAdapter.__dict__["send"] is original


def test_replay_looks_up_no_transport_setting_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replay connects nowhere: proxies and CA bundles from the environment change nothing,
    and are not even looked up; uninstrumenting gives requests its own method back."""
    upstream = Upstream()
    try:
        live, events = record(lambda: requests.get(upstream.base + "/json").json())
    finally:
        upstream.stop()
    own = requests.Session.merge_environment_settings
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/ca.pem")
    looked_up: list[str] = []
    monkeypatch.setattr(
        requests.sessions, "get_environ_proxies", lambda *a, **k: looked_up.append("proxies")
    )
    with replaying(capsule_of(events)), no_sockets(monkeypatch), requests.Session() as session:
        assert requests.Session.merge_environment_settings is not own
        session.stream = True
        streamed = session.get(upstream.base + "/json")
        assert streamed.raw is not None and not streamed._content_consumed  # stream=True kept
        replayed = streamed.json()
    assert requests.Session.merge_environment_settings is own
    assert (replayed, looked_up) == (live, [])


def test_calls_before_the_request_never_consume_it(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        _, events = record(lambda: requests.get(f"{upstream.base}/json", timeout=5).json())
    finally:
        upstream.stop()
    with no_sockets(monkeypatch), replaying(capsule_of(events)) as session:
        session.usage.await_request()
        # Boot: a warm-up of the recorded call reads its answer; an unrecorded one gets 503.
        warm = requests.get(f"{upstream.base}/json", timeout=5)
        other = requests.get(f"{upstream.base}/health", timeout=5)
        session.begin_request()
        served = requests.get(f"{upstream.base}/json", timeout=5)
    assert (warm.status_code, warm.json()) == (200, {"rate": 1.5, "currency": "EUR"})
    assert (other.status_code, other.json()) == (503, {"reproit": "before-request"})
    assert (served.status_code, served.json()) == (200, {"rate": 1.5, "currency": "EUR"})
    assert not session.diverged and "REPROIT:DIVERGENCE" not in capfd.readouterr().err
    report = session.usage.report()
    assert report == {
        "dataExchanges": 1,
        "consumed": 1,
        "unused": 0,
        "ambientExchanges": 0,
        "ambient": 0,
        "beforeRequest": 2,
        "beforeRequestCalls": [
            {"protocol": "http", "method": "GET", "url": f"{upstream.base}/json"},
            {"protocol": "http", "method": "GET", "url": f"{upstream.base}/health"},
        ],
        "consumedOrder": [0],
        "unusedCalls": [],
    }


def ordering(base: str, *, same_id_throughout: bool = True) -> list[tuple[int, int]]:
    """An application that names a new order by a fresh ``uuid4()`` in its URLs and body."""
    order = str(uuid.uuid4())
    later = order if same_id_throughout else str(uuid.uuid4())
    calls = [
        requests.put(f"{base}/orders/{order}", json={"order": order, "sku": "A"}, timeout=5),
        requests.get(f"{base}/query?order={later}&page=1", timeout=5),
        requests.get(f"{base}/orders/{later}", timeout=5),
    ]
    # The bodies echo the id, so only their sizes can be the same in both runs.
    return [(response.status_code, len(response.content)) for response in calls]


def test_fresh_uuids_in_urls_replay_faithfully_and_a_real_change_diverges(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        live, events = record(lambda: ordering(upstream.base))
    finally:
        upstream.stop()
    assert [status for status, _ in live] == [200, 200, 404]
    recorded_urls = [effect["exchange"]["request"]["url"] for effect in effects(events)]
    capfd.readouterr()

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = ordering(upstream.base)
    assert replayed == live
    assert (session.consumed, session.total, session.diverged) == (3, 3, False)
    assert capfd.readouterr().err == ""

    # The query names another new id than the one just created: a real change.
    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        changed = ordering(upstream.base, same_id_throughout=False)
    assert [status for status, _ in changed] == [200, 599, 599]
    lines = [
        json.loads(line.removeprefix("REPROIT:DIVERGENCE "))
        for line in capfd.readouterr().err.splitlines()
    ]
    assert [line["expected"]["url"] for line in lines] == recorded_urls[1:]
    assert [line["consumed"] for line in lines] == [1, 1]
    assert session.diverged
