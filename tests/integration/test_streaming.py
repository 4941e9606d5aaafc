"""Capture never holds a streamed response back: Flask under gunicorn, FastAPI under uvicorn.

Both applications (``apps/streaming_app.py``) run under the real ``opentelemetry-instrument``
launcher with capture on, uploading to a real ``reproit-otel serve``. Spoken to over a raw
socket, so what is asserted is what a client receives:

* a server-sent-events stream whose second event waits for the client to acknowledge the
  first one: it completes only if the first event arrived while the stream was open;
* an endless stream: the client reads its first event and goes away;
* a body that raises after its first chunk: the same bytes on the wire as with reproit-otel
  off (``REPROIT_DISABLED=1``);
* a streamed 500 (after a call to a loopback upstream) is still captured, with its JSON
  output.

A socket timeout guards every read so that a held response fails the test instead of hanging
it; nothing is measured.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.served_ingest import ServedIngest
from tests.integration.stack_support import KEY, Request, Stack, serving, wait_for_occurrence
from tests.integration.upstream import Upstream

APPS = Path(__file__).resolve().parent / "apps"
BIN = Path(sys.executable).parent
READ_GUARD_S = 30.0

STACKS = {
    "flask-gunicorn": (
        str(BIN / "gunicorn"),
        "--workers",
        "1",
        "--worker-class",
        "gthread",
        "--threads",
        "4",
        "--bind",
        "127.0.0.1:{port}",
        "streaming_app:flask_app",
    ),
    "fastapi-uvicorn": (
        str(BIN / "uvicorn"),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "streaming_app:fastapi_app",
    ),
}
OTEL = {
    "OTEL_SERVICE_NAME": "streaming",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}


def stack(name: str) -> Stack:
    return Stack(
        name=name,
        cwd=APPS,
        serve=STACKS[name],
        healthy=Request("POST", "/ack?id=healthy"),
        failing=lambda identifier, kind: Request("GET", "/failing-stream"),
    )


@dataclass
class Served:
    captured: int  # the application with capture on
    plain: int  # the same application with reproit-otel off
    ingest: ServedIngest


@pytest.fixture(scope="module", params=sorted(STACKS))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp(f"streaming-{request.param}")
    with ExitStack() as stack_of:
        ingest = ServedIngest(f"sqlite:///{workdir / 'ingest.db'}", "--api-key", KEY)
        stack_of.callback(ingest.stop)
        upstream = Upstream()
        stack_of.callback(upstream.stop)
        capture_env = {
            **OTEL,
            "UPSTREAM": upstream.base,
            "OTEL_TRACES_EXPORTER": "reproit",
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": "streaming",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
        plain_env = {
            **OTEL,
            "UPSTREAM": upstream.base,
            "OTEL_TRACES_EXPORTER": "none",
            "REPROIT_DISABLED": "1",
        }
        captured = stack_of.enter_context(serving(stack(request.param), capture_env))
        plain = stack_of.enter_context(serving(stack(request.param), plain_env))
        yield Served(captured, plain, ingest)


def connect(port: int, target: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=READ_GUARD_S)
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n".encode())
    return sock


def read_until(sock: socket.socket, marker: bytes, received: bytes = b"") -> bytes:
    """Read until ``marker`` has arrived (a held response times out: the test fails)."""
    while marker not in received:
        data = sock.recv(65536)
        if not data:
            raise AssertionError(f"the response ended before {marker!r}: {received!r}")
        received += data
    return received


def read_to_end(sock: socket.socket, received: bytes = b"") -> bytes:
    while data := sock.recv(65536):
        received += data
    return received


def split(response: bytes) -> tuple[str, dict[str, str], bytes]:
    """Status line, headers (lowercase names; date and server left out) and raw body."""
    head, _, body = response.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name.lower() not in ("date", "server"):
            headers[name.lower()] = value.strip()
    return status, headers, body


def dechunked(body: bytes) -> bytes:
    """The payload of a chunked body (complete or cut short)."""
    payload = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        payload += rest[:size]
        body = rest[size + 2 :]
    return payload


def test_the_first_event_arrives_while_the_stream_is_open(served: Served) -> None:
    with connect(served.captured, "/sse?id=one") as sock:
        received = read_until(sock, b"data: first\n\n")
        # Only a client that holds the first event can acknowledge it.
        assert httpx.post(f"http://127.0.0.1:{served.captured}/ack?id=one").status_code == 200
        received = read_to_end(sock, received)
    status, headers, body = split(received)
    assert (status, headers["content-type"].split(";")[0], headers["transfer-encoding"]) == (
        "HTTP/1.1 200 OK",
        "text/event-stream",
        "chunked",
    )
    assert dechunked(body) == b"data: first\n\ndata: second\n\n"


def test_an_endless_stream_delivers_its_first_event(served: Served) -> None:
    with connect(served.captured, "/endless") as sock:
        received = read_until(sock, b"data: 0\n\n")
    status, _, body = split(received)
    assert status == "HTTP/1.1 200 OK"
    assert dechunked(body).startswith(b"data: 0\n\n")
    # The server goes on serving after the client went away mid-stream.
    assert httpx.post(f"http://127.0.0.1:{served.captured}/ack?id=after").status_code == 200


def test_a_raising_body_gives_the_same_wire_result_as_without_capture(served: Served) -> None:
    answers = []
    for port in (served.plain, served.captured):
        with connect(port, "/broken") as sock:
            answers.append(split(read_to_end(sock)))
    assert answers[1] == answers[0]
    status, _, body = answers[0]
    assert (status.split(" ")[:2], dechunked(body)) == (["HTTP/1.1", "503"], b"partial")


def test_a_streamed_500_is_still_captured_with_its_output(served: Served) -> None:
    with connect(served.captured, "/failing-stream") as sock:
        status, _, body = split(read_to_end(sock))
    assert (status.split(" ")[:2], json.loads(dechunked(body))) == (
        ["HTTP/1.1", "500"],
        {"error": "ledger down", "rate": 1.5},
    )
    occurrence = wait_for_occurrence(served.ingest, "GET /failing-stream")
    capsule: dict[str, Any] = httpx.get(
        f"{served.ingest.base_url}/v1/occurrences/{occurrence}/capsule",
        headers={"authorization": f"Bearer {KEY}"},
    ).json()
    returned = capsule["events"][-1]
    assert (returned["kind"], returned["status"], returned["output"]) == (
        "return",
        500,
        {"error": "ledger down", "rate": 1.5},
    )
