"""How the requests recorder follows the reads of a response body, on a real upstream.

The recorder sets its own ``read``, ``read1``, ``read_chunked`` and ``close`` on the one
urllib3 response of a recorded call and takes them off when the body ends. These tests read
bodies in the ways that keep a reference to those methods past the end, or read through
``read1``, and check that the application gets every byte unchanged, that the exchange holds
what was read, and that the response is left exactly as it was.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.integration.requests_helpers import Capture, capturing, effects, upstream_headers
from tests.integration.upstream import SLOW_CHUNKS, Upstream

_TAPPED = {"read", "read1", "read_chunked", "close"}


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@pytest.fixture
def capture() -> Iterator[Capture]:
    with capturing() as active:
        yield active


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
    assert response["body"] == {"rate": 1.5, "currency": "EUR"}
    assert "stream" not in response
    assert events[-1]["effectsComplete"] is True


def test_read1_pieces_are_the_stream_chunks(upstream: Upstream, capture: Capture) -> None:
    def app() -> tuple[list[bytes], set[str]]:
        response = requests.get(upstream.base + "/slow", stream=True)
        pieces = []
        while piece := response.raw.read1(64):
            pieces.append(piece)
        return pieces, _TAPPED & set(vars(response.raw))

    (pieces, left), events = capture.operation(app)
    assert b"".join(pieces) == b"".join(SLOW_CHUNKS)
    assert left == set()
    [effect] = effects(events)
    assert effect["exchange"]["response"] == {
        "status": 200,
        "headers": upstream_headers(
            **{"content-type": "text/plain", "transfer-encoding": "chunked"}
        ),
        "body": b"".join(SLOW_CHUNKS).decode(),
        "stream": {"chunks": [len(piece) for piece in pieces]},
    }


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
    assert effects(events)[0]["exchange"]["response"]["body"] == body
