"""httpx over HTTP/2 recorded and replayed, against a real hypercorn server on loopback.

The clients speak HTTP/2 only (``http1=False, http2=True``: prior knowledge over cleartext),
so every call goes over HTTP/2, the async ones multiplexed on one connection. The application
runs once against the server with the recorder, once with the server stopped, every socket
connection refused and the replay serving the capsule: what it saw (status, HTTP version,
headers, body pieces) must be the same both times.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.apps.h2_upstream import PIECES
from tests.integration.requests_helpers import capsule_of, effects
from tests.integration.stack_support import answers, free_port
from tests.integration.test_httpx_recorder import no_sockets, record, replaying

APPS = Path(__file__).resolve().parent / "apps"
HYPERCORN = str(Path(sys.executable).with_name("hypercorn"))


@pytest.fixture
def server() -> Iterator[str]:
    """hypercorn serving ``apps/h2_upstream.py``; its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [HYPERCORN, "--bind", f"127.0.0.1:{port}", "h2_upstream:app"],
        cwd=APPS,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not answers(port):
            assert process.poll() is None and time.monotonic() < deadline, "hypercorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def seen(response: httpx.Response, body: Any) -> dict[str, Any]:
    return {
        "status": response.status_code,
        "version": response.http_version,
        "reason": response.reason_phrase,
        "content_type": response.headers.get("content-type"),
        "x_version": response.headers.get("x-version"),
        "body": body,
    }


def sync_application(base: str) -> list[dict[str, Any]]:
    out = []
    with httpx.Client(http1=False, http2=True) as client:
        response = client.get(base + "/json")
        out.append(seen(response, response.json()))
        with client.stream("GET", base + "/stream") as response:
            out.append(seen(response, list(response.iter_raw())))
        response = client.post(base + "/echo", content=b"\x00two\xff")
        out.append(seen(response, response.content))
    return out


async def async_application(base: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(http1=False, http2=True) as client:

        async def whole(path: str) -> dict[str, Any]:
            response = await client.get(base + path)
            return seen(response, response.json())

        async def streamed() -> dict[str, Any]:
            async with client.stream("GET", base + "/stream") as response:
                return seen(response, [piece async for piece in response.aiter_raw()])

        async def partly() -> dict[str, Any]:
            async with client.stream("GET", base + "/stream") as response:
                async for piece in response.aiter_raw():
                    return seen(response, piece)
            raise AssertionError("no piece")

        async def echoed(body: bytes) -> dict[str, Any]:
            response = await client.post(base + "/echo", content=body)
            return seen(response, await response.aread())

        return list(
            await asyncio.gather(whole("/json"), streamed(), partly(), echoed(b"a"), echoed(b"b"))
        )


def test_sync_http2_round_trip(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    live, events = record(lambda: sync_application(server))
    assert [entry["version"] for entry in live] == ["HTTP/2"] * 3
    assert [entry["x_version"] for entry in live] == ["2"] * 3
    assert live[1]["body"] == list(PIECES)
    assert events[-1]["effectsComplete"] is True
    [streamed] = [e for e in effects(events) if e["key"] == "GET /stream"]
    assert streamed["exchange"]["response"]["stream"] == {"chunks": [len(p) for p in PIECES]}

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = sync_application(server)

    assert replayed == live
    assert (session.consumed, session.diverged) == (3, False)


def test_async_http2_round_trip_multiplexed(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    live, events = record(lambda: asyncio.run(async_application(server)))
    assert [entry["version"] for entry in live] == ["HTTP/2"] * 5
    assert [entry["body"] for entry in live] == [
        {"rate": 1.5},
        list(PIECES),
        PIECES[0],
        b"a",
        b"b",
    ]
    assert events[-1]["effectsComplete"] is True
    # Recorded in the order the calls were made, whatever order they ended in.
    assert [(e["key"], e["exchange"]["request"].get("body")) for e in effects(events)] == [
        ("GET /json", None),
        ("GET /stream", None),
        ("GET /stream", None),
        ("POST /echo", "a"),
        ("POST /echo", "b"),
    ]

    with replaying(capsule_of(events)) as session, no_sockets(monkeypatch):
        replayed = asyncio.run(async_application(server))

    assert replayed == live
    assert (session.consumed, session.diverged) == (5, False)
