"""httpx recorded and replayed, sync and async, against a real loopback upstream.

The same application code runs twice: once against the upstream with the httpx recorder and
the real capture pipeline, once with the upstream stopped, every socket connection made to
fail, and :class:`HttpxReplayInstrumentor` serving the capsule built from the recorded events.
What the application saw (status, reason, headers, body bytes, chunks, exceptions) must be
the same both times.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.trace import SpanKind

from reproit_otel.instrumentation import httpx as recorder
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.replay import ReplaySession
from tests.integration.requests_helpers import Capture, capsule_of, capturing, effects
from tests.integration.upstream import SLOW_CHUNKS, SSE_EVENTS, Upstream, closed_port

Observation = dict[str, Any]

_ORIGINALS = (
    httpx.HTTPTransport.__dict__["handle_request"],
    httpx.AsyncHTTPTransport.__dict__["handle_async_request"],
)


def _seams() -> tuple[Any, Any]:
    return (
        httpx.HTTPTransport.__dict__["handle_request"],
        httpx.AsyncHTTPTransport.__dict__["handle_async_request"],
    )


@contextmanager
def recording() -> Iterator[Capture]:
    with capturing() as capture:
        recorder.install_recorder()
        try:
            yield capture
        finally:
            recorder.uninstall_recorder()


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
def replaying(capsule: dict[str, Any]) -> Iterator[ReplaySession]:
    session = ReplaySession(capsule)
    activate(session)
    instrumentor = recorder.HttpxReplayInstrumentor()
    instrumentor.instrument(secret_values=())
    try:
        yield session
    finally:
        instrumentor.uninstrument()
        deactivate()


# A multipart body is a stream of both kinds; a fixed boundary makes it the same every run.
MULTIPART = {"upload": ("note.txt", b"multipart body", "text/plain")}
BOUNDARY = {"content-type": "multipart/form-data; boundary=reproit-test"}


def seen(response: httpx.Response, body: Any) -> Observation:
    return {
        "status": response.status_code,
        "reason": response.reason_phrase,
        "content_type": response.headers.get("content-type"),
        "x_upstream": response.headers.get("x-upstream"),
        "url": str(response.url),
        "body": body,
    }


def raised(error: httpx.HTTPError) -> Observation:
    return {"raised": type(error), "message": str(error)}


def sync_application(base: str, refused: str) -> list[Observation]:
    """Every kind of call, through one ``httpx.Client``."""
    out: list[Observation] = []
    with httpx.Client() as client:
        response = client.get(base + "/json")
        out.append(seen(response, response.json()))
        response = client.get(base + "/binary")
        out.append(seen(response, response.content))
        with client.stream("GET", base + "/slow") as response:
            out.append(seen(response, list(response.iter_raw())))
        with client.stream("GET", base + "/sse") as response:
            out.append(seen(response, list(response.iter_lines())))
        with client.stream("GET", base + "/slow") as response:  # left after one piece
            out.append(seen(response, next(response.iter_raw())))
        response = client.get(base + "/gzip")
        out.append(seen(response, response.json()))
        response = client.post(base + "/echo", json={"q": "weather?", "n": 1})
        out.append(seen(response, response.content))
        response = client.post(base + "/echo", content=iter([b"gen", b"erated"]))
        out.append(seen(response, response.content))
        response = client.get(base + "/fail")
        out.append(seen(response, response.text))
        response = client.post(base + "/echo", files=MULTIPART, headers=BOUNDARY)
        out.append(seen(response, response.content))
        for url, timeout in ((refused, 5.0), (base + "/sleep", 0.2), (base + "/cut", 5.0)):
            try:
                client.get(url, timeout=timeout).read()
            except httpx.HTTPError as error:
                out.append(raised(error))
    return out


SYNC_CALLS = 13


async def async_application(base: str) -> list[Observation]:
    """The async shapes: a gather of calls, one of them streamed, a partly read stream."""
    async with httpx.AsyncClient() as client:

        async def streamed() -> Observation:
            async with client.stream("GET", base + "/slow") as response:
                return seen(response, [piece async for piece in response.aiter_raw()])

        async def partly() -> Observation:
            async with client.stream("GET", base + "/sse") as response:
                pieces: AsyncIterator[bytes] = response.aiter_raw()
                return seen(response, await pieces.__anext__())

        async def whole(path: str) -> Observation:
            response = await client.get(base + path)
            return seen(response, response.content)

        gathered = await asyncio.gather(whole("/json"), streamed(), whole("/text"), partly())
        out = list(gathered)
        try:
            await client.get(base + "/sleep", timeout=0.2)
        except httpx.HTTPError as error:
            out.append(raised(error))
        response = await client.post(base + "/echo", content=b"async body")
        out.append(seen(response, await response.aread()))

        async def pieces() -> AsyncIterator[bytes]:
            for piece in (b"async ", b"generated"):
                yield piece

        response = await client.post(base + "/echo", content=pieces())
        out.append(seen(response, await response.aread()))
        response = await client.post(base + "/echo", files=MULTIPART, headers=BOUNDARY)
        out.append(seen(response, await response.aread()))
    return out


ASYNC_CALLS = 8


def record(app: Callable[[], Any]) -> tuple[Any, list[Any]]:
    with recording() as capture:
        return capture.operation(app)


def test_sync_round_trip_serves_what_the_application_saw(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    refused = f"http://127.0.0.1:{closed_port()}/rates"
    try:
        live, events = record(lambda: sync_application(upstream.base, refused))
    finally:
        upstream.stop()
    assert len(effects(events)) == SYNC_CALLS
    assert events[-1]["effectsComplete"] is True
    assert live[2]["body"] == list(SLOW_CHUNKS)
    assert live[4]["body"] == SLOW_CHUNKS[0]
    assert live[5]["body"] == {"zipped": True}
    assert live[7]["body"] == b"generated"
    assert b'filename="note.txt"' in live[9]["body"]
    assert [entry.get("raised") for entry in live[-3:]] == [
        httpx.ConnectError,
        httpx.ReadTimeout,
        httpx.RemoteProtocolError,
    ]
    capfd.readouterr()

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = sync_application(upstream.base, refused)

    assert replayed == live
    assert (session.consumed, session.total, session.diverged) == (SYNC_CALLS, SYNC_CALLS, False)
    assert capfd.readouterr().err == ""


def test_recorded_exchanges_have_the_requests_wire_shape() -> None:
    upstream = Upstream()
    try:
        with httpx.Client() as client:
            _, events = record(
                lambda: [
                    client.post(
                        upstream.base + "/echo?token=abc",
                        content=b'{"a":1}',  # the same bytes whichever httpx encodes json=
                        headers={"content-type": "application/json"},
                    ).json(),
                    client.get(upstream.base + "/slow").content,
                ]
            )
    finally:
        upstream.stop()
    base = upstream.base
    common = {
        "accept": "*/*",
        "accept-encoding": "gzip, deflate",
        "connection": "keep-alive",
        "host": base.removeprefix("http://"),
        "user-agent": f"python-httpx/{httpx.__version__}",
    }
    assert effects(events) == [
        {
            "effect": "call",
            "resource": base.removeprefix("http://"),
            "key": "POST /echo?token=$reproit",
            "exchange": {
                "protocol": "http",
                "request": {
                    "method": "POST",
                    "url": base + "/echo?token=$reproit",
                    "headers": {
                        **common,
                        "content-length": "7",
                        "content-type": "application/json",
                    },
                    "body": {"a": 1},
                },
                "response": {
                    "status": 200,
                    "headers": {
                        "content-length": "7",
                        "content-type": "application/json",
                        "date": "Thu, 01 Jan 2026 00:00:00 GMT",
                        "server": "upstream/1",
                    },
                    "body": {"a": 1},
                },
            },
        },
        {
            "effect": "call",
            "resource": base.removeprefix("http://"),
            "key": "GET /slow",
            "exchange": {
                "protocol": "http",
                "request": {"method": "GET", "url": base + "/slow", "headers": common},
                "response": {
                    "status": 200,
                    "headers": {
                        "content-type": "text/plain",
                        "date": "Thu, 01 Jan 2026 00:00:00 GMT",
                        "server": "upstream/1",
                        "transfer-encoding": "chunked",
                    },
                    "body": "one\ntwo\nthree\n",
                    "stream": {"chunks": [4, 4, 6]},
                },
            },
        },
    ]


def test_async_round_trip_with_gathered_and_streamed_calls(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        live, events = record(lambda: asyncio.run(async_application(upstream.base)))
    finally:
        upstream.stop()
    assert len(effects(events)) == ASYNC_CALLS
    assert events[-1]["effectsComplete"] is True
    assert live[1]["body"] == list(SLOW_CHUNKS)
    assert live[3]["body"] == SSE_EVENTS[0]
    assert live[4]["raised"] is httpx.ReadTimeout
    assert live[6]["body"] == b"async generated"
    assert b'filename="note.txt"' in live[7]["body"]
    [streamed] = [
        e
        for e in effects(events)
        if e["exchange"]["request"].get("body") == live[6]["body"].decode()
    ]
    assert streamed["key"] == "POST /echo"
    # The abandoned stream holds what was read of it, no more.
    sse = [e for e in effects(events) if e["key"] == "GET /sse"]
    assert sse[0]["exchange"]["response"]["body"] == SSE_EVENTS[0].decode()
    capfd.readouterr()

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = asyncio.run(async_application(upstream.base))

    assert replayed == live
    assert session.consumed == ASYNC_CALLS
    assert not session.diverged
    assert capfd.readouterr().err == ""


def test_concurrent_requests_on_one_loop_keep_their_own_exchanges() -> None:
    upstream = Upstream()
    try:
        with recording() as capture:

            async def request(index: int) -> None:
                name = f"GET /op{index}"
                attributes = {"http.method": "GET", "http.target": f"/op{index}"}
                with capture.tracer.start_as_current_span(
                    name, kind=SpanKind.SERVER, attributes={**attributes, "http.status_code": 500}
                ):
                    async with httpx.AsyncClient() as client:
                        await asyncio.gather(
                            *(
                                client.get(f"{upstream.base}/query?n={index}&call={call}")
                                for call in (1, 2, 3)
                            )
                        )

            async def main() -> None:
                await asyncio.gather(*(request(index) for index in range(12)))

            asyncio.run(main())
            traces = {trace.events[0]["operation"]: trace.events for trace in capture.sink.traces}
    finally:
        upstream.stop()
    assert sorted(traces) == sorted(f"GET /op{index}" for index in range(12))
    for index in range(12):
        events = traces[f"GET /op{index}"]
        assert sorted(effect["key"] for effect in effects(events)) == [
            f"GET /query?n={index}&call={call}" for call in (1, 2, 3)
        ]
        assert events[-1]["effectsComplete"] is True


@pytest.mark.parametrize("otel_first", [True, False])
def test_otel_client_spans_are_covered_whatever_the_install_order(otel_first: bool) -> None:
    upstream = Upstream()
    otel = HTTPXClientInstrumentor()
    try:
        with capturing() as capture:
            if otel_first:
                otel.instrument(tracer_provider=capture.provider)
                recorder.install_recorder()
            else:
                recorder.install_recorder()
                otel.instrument(tracer_provider=capture.provider)
            try:

                def app() -> Any:
                    with httpx.Client() as client:
                        first = client.get(upstream.base + "/json").json()

                    async def both() -> list[Any]:
                        async with httpx.AsyncClient() as client:
                            responses = await asyncio.gather(
                                client.get(upstream.base + "/text"),
                                client.get(upstream.base + "/query?x=1"),
                            )
                            return [r.text for r in responses]

                    return [first, asyncio.run(both())]

                result, events = capture.operation(app)
            finally:
                otel.uninstrument()
                assert recorder.recorder_installed()
                recorder.uninstall_recorder()
    finally:
        upstream.stop()
    assert result == [{"rate": 1.5, "currency": "EUR"}, ["grüße, world", '{"query": "x=1"}']]
    assert sorted(effect["key"] for effect in effects(events)) == [
        "GET /json",
        "GET /query?x=1",
        "GET /text",
    ]
    # The CLIENT spans saw the exchange's request: OpenTelemetry injected traceparent first.
    assert all("traceparent" in e["exchange"]["request"]["headers"] for e in effects(events))
    assert events[-1]["effectsComplete"] is True
    assert _seams() == _ORIGINALS


def test_an_unrecorded_httpx_client_span_makes_the_capture_incomplete() -> None:
    upstream = Upstream()
    otel = HTTPXClientInstrumentor()
    try:
        with capturing() as capture:
            otel.instrument(tracer_provider=capture.provider)
            try:
                _, events = capture.operation(
                    lambda: httpx.get(upstream.base + "/json").status_code
                )
            finally:
                otel.uninstrument()
    finally:
        upstream.stop()
    assert effects(events) == []
    assert events[-1]["effectsComplete"] is False


def test_uninstall_puts_the_transports_back() -> None:
    recorder.install_recorder()
    recorder.install_recorder()
    assert recorder.recorder_installed()
    recorder.uninstall_recorder()
    assert not recorder.recorder_installed()
    assert _seams() == _ORIGINALS
    replay = recorder.HttpxReplayInstrumentor()
    replay.instrument(secret_values=())
    replay.uninstrument()
    assert _seams() == _ORIGINALS
    # Taken out from inside OpenTelemetry's wrapper, which stays and wraps the original again.
    otel = HTTPXClientInstrumentor()
    otel.instrument()
    try:
        recorder.install_recorder()
        recorder.uninstall_recorder()
        assert not recorder.recorder_installed()
        assert [seam.__wrapped__ for seam in _seams()] == list(_ORIGINALS)
    finally:
        otel.uninstrument()
    assert _seams() == _ORIGINALS


def test_an_unrecorded_call_diverges_and_never_goes_out(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    upstream = Upstream()
    try:
        _, events = record(
            lambda: httpx.post(upstream.base + "/echo", json={"q": "weather?"}).json()
        )
    finally:
        upstream.stop()
    capfd.readouterr()
    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        other = httpx.get(upstream.base + "/unknown?x=1")

        async def drifted() -> httpx.Response:
            async with httpx.AsyncClient() as client:
                return await client.post(upstream.base + "/echo", json={"q": "DIFFERENT"})

        changed = asyncio.run(drifted())
    lines = [
        json.loads(line.removeprefix("REPROIT:DIVERGENCE "))
        for line in capfd.readouterr().err.splitlines()
    ]
    assert [(line["got"]["method"], line["got"]["url"]) for line in lines] == [
        ("GET", upstream.base + "/unknown?x=1"),
        ("POST", upstream.base + "/echo"),
    ]
    assert lines[1]["got"]["body"] == {"q": "DIFFERENT"}
    assert lines[1]["bodyDelta"] == {"kind": "byte", "offset": 6}
    for response in (other, changed):
        assert (response.status_code, response.reason_phrase) == (599, "Reproit Diverged")
        assert dict(response.headers) == {"content-type": "application/json"}
        assert response.content == b'{"reproit":"diverged"}'
    assert session.diverged


def test_a_stream_dropped_without_a_close_holds_what_was_read() -> None:
    upstream = Upstream()

    def app() -> bytes:
        client = httpx.Client()
        response = client.send(client.build_request("GET", upstream.base + "/slow"), stream=True)
        first = next(response.iter_raw())
        # Never closed: httpx's response and its bound stream refer to each other, so the
        # cyclic collector frees them, and the exchange is finished after that collection.
        del response
        gc.collect()
        return first

    try:
        first, events = record(app)
    finally:
        upstream.stop()
    assert first == SLOW_CHUNKS[0]
    [dropped] = effects(events)
    assert dropped["exchange"]["response"]["body"] == SLOW_CHUNKS[0].decode()
    assert events[-1]["effectsComplete"] is True
