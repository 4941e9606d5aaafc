"""The requests recorder against a real loopback upstream, through the real capture pipeline.

Each test runs the application code inside a server operation (the reproit span processor on
a real tracer provider), lets the recorder at ``HTTPAdapter.send`` see the calls, and asserts
the whole effect events the operation ended with, plus what the application and the upstream
saw (which must be exactly what they see without reproit).
"""

from __future__ import annotations

import gc
import hashlib
import io
import json
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
import requests.adapters
import urllib3
from opentelemetry.instrumentation.utils import suppress_instrumentation

from reproit_otel.instrumentation.requests import (
    install_recorder,
    recorder_installed,
    uninstall_recorder,
)
from tests.integration.requests_helpers import (
    Capture,
    capturing,
    effects,
    sent_headers,
    upstream_headers,
)
from tests.integration.upstream import (
    BIG_BODY,
    SLOW_CHUNKS,
    SSE_EVENTS,
    Upstream,
    closed_port,
)

# A whole str request body goes out as UTF-8 through urllib3 2, as Latin-1 through urllib3 1.26
# (which leaves its encoding to http.client).
TEXT_BODY_ENCODING = "iso-8859-1" if urllib3.__version__.startswith("1.") else "utf-8"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def capture() -> Iterator[Capture]:
    with capturing() as active:
        yield active


def call(resource: str, key: str, request: dict[str, Any], response: dict[str, Any]) -> Any:
    return {
        "effect": "call",
        "resource": resource,
        "key": key,
        "exchange": {"protocol": "http", "request": request, "response": response},
    }


def test_json_call_is_recorded_whole(upstream: Upstream, capture: Capture) -> None:
    seen, events = capture.operation(lambda: requests.get(upstream.base + "/json").json())
    assert seen == {"rate": 1.5, "currency": "EUR"}
    assert effects(events) == [
        call(
            f"127.0.0.1:{upstream.port}",
            "GET /json",
            {"method": "GET", "url": upstream.base + "/json", "headers": sent_headers()},
            {
                "status": 200,
                "headers": upstream_headers(
                    **{
                        "content-length": "29",
                        "content-type": "application/json",
                        "x-upstream": "json",
                    }
                ),
                # keys not in canonical order: the text read is kept, byte for byte
                "body": '{"rate":1.5,"currency":"EUR"}',
            },
        )
    ]
    assert events[-1]["effectsComplete"] is True


def test_text_binary_and_failing_responses(upstream: Upstream, capture: Capture) -> None:
    def app() -> list[Any]:
        text = requests.get(upstream.base + "/text")
        binary = requests.get(upstream.base + "/binary")
        failed = requests.get(upstream.base + "/fail")
        return [text.text, binary.content, failed.status_code, failed.json()]

    seen, events = capture.operation(app)
    assert seen == ["grüße, world", b"\xff\x00binary\x80", 500, {"error": "boom"}]
    assert [effect["exchange"]["response"] for effect in effects(events)] == [
        {
            "status": 200,
            "headers": upstream_headers(
                **{"content-length": "14", "content-type": "text/plain; charset=utf-8"}
            ),
            "body": "grüße, world",
        },
        {
            "status": 200,
            "headers": upstream_headers(
                **{"content-length": "9", "content-type": "application/octet-stream"}
            ),
            "body": "\ufffd\x00binary\ufffd",
            "bodyBase64": "/wBiaW5hcnmA",
        },
        {
            "status": 500,
            "headers": upstream_headers(
                **{"content-length": "16", "content-type": "application/json"}
            ),
            "body": {"error": "boom"},  # canonical JSON already: kept parsed
        },
    ]


class Unseekable(io.RawIOBase):
    """A file object that cannot seek (like a pipe)."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_request_bodies_are_recorded_and_still_sent_whole(
    upstream: Upstream, capture: Capture, tmp_path: Any
) -> None:
    upload = tmp_path / "upload.txt"
    upload.write_bytes(b"file body")

    def generator() -> Iterator[bytes]:
        yield b"gen-"
        yield b"erated"

    def post_file(url: str) -> bytes:
        with upload.open("rb") as handle:
            handle.read(5)  # the server must receive the file from where the app left it
            echoed = requests.post(url, data=handle).content
            assert handle.read() == b""  # requests itself read it to the end, as always
        return echoed

    def app() -> list[bytes]:
        echo = upstream.base + "/echo"
        return [
            requests.post(echo, json={"q": "hello", "n": [1, 2]}).content,
            requests.post(echo, data={"a": "1", "b": "x y"}).content,
            requests.post(echo, data="plain text é").content,
            requests.post(echo, data=b"\x00\x01bytes").content,
            requests.post(echo, data=generator()).content,
            post_file(echo),
            requests.post(echo, data=Unseekable(b"pipe data")).content,
        ]

    seen, events = capture.operation(app)
    sent = [
        b'{"q": "hello", "n": [1, 2]}',
        b"a=1&b=x+y",
        "plain text é".encode(TEXT_BODY_ENCODING),
        b"\x00\x01bytes",
        b"gen-erated",
        b"body",
        b"pipe data",
    ]
    assert seen == sent
    assert upstream.received == sent
    requests_made = [effect["exchange"]["request"] for effect in effects(events)]
    echo = upstream.base + "/echo"
    assert requests_made == [
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(**{"content-length": "27", "content-type": "application/json"}),
            "body": {"q": "hello", "n": [1, 2]},
        },
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(
                **{
                    "content-length": "9",
                    "content-type": "application/x-www-form-urlencoded",
                }
            ),
            "body": "a=1&b=x+y",
        },
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(**{"content-length": str(len(sent[2]))}),
            "body": "plain text é",
        },
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(**{"content-length": "7"}),
            "body": "\x00\x01bytes",
        },
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(**{"transfer-encoding": "chunked"}),
            "body": "gen-erated",
        },
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(**{"content-length": "4"}),
            "body": "body",
        },
        {
            "method": "POST",
            "url": echo,
            "headers": sent_headers(**{"transfer-encoding": "chunked"}),
            "body": "pipe data",
        },
    ]


def test_streamed_event_stream_is_recorded_as_the_app_reads_it(
    upstream: Upstream, capture: Capture
) -> None:
    def app() -> list[bytes]:
        with requests.get(upstream.base + "/sse", stream=True) as response:
            return list(response.iter_content(None))

    seen, events = capture.operation(app)
    assert seen == list(SSE_EVENTS)
    body = b"".join(SSE_EVENTS).decode()
    assert effects(events)[0]["exchange"]["response"] == {
        "status": 200,
        "headers": upstream_headers(
            **{"content-type": "text/event-stream", "transfer-encoding": "chunked"}
        ),
        "body": body,
        "stream": {"chunks": [len(event) for event in SSE_EVENTS]},
    }


def test_iter_lines_of_a_slow_chunked_body(upstream: Upstream, capture: Capture) -> None:
    def app() -> list[bytes]:
        response = requests.get(upstream.base + "/slow", stream=True)
        return list(response.iter_lines())

    seen, events = capture.operation(app)
    assert seen == [b"one", b"two", b"three"]
    response = effects(events)[0]["exchange"]["response"]
    assert response["body"] == "one\ntwo\nthree\n"
    assert response["stream"] == {"chunks": [len(chunk) for chunk in SLOW_CHUNKS]}


def test_abandoned_stream_is_recorded_when_closed(upstream: Upstream, capture: Capture) -> None:
    def app() -> tuple[bytes, int]:
        response = requests.get(upstream.base + "/slow", stream=True)
        first = next(response.iter_content(None))
        pending = len(effects(capture.sink.traces[-1].events)) if capture.sink.traces else 0
        response.close()
        return first, pending

    (first, pending), events = capture.operation(app)
    assert (first, pending) == (b"one\n", 0)
    assert effects(events)[0]["exchange"]["response"] == {
        "status": 200,
        "headers": upstream_headers(
            **{"content-type": "text/plain", "transfer-encoding": "chunked"}
        ),
        "body": "one\n",
    }


def test_unread_stream_is_recorded_when_collected(upstream: Upstream, capture: Capture) -> None:
    def app() -> int:
        response = requests.get(upstream.base + "/json", stream=True)
        status = response.status_code
        del response
        gc.collect()
        return status

    status, events = capture.operation(app)
    assert status == 200
    assert "body" not in effects(events)[0]["exchange"]["response"]
    assert events[-1]["effectsComplete"] is True


def test_large_body_keeps_only_its_identity(upstream: Upstream, capture: Capture) -> None:
    seen, events = capture.operation(lambda: requests.get(upstream.base + "/big").content)
    assert seen == BIG_BODY
    assert effects(events)[0]["exchange"]["response"] == {
        "status": 200,
        "headers": upstream_headers(**{"content-length": "10000", "content-type": "text/plain"}),
        "bodyBytes": 10000,
        "bodySha256": hashlib.sha256(BIG_BODY).hexdigest(),
        "truncated": True,
    }


def test_compressed_body_is_recorded_as_the_app_reads_it(
    upstream: Upstream, capture: Capture
) -> None:
    seen, events = capture.operation(lambda: requests.get(upstream.base + "/gzip").json())
    assert seen == {"zipped": True}
    response = effects(events)[0]["exchange"]["response"]
    assert response["body"] == {"zipped": True}
    assert response["headers"]["content-encoding"] == "gzip"


def test_connection_refused_is_recorded_then_raised_unchanged(capture: Capture) -> None:
    url = f"http://127.0.0.1:{closed_port()}/rates?token=t0ps3cret"

    def app() -> BaseException:
        with pytest.raises(requests.exceptions.ConnectionError) as raised:
            requests.get(url)
        return raised.value

    error, events = capture.operation(app)
    assert type(error) is requests.exceptions.ConnectionError
    redacted = url.replace("t0ps3cret", "$reproit")
    [effect] = effects(events)
    assert effect == call(
        redacted.split("/")[2],
        "GET /rates?token=$reproit",
        {"method": "GET", "url": redacted, "headers": sent_headers()},
        {
            "error": {
                "type": "requests.exceptions.ConnectionError",
                # The message names the URL: its secret query value is redacted there too.
                "message": str(error).replace("t0ps3cret", "$reproit"),
            }
        },
    )
    assert "t0ps3cret" in str(error)  # the application still sees its own message


def test_read_timeout_is_recorded(upstream: Upstream, capture: Capture) -> None:
    def app() -> BaseException:
        with pytest.raises(requests.exceptions.ReadTimeout) as raised:
            requests.get(upstream.base + "/sleep", timeout=0.2)
        return raised.value

    error, events = capture.operation(app)
    assert effects(events)[0]["exchange"]["response"] == {
        "error": {"type": "requests.exceptions.ReadTimeout", "message": str(error)}
    }


def test_connection_cut_mid_body(upstream: Upstream, capture: Capture) -> None:
    def app() -> BaseException:
        with pytest.raises(requests.exceptions.ChunkedEncodingError) as raised:
            requests.get(upstream.base + "/cut")
        return raised.value

    error, events = capture.operation(app)
    response = effects(events)[0]["exchange"]["response"]
    cause = error.args[0]
    assert response == {
        "status": 200,
        "headers": upstream_headers(
            **{"content-type": "text/plain", "transfer-encoding": "chunked"}
        ),
        "body": "partial",
        "error": {"type": f"urllib3.exceptions.{type(cause).__qualname__}", "message": str(cause)},
    }


def test_secrets_in_query_and_headers_are_redacted(upstream: Upstream, capture: Capture) -> None:
    url = upstream.base + "/query?page=2&api_key=k-123456&token=abc"

    def app() -> Any:
        return requests.get(url, headers={"Authorization": "Bearer sk_live_1"}).json()

    seen, events = capture.operation(app)
    assert seen == {"query": "page=2&api_key=k-123456&token=abc"}
    [effect] = effects(events)
    assert effect["key"] == "GET /query?page=2&api_key=$reproit&token=$reproit"
    request = effect["exchange"]["request"]
    assert request["url"] == upstream.base + "/query?page=2&api_key=$reproit&token=$reproit"
    assert request["headers"]["authorization"] == {
        "$reproit": {"redacted": True, "type": "string", "length": 16}
    }


def test_password_in_user_info_is_never_recorded(upstream: Upstream, capture: Capture) -> None:
    url = f"http://ada:hunter2@127.0.0.1:{upstream.port}/json"
    _, events = capture.operation(lambda: requests.get(url).status_code)
    [effect] = effects(events)
    assert (
        effect["exchange"]["request"]["url"]
        == f"http://ada:$reproit@127.0.0.1:{upstream.port}/json"
    )
    assert "hunter2" not in json.dumps(events)


def test_own_traffic_and_calls_outside_operations_are_not_recorded(
    upstream: Upstream, capture: Capture
) -> None:
    assert requests.get(upstream.base + "/json").status_code == 200  # no operation

    def app() -> int:
        with suppress_instrumentation():
            return requests.get(upstream.base + "/json").status_code

    status, events = capture.operation(app)
    assert status == 200
    assert effects(events) == []


def test_install_is_idempotent_and_uninstall_restores_exactly() -> None:
    original = requests.adapters.HTTPAdapter.__dict__["send"]
    install_recorder()
    patched = requests.adapters.HTTPAdapter.__dict__["send"]
    install_recorder()
    assert requests.adapters.HTTPAdapter.__dict__["send"] is patched is not original
    assert recorder_installed()
    uninstall_recorder()
    uninstall_recorder()
    assert requests.adapters.HTTPAdapter.__dict__["send"] is original
    assert not recorder_installed()


@pytest.mark.parametrize("where", ["bounded_headers", "is_event_stream", "bounded_body"])
def test_a_defect_in_the_recorder_never_breaks_the_call(
    upstream: Upstream, capture: Capture, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    from reproit_otel.instrumentation import _requests_record

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("recorder defect")

    # At the request, when the body ends, and while the body is bounded.
    monkeypatch.setattr(_requests_record, where, broken)
    monkeypatch.delenv("REPROIT_STRICT_INTERNAL")
    seen, events = capture.operation(lambda: requests.get(upstream.base + "/json").json())
    assert seen == {"rate": 1.5, "currency": "EUR"}
    assert effects(events) == []
    assert events[-1]["effectsComplete"] is False


def test_otel_client_span_is_covered_by_the_exchange(upstream: Upstream, capture: Capture) -> None:
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    otel = RequestsInstrumentor()
    otel.instrument(tracer_provider=capture.provider)
    try:
        seen, events = capture.operation(lambda: requests.get(upstream.base + "/json").json())
    finally:
        otel.uninstrument()
    assert seen == {"rate": 1.5, "currency": "EUR"}
    assert [effect["key"] for effect in effects(events)] == ["GET /json"]
    assert events[-1]["effectsComplete"] is True


def test_concurrent_operations_keep_their_own_exchanges(
    upstream: Upstream, capture: Capture
) -> None:
    def operation(index: int) -> list[str]:
        def app() -> Any:
            return [
                requests.get(f"{upstream.base}/query?n={index}&call={call}").json()
                for call in (1, 2)
            ]

        _, events = capture.operation(app, name=f"GET /op{index}")
        return [effect["key"] for effect in effects(events)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        keys = list(pool.map(operation, range(16)))
    assert keys == [[f"GET /query?n={i}&call=1", f"GET /query?n={i}&call=2"] for i in range(16)]


def test_a_recorded_call_leaves_no_reference_cycle(upstream: Upstream, capture: Capture) -> None:
    """A recorded response and its operation are freed by reference counting alone: garbage
    for the cyclic collector on every request would cost every request its collection time."""
    session = requests.Session()
    capture.operation(lambda: session.get(upstream.base + "/json").json())  # warm
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            capture.operation(lambda: session.get(upstream.base + "/json").json())
        capture.sink.traces.clear()
        gc.collect()
        ours = sorted(
            {
                type(thing).__module__ + "." + type(thing).__qualname__
                for thing in gc.garbage
                if type(thing).__module__.startswith(("reproit_otel", "urllib3"))
            }
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        session.close()
    assert ours == []


# --- reads that keep the recorder's methods past the end, or read through read1 ------------------
# The recorder sets its own ``read``, ``read1``, ``read_chunked`` and ``close`` on the one urllib3
# response of a recorded call and takes them off when the body ends: the application gets every
# byte unchanged, the exchange holds what was read, and the response is left as it was.

_TAPPED = {"read", "read1", "read_chunked", "close"}
# urllib3 has HTTPResponse.read1 from 2.2 on; the recorder never adds one where it is missing.
HAS_READ1 = tuple(int(part) for part in urllib3.__version__.split(".")[:2]) >= (2, 2)


def test_a_read_method_kept_past_the_end_still_reads(upstream: Upstream, capture: Capture) -> None:
    """``shutil.copyfileobj`` keeps ``raw.read`` and calls it once more after the body ended."""

    def app() -> tuple[bytes, set[str]]:
        response = requests.get(upstream.base + "/json", stream=True)
        sink = io.BytesIO()
        shutil.copyfileobj(response.raw, sink)
        return sink.getvalue(), _TAPPED & set(vars(response.raw))

    (copied, left), events = capture.operation(app)
    assert json.loads(copied) == {"rate": 1.5, "currency": "EUR"}
    assert left == set()
    [effect] = effects(events)
    response = effect["exchange"]["response"]
    assert response["body"] == copied.decode()
    assert "stream" not in response
    assert events[-1]["effectsComplete"] is True


def test_read1_pieces_are_the_stream_chunks(upstream: Upstream, capture: Capture) -> None:
    """Over a urllib3 without read1 (before 2.2) the same reads go through read."""

    def app() -> tuple[list[bytes], set[str], bool]:
        response = requests.get(upstream.base + "/slow", stream=True)
        read1 = getattr(response.raw, "read1", None)
        pieces = []
        while piece := (read1 or response.raw.read)(64):
            pieces.append(piece)
        return pieces, _TAPPED & set(vars(response.raw)), read1 is not None

    (pieces, left, had_read1), events = capture.operation(app)
    assert b"".join(pieces) == b"".join(SLOW_CHUNKS)
    assert (left, had_read1) == (set(), HAS_READ1)
    [effect] = effects(events)
    # read(64) before urllib3 2.2 waits for 64 bytes or the end: one piece, no stream field
    # (section 4.5 gives a plain-text body read in fewer than two pieces none).
    stream = {"stream": {"chunks": [len(piece) for piece in pieces]}} if len(pieces) > 1 else {}
    assert effect["exchange"]["response"] == {
        "status": 200,
        "headers": upstream_headers(
            **{"content-type": "text/plain", "transfer-encoding": "chunked"}
        ),
        "body": b"".join(SLOW_CHUNKS).decode(),
        **stream,
    }
    assert len(pieces) == (len(SLOW_CHUNKS) if HAS_READ1 else 1)


def test_an_instance_method_set_before_the_call_is_given_back(
    upstream: Upstream, capture: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A response that already had its own ``read`` gets that one back when the body ends."""
    import urllib3.response

    seen: list[Any] = []
    original_init = urllib3.response.HTTPResponse.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        own_read = self.read

        def read(*a: Any, **k: Any) -> Any:
            return own_read(*a, **k)

        self.read = read
        seen.append(read)

    monkeypatch.setattr(urllib3.response.HTTPResponse, "__init__", init)

    def app() -> tuple[Any, Any]:
        response = requests.get(upstream.base + "/json")
        return response.json(), vars(response.raw).get("read")

    (body, read), events = capture.operation(app)
    assert body == {"rate": 1.5, "currency": "EUR"}
    assert read is seen[-1]
    assert json.loads(effects(events)[0]["exchange"]["response"]["body"]) == body
