"""A replay hands the application exactly the bytes it read live, whatever the body.

A real loopback upstream answers bodies that re-encoding would change (a float written
``9.0``, keys out of order, ``\\u`` escapes, odd whitespace, a JSON string, a Latin-1 page, a
binary file, a server-sent event stream). The application reads each through every access
path requests offers; the recorded operation then travels the way a production capture
does (capture batch, checked by the reference validator, projected back to a capsule, written
and read as canonical JSON), and the same reads in replay, with the upstream stopped and
sockets refused, must see the same bytes, text, values, chunks and lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import requests

from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.capsule import capsule_from_batch
from reproit_otel.wire.validate import validate_capture_batch
from tests.integration.requests_helpers import capturing
from tests.integration.test_requests_replay import no_sockets, replaying
from tests.integration.upstream import serving

SSE = (b'data: {"n": 1.0}\n\n', b"event: tick\ndata: \xc3\xa9\n\n", b"data: done\n\n")

BODIES: dict[str, tuple[str, bytes]] = {
    "/float": ("application/json", b'{"total": 9.0, "items": [1.50, 2e3]}'),
    "/unsorted": ("application/json", b'{"zeta":1,"alpha":{"b":2,"a":1}}'),
    "/escapes": (
        "application/json; charset=utf-8",
        b'{"name":"Gr\\u00fc\\u00dfe \\ud83d\\ude00 \\/"}',
    ),
    "/spaces": ("application/json", b'\n  { "a" :\t[ 1 ,2 ]\r\n}  \n'),
    "/string": ("application/json", b'"just a string"'),
    "/canonical": ("application/json", b'{"a":1,"b":[true,null]}'),
    "/latin1": ("text/plain; charset=iso-8859-1", "grüße, café".encode("latin-1")),
    "/binary": ("application/octet-stream", bytes(range(256))),
    "/lines": ("text/plain", b"one\r\ntwo\n\nthree"),
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/sse":
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in SSE:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        content_type, body = BODIES[self.path]
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def upstream() -> Iterator[str]:
    with serving(_Handler) as base:
        yield base


def _json_or_error(response: requests.Response) -> Any:
    try:
        value = response.json()
    except ValueError as error:
        return ("not json", type(error).__name__)
    return (type(value).__name__, value, json.dumps(value))  # the types, not only equality


def _reads(base: str) -> list[Any]:
    """Every body, read through every access path requests offers."""
    seen: list[Any] = []
    for path in [*BODIES, "/sse"]:
        url = base + path
        whole = requests.get(url)
        seen.append((path, "content", whole.content))
        seen.append((path, "text", whole.encoding, whole.text))
        seen.append((path, "json", _json_or_error(whole)))
        streamed = requests.get(url, stream=True)
        seen.append((path, "iter_content", list(streamed.iter_content(7))))
        lines = requests.get(url, stream=True)
        seen.append((path, "iter_lines", list(lines.iter_lines())))
        raw = requests.get(url, stream=True)
        seen.append((path, "raw", raw.raw.read()))
    return seen


def _through_the_wire(events: list[Any]) -> dict[str, Any]:
    """The capsule a production capture of ``events`` comes back as, batch checked on the way."""
    returned = events[-1]
    batch = build_capture_batch(
        {"operation": events[0]["operation"], "status": returned.get("status"), "events": events},
        config=CaptureSettings(project_id="orders-api", build="1.2.3"),
        environment=CaptureEnvironment(
            now_ms=1_700_000_000_500,
            batch_number=1,
            runtime="python 3.11.0",
            os="linux",
            arch="x64",
            tz="UTC",
        ),
    )
    batch = json.loads(canonical_json(batch))  # what the ingest receives
    assert validate_capture_batch(batch) == []
    capsule = capsule_from_batch(batch)
    assert capsule is not None
    parsed: dict[str, Any] = json.loads(canonical_json(capsule))  # the capsule file
    return parsed


def _record(app: Callable[[], list[Any]]) -> tuple[list[Any], list[Any]]:
    with capturing() as capture:
        return capture.operation(app)


def test_every_access_path_reads_the_live_bytes_in_replay(
    upstream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    live, events = _record(lambda: _reads(upstream))
    capsule = _through_the_wire(events)
    with replaying(capsule) as session, no_sockets(monkeypatch):
        replayed = _reads(upstream)
    assert not session.diverged
    assert (session.consumed, session.total) == (len(BODIES) * 4 + 4, len(BODIES) * 4 + 4)
    for live_read, replayed_read in zip(live, replayed, strict=True):
        assert replayed_read == live_read
    # The reads really are the awkward ones: types and bytes a re-encoding would change.
    by_read = {(entry[0], entry[1]): entry[2:] for entry in live}
    assert by_read[("/float", "json")] == (
        ("dict", {"total": 9.0, "items": [1.5, 2000.0]}, '{"total": 9.0, "items": [1.5, 2000.0]}'),
    )
    assert by_read[("/latin1", "text")] == ("iso-8859-1", "grüße, café")
    assert by_read[("/binary", "content")] == (bytes(range(256)),)
    assert by_read[("/sse", "iter_lines")] == (
        [b'data: {"n": 1.0}', b"", b"event: tick", "data: é".encode(), b"", b"data: done", b""],
    )


def test_a_canonical_json_body_keeps_its_parsed_value(upstream: str) -> None:
    """Only a body re-encoding would change travels as text; the others keep the reference shape."""

    def app() -> list[Any]:
        return [requests.get(upstream + path).content for path in ("/canonical", "/float")]

    _, events = _record(app)
    bodies = [e["exchange"]["response"]["body"] for e in events if e["kind"] == "effect"]
    assert bodies == [{"a": 1, "b": [True, None]}, '{"total": 9.0, "items": [1.50, 2e3]}']


def test_a_secret_key_wins_over_byte_exactness(upstream: str) -> None:
    """A JSON body holding a secret key is kept parsed, so the key's value is redacted."""
    BODIES["/secret"] = ("application/json", b'{"user": "ada", "password": "hunter2"}')
    try:
        _, events = _record(lambda: requests.get(upstream + "/secret").json())
    finally:
        del BODIES["/secret"]
    [effect] = [e for e in events if e["kind"] == "effect"]
    assert effect["exchange"]["response"]["body"] == {
        "user": "ada",
        "password": {"$reproit": {"redacted": True, "type": "string", "length": 7}},
    }


def test_a_secret_value_in_binary_bytes_drops_the_exact_copy(upstream: str) -> None:
    """Configured secret values are scrubbed from text; base64 cannot be, so it is left out."""
    secret = "sk_live_0123456789"
    BODIES["/key"] = ("application/octet-stream", b"\xff" + secret.encode() + b"\x80")
    try:
        with capturing({"REPROIT_SECRET_VALUES": secret}) as capture:
            _, events = capture.operation(lambda: requests.get(upstream + "/key").content)
    finally:
        del BODIES["/key"]
    [effect] = [e for e in events if e["kind"] == "effect"]
    response = effect["exchange"]["response"]
    assert "bodyBase64" not in response
    assert response["body"] == "\ufffd$reproit\ufffd"


def test_a_secret_name_in_a_non_utf8_body_drops_the_exact_copy(upstream: str) -> None:
    """A Latin-1 JSON text whose names are secret is redacted; its exact bytes are not kept."""
    BODIES["/latin-secret"] = ("text/plain; charset=latin-1", b'{"password": "caf\xe9"}')
    try:
        _, events = _record(lambda: requests.get(upstream + "/latin-secret").content)
    finally:
        del BODIES["/latin-secret"]
    [effect] = [e for e in events if e["kind"] == "effect"]
    response = effect["exchange"]["response"]
    assert "bodyBase64" not in response
    # The text's own redaction made the placeholder of the secret under its key; the
    # exchange's structural redaction keeps a placeholder this process made (its type and
    # length are what replay's stand-in is made from).
    assert response["body"] == {
        "password": {"$reproit": {"redacted": True, "type": "string", "length": 4}}
    }
