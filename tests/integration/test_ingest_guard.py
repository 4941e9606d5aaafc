"""A real ``reproit-otel serve`` cannot be pushed around from the network or a browser.

Without keys it listens on loopback only and takes batches only as ``application/json``; a
``Host`` it does not answer for is refused (DNS rebinding) and so is a write from another
site's page; the page's replay line names the configured public URL, never the request's
``Host``; failed authentications are limited per client address; a request head or body that
trickles in is cut off; one address cannot hold more connections than allowed. The browser
case (a page on another origin posting a batch) runs in headless Chromium.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.wire.canonical import canonical_json
from tests.integration.capture_helpers import built_batch
from tests.integration.served_ingest import ServedIngest, cli_command

KEY = "guard-key"
AUTH = {"authorization": f"Bearer {KEY}"}
CHROMIUM = os.environ.get("REPROIT_TEST_CHROMIUM", "/usr/bin/chromium")


def _batch() -> bytes:
    return canonical_json(built_batch("POST /guarded")).encode()


@pytest.fixture(scope="module")
def open_ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    """No keys: a developer's laptop."""
    folder = tmp_path_factory.mktemp("open")
    server = ServedIngest(
        f"sqlite:///{folder / 'ingest.db'}",
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
        "--max-connections-per-client",
        "3",
    )
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def keyed_ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    folder = tmp_path_factory.mktemp("keyed")
    server = ServedIngest(
        f"sqlite:///{folder / 'ingest.db'}",
        "--api-key",
        KEY,
        "--public-url",
        "https://ingest.example.com/",
        "--replay-exec",
        "python -m shop",
    )
    yield server
    assert server.stop() == 0


def _port(server: ServedIngest) -> int:
    return int(server.base_url.rsplit(":", 1)[1])


def test_without_keys_it_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    result = subprocess.run(
        cli_command(
            "serve", "--host", "0.0.0.0", "--port", "0", "--db", f"sqlite:///{tmp_path}/x.db"
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("REPROIT_")},
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "reproit-otel serve: without --api-key the ingest listens on loopback only, not on "
        "0.0.0.0: give keys (--api-key, $REPROIT_INGEST_API_KEYS) to serve others, or drop "
        "--host\n"
    )


def test_a_batch_must_be_json(open_ingest: ServedIngest) -> None:
    url = f"{open_ingest.base_url}/v1/capture-batches"
    plain = httpx.post(url, content=_batch(), headers={"content-type": "text/plain"})
    assert (plain.status_code, plain.json()) == (
        415,
        {
            "error": {
                "rule": "content-type",
                "field": "content-type",
                "message": "send a capture batch as application/json (gzip it with "
                "content-encoding: gzip)",
            }
        },
    )
    sent = httpx.post(url, content=_batch(), headers={"content-type": "application/json"})
    assert sent.status_code == 202


def test_a_host_it_does_not_answer_for_is_refused(open_ingest: ServedIngest) -> None:
    port = _port(open_ingest)
    rebound = httpx.get(
        f"{open_ingest.base_url}/v1/occurrences", headers={"host": f"evil.example:{port}"}
    )
    assert (rebound.status_code, rebound.json()) == (
        403,
        {
            "error": {
                "rule": "host",
                "field": "host",
                "message": f"this ingest does not answer for the host 'evil.example:{port}'; "
                "start it with --allowed-host or --public-url naming the address clients use",
            }
        },
    )
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST"):
        answer = httpx.get(f"{open_ingest.base_url}/v1/occurrences", headers={"host": host})
        assert answer.status_code == 200, host
    probe = httpx.get(f"{open_ingest.base_url}/healthz", headers={"host": "10.1.2.3:8765"})
    assert probe.json() == {"status": "ok"}


def test_a_write_from_another_site_is_refused(open_ingest: ServedIngest) -> None:
    url = f"{open_ingest.base_url}/v1/capture-batches"
    for headers, origin in (
        ({"origin": "https://evil.example"}, "https://evil.example"),
        ({"sec-fetch-site": "cross-site"}, "cross-site"),
    ):
        answer = httpx.post(
            url, content=_batch(), headers={"content-type": "application/json", **headers}
        )
        assert (answer.status_code, answer.json()) == (
            403,
            {
                "error": {
                    "rule": "origin",
                    "field": "origin",
                    "message": f"a page of another site ({origin}) may not write to this ingest",
                }
            },
        )
    same_site = httpx.post(
        url,
        content=_batch(),
        headers={"content-type": "application/json", "origin": open_ingest.base_url},
    )
    assert same_site.status_code == 202


def test_the_replay_line_names_the_public_url_not_the_host_header(
    keyed_ingest: ServedIngest,
) -> None:
    sent = httpx.post(
        f"{keyed_ingest.base_url}/v1/capture-batches",
        content=_batch(),
        headers={**AUTH, "content-type": "application/json"},
    )
    assert sent.status_code == 202
    occurrence = sent.json()["occurrenceId"]
    page = httpx.get(
        f"{keyed_ingest.base_url}/occurrences/{occurrence}",
        headers={**AUTH, "host": f"localhost:{_port(keyed_ingest)}"},
    )
    assert page.status_code == 200
    assert "--ingest https://ingest.example.com" in page.text
    assert "localhost" not in page.text


def test_failed_authentications_are_limited_per_client(keyed_ingest: ServedIngest) -> None:
    url = f"{keyed_ingest.base_url}/v1/occurrences"
    wrong = {"authorization": "Bearer guess"}
    # Asking without any credential (opening the page) is no guess: never limited.
    assert [httpx.get(url).status_code for _ in range(12)] == [401] * 12
    statuses = [
        httpx.get(url, headers={"authorization": f"Bearer guess-{n}"}).status_code
        for n in range(10)
    ]
    assert statuses == [401] * 10
    limited = httpx.get(url, headers=wrong)
    assert limited.status_code == 429
    assert limited.headers["retry-after"].isdigit()
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert limited.json() == {
        "error": {
            "rule": "auth-rate",
            "field": "authorization",
            "message": "10 failed authentications from 127.0.0.1 within 60 s; retry in "
            f"{limited.headers['retry-after']} s with the right key",
        }
    }
    assert httpx.get(url, headers=AUTH).status_code == 429  # the address, not the key
    assert httpx.get(f"{keyed_ingest.base_url}/healthz").status_code == 200


def _connect(server: ServedIngest) -> socket.socket:
    return socket.create_connection(("127.0.0.1", _port(server)), timeout=30)


def _closed_by_server(connection: socket.socket) -> bool:
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_head_that_trickles_in_is_cut_off(open_ingest: ServedIngest) -> None:
    with _connect(open_ingest) as slow:
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        assert _closed_by_server(slow)


def test_a_body_that_stalls_gets_408(open_ingest: ServedIngest) -> None:
    with _connect(open_ingest) as slow:
        slow.sendall(
            b"POST /v1/capture-batches HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"version"'
        )
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}}"):
            chunk = slow.recv(4096)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert json.loads(body) == {
        "error": {
            "rule": "body-timeout",
            "field": "body",
            "message": "no part of the request body arrived for 1 s",
        }
    }


def test_one_address_holds_a_bounded_number_of_connections(open_ingest: ServedIngest) -> None:
    held = [_connect(open_ingest) for _ in range(3)]
    try:
        with _connect(open_ingest) as extra:
            assert _closed_by_server(extra)
        first = held[0]
        first.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert first.recv(4096).startswith(b"HTTP/1.1 200 ")
    finally:
        for connection in held:
            connection.close()


# -- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    try:
        from playwright import sync_api
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("Playwright for Python is not installed (CI must run the browser test)")
        pytest.skip("Playwright for Python is not installed (pip install playwright)")
    if shutil.which(CHROMIUM) is None:
        if os.environ.get("CI"):
            pytest.fail(f"no Chromium at {CHROMIUM} (CI must run the browser test)")
        pytest.skip(f"no Chromium at {CHROMIUM}; .ci/browser-deps installs it")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            yield browser
        finally:
            browser.close()


def test_a_page_on_another_origin_cannot_post_a_batch(
    open_ingest: ServedIngest, chromium: Any, tmp_path: Path
) -> None:
    """A page served from another origin (127.0.0.2) posts a batch as a browser can without
    asking first: ``text/plain`` and ``no-cors``. Nothing is stored."""
    import http.server
    import threading

    body = _batch().decode()
    target = f"{open_ingest.base_url}/v1/capture-batches"
    page = (
        "<!doctype html><script>"
        f"fetch({json.dumps(target)}, {{method: 'POST', mode: 'no-cors',"
        f" headers: {{'content-type': 'text/plain'}}, body: {json.dumps(body)}}})"
        ".then(() => document.title = 'sent', () => document.title = 'failed');"
        "</script>"
    )
    (tmp_path / "index.html").write_text(page, encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Quiet)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    before = httpx.get(f"{open_ingest.base_url}/v1/occurrences").json()["total"]
    logged = len(open_ingest.lines)
    try:
        tab = chromium.new_page()
        tab.goto(f"http://127.0.0.2:{site.server_address[1]}/index.html")
        tab.wait_for_function("document.title !== ''", timeout=30_000)
        tab.close()
    finally:
        site.shutdown()
        site.server_close()
    after = httpx.get(f"{open_ingest.base_url}/v1/occurrences").json()["total"]
    assert after == before
    # The access log line of the browser's POST: it reached the ingest and was refused. The
    # log is read from the server's stderr by a thread: wait for the lines to arrive.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(
        '"method":"POST","path":"/v1/capture-batches"' in line
        for line in open_ingest.lines[logged:]
    ):
        time.sleep(0.05)
    seen = [json.loads(line) for line in open_ingest.lines[logged:] if line.startswith("{")]
    posts = [(e["method"], e["path"], e["status"]) for e in seen if e["method"] == "POST"]
    assert posts == [("POST", "/v1/capture-batches", 403)]
