"""A requests call over any urllib3 in range is recorded with its body and replayed.

urllib3 gives ``HTTPResponse.read1`` from 2.2 on; 1.26, 2.0 and 2.1 lack it, and an
application pinning one of them (requests allows all) once lost every capture to an
``AttributeError`` per call. The recorder taps such a response through its general path,
which sets only the reads the response has. These tests run against whatever urllib3 the
environment holds: the matrix cells ``urllib3-1.26``, ``urllib3-2.0``, ``urllib3-2.1`` and
``oldest`` (``scripts/matrix``) run them over the old releases, the project's own
environment over the newest.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import requests
import urllib3
from urllib3.response import HTTPResponse

from reproit_otel.instrumentation import _requests_reads
from tests.integration.requests_helpers import capsule_of, capturing
from tests.integration.test_requests_replay import no_sockets, replaying
from tests.integration.upstream import serving

BODY = b'{"total": 9.0, "note": "gr\\u00fc\\u00dfe"}' + bytes(range(200, 256))
CHUNKS = (b"first,", b"second,", b"third")
URLLIB3 = tuple(int(part) for part in urllib3.__version__.split(".")[:2])
HAS_READ1 = URLLIB3 >= (2, 2)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        if self.path == "/chunked":
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in CHUNKS:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("content-length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)


@pytest.fixture
def upstream() -> Iterator[str]:
    with serving(_Handler) as base:
        yield base


def _tapped(response: requests.Response) -> list[str]:
    """The reads the recorder set on the urllib3 response of ``response``."""
    own = response.raw.__dict__
    return [name for name in ("read", "read1", "read_chunked", "close") if name in own]


def _recorded(response: dict[str, Any]) -> tuple[int, bytes]:
    """The status and the exact body bytes a recorded response holds."""
    if "bodyBase64" in response:
        return response["status"], base64.b64decode(response["bodyBase64"])
    return response["status"], response["body"].encode()


def _reads(base: str, taps: list[list[str]]) -> list[Any]:
    """The body of each endpoint through the access paths requests offers."""
    seen: list[Any] = []
    for path in ("/fixed", "/chunked"):
        seen.append(requests.get(base + path).content)
        streamed = requests.get(base + path, stream=True)
        taps.append(_tapped(streamed))
        seen.append(list(streamed.iter_content(16)))
        raw = requests.get(base + path, stream=True)
        seen.append(raw.raw.read())
    return seen


def test_the_fast_path_is_taken_only_where_urllib3_has_read1() -> None:
    assert callable(getattr(HTTPResponse, "read1", None)) is HAS_READ1
    assert _requests_reads._FAST_PATH is HAS_READ1


def test_every_body_is_recorded_exactly_and_replayed(
    upstream: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    taps: list[list[str]] = []
    with capturing() as capture:
        live, events = capture.operation(lambda: _reads(upstream, taps))
    whole = b"".join(CHUNKS)
    assert [b"".join(read) if isinstance(read, list) else read for read in live] == [
        BODY,
        BODY,
        BODY,
        whole,
        whole,
        whole,
    ]
    reads = ["read", "read1", "read_chunked", "close"] if HAS_READ1 else None
    expected = reads or ["read", "read_chunked", "close"]
    assert taps == [expected, expected]
    recorded = [_recorded(event["exchange"]["response"]) for event in events[1:-1]]
    assert recorded == [(200, BODY)] * 3 + [(200, whole)] * 3

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = _reads(upstream, [])
    assert not session.diverged
    assert (session.consumed, session.total) == (6, 6)
    assert replayed == live
    assert "internal error" not in capfd.readouterr().err
