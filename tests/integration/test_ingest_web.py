"""The ingest's web page in a real headless Chromium, over a real ``reproit-otel serve``.

Failures are captured from real requests (:mod:`tests.integration.web_capture`: a Flask app
under reproit capture calling a loopback upstream and the real PostgreSQL) and uploaded to
the served ingest. The browser signs in, filters the list, opens an occurrence and checks its
exchanges, placeholders, replay command, copy button and capsule download. Screenshots land
in ``test-artifacts/`` (``REPROIT_TEST_ARTIFACTS`` overrides the folder).

Chromium is Debian's ``chromium`` (``.ci/browser-deps`` installs it), driven by Playwright
for Python. Without either the browser test is skipped, or fails when ``CI`` is set; the key
and 10,000-row tests run without a browser.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.ingest.facts import server_span_facts
from reproit_otel.ingest.store import SQLiteStore
from reproit_otel.ingest.webauth import COOKIE_NAME
from reproit_otel.wire.capsule import load_capsule
from tests.integration.served_ingest import ServedIngest
from tests.integration.upstream import SSE_EVENTS, Upstream
from tests.integration.web_capture import XSS, capture_failures

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
KEY = "ingest-key-for-the-web-test"
READ_KEY = "read-only-key"
CHROMIUM = os.environ.get("REPROIT_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BOOT = "python -m shop"


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("REPROIT_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory, postgres_dsn: str) -> Iterator[ServedIngest]:
    """A served ingest holding the two failures of the Flask shop."""
    db = tmp_path_factory.mktemp("web") / "ingest.db"
    server = ServedIngest(
        f"sqlite:///{db}",
        "--api-key",
        KEY,
        "--read-key",
        READ_KEY,
        "--replay-exec",
        BOOT,
    )
    upstream = Upstream()
    try:
        capture_failures(server.base_url, KEY, upstream.base, postgres_dsn)
        yield server
    finally:
        upstream.stop()
        assert server.stop() == 0


def _occurrences(ingest: ServedIngest) -> dict[str, dict[str, Any]]:
    answer = httpx.get(
        f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {READ_KEY}"}
    )
    assert answer.status_code == 200
    return {row["operation"]: row for row in answer.json()["occurrences"]}


# -- keys ------------------------------------------------------------------------------------


def test_requests_without_a_key_are_refused(ingest: ServedIngest) -> None:
    checkout = _occurrences(ingest)["POST /checkout/7"]["id"]
    for path in ("/", f"/occurrences/{checkout}", f"/occurrences/{checkout}/capsule"):
        answer = httpx.get(ingest.base_url + path)
        assert answer.status_code == 401, path
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        assert '<form method="post" action="/login">' in answer.text
        assert checkout not in answer.text.replace(f'value="/occurrences/{checkout}', "")
        assert "tea" not in answer.text
    forged = {COOKIE_NAME: "1700000000." + "0" * 64}
    assert httpx.get(ingest.base_url + "/", cookies=forged).status_code == 401
    wrong = httpx.post(f"{ingest.base_url}/login", data={"key": "guess", "next": "/"})
    assert (wrong.status_code, COOKIE_NAME in wrong.cookies) == (401, False)
    assert "That key is not accepted here." in wrong.text
    # The static assets carry no data and load without a key.
    assert httpx.get(f"{ingest.base_url}/static/web.css").status_code == 200


def test_the_read_key_reads_but_never_sends(ingest: ServedIngest) -> None:
    bearer = {"authorization": f"Bearer {READ_KEY}"}
    assert httpx.get(f"{ingest.base_url}/", headers=bearer).status_code == 200
    sent = httpx.post(f"{ingest.base_url}/v1/capture-batches", json={}, headers=bearer)
    assert sent.status_code == 401
    signed_in = httpx.post(
        f"{ingest.base_url}/login", data={"key": READ_KEY, "next": "/?status=503"}
    )
    assert (signed_in.status_code, signed_in.headers["location"]) == (303, "/?status=503")
    cookie = signed_in.headers["set-cookie"]
    assert re.fullmatch(
        rf"{COOKIE_NAME}=\d+\.[0-9a-f]{{64}}; HttpOnly; Max-Age=43200; Path=/; SameSite=lax",
        cookie,
    ), cookie
    assert READ_KEY not in cookie
    page = httpx.get(f"{ingest.base_url}/", cookies=signed_in.cookies)
    assert page.status_code == 200
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    # An open redirect is refused: only local paths are returned to.
    outside = httpx.post(
        f"{ingest.base_url}/login", data={"key": READ_KEY, "next": "//example.org/x"}
    )
    assert outside.headers["location"] == "/"


def test_recorded_markup_is_escaped(ingest: ServedIngest) -> None:
    checkout = _occurrences(ingest)["POST /checkout/7"]["id"]
    answer = httpx.get(
        f"{ingest.base_url}/occurrences/{checkout}",
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 200
    assert XSS not in answer.text
    assert "&lt;script&gt;alert(\\&quot;xss\\&quot;)&lt;/script&gt;" in answer.text
    assert "<img src=x" not in answer.text
    assert "<script>" not in answer.text.replace('<script src="/static/web.js" defer>', "")


# -- 10,000 occurrences ----------------------------------------------------------------------


def test_ten_thousand_occurrences_page_by_page(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    store = SQLiteStore(db)
    try:
        for chunk in range(100):
            spans = [
                (
                    server_span_facts(
                        project_id="shop",
                        operation=f"GET /items/{n}",
                        status=500 + n % 4,
                        build=f"b{n % 7}",
                        commit=None,
                    ),
                    f"trace-{n}",
                    "span",
                )
                for n in range(chunk * 100, chunk * 100 + 100)
            ]
            store.record_server_spans(spans, received_ms=1_790_000_000_000 + chunk * 1000)
    finally:
        store.close()
    server = ServedIngest(f"sqlite:///{db}", "--api-key", KEY)
    try:
        bearer = {"authorization": f"Bearer {KEY}"}
        first = httpx.get(f"{server.base_url}/", headers=bearer, timeout=30)
        later = httpx.get(f"{server.base_url}/?page=150", headers=bearer, timeout=30)
        filtered = httpx.get(f"{server.base_url}/?status=502&page=3", headers=bearer, timeout=30)
    finally:
        assert server.stop() == 0
    assert first.status_code == later.status_code == filtered.status_code == 200
    assert '<span id="range">1–50 of 10000 · page 1 of 200</span>' in first.text
    # One received time per hundred: newest hundred first, ties in id order.
    assert _numbers(first.text) <= set(range(9900, 10000))
    assert len(_numbers(first.text)) == 50
    assert '<span id="range">7451–7500 of 10000 · page 150 of 200</span>' in later.text
    assert _numbers(later.text) <= set(range(2500, 2600))
    assert len(_numbers(later.text)) == 50
    assert '<span id="range">101–150 of 2500 · page 3 of 50</span>' in filtered.text
    assert _numbers(filtered.text) <= {n for n in range(9400, 9600) if n % 4 == 2}
    assert len(_numbers(filtered.text)) == 50


def _numbers(page: str) -> set[int]:
    return {int(operation.rsplit("/", 1)[1]) for operation in _operations(page)}


def _operations(page: str) -> list[str]:
    return re.findall(r'<a class="op" href="[^"]*">([^<]*)</a>', page)


# -- the browser -----------------------------------------------------------------------------


def _unavailable(reason: str) -> None:
    """Skip on a developer's machine without the browser; fail in CI, where it must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the browser test)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright import sync_api
    except ImportError:
        _unavailable("Playwright for Python is not installed (pip install playwright)")
    if shutil.which(CHROMIUM) is None:
        _unavailable(f"no Chromium at {CHROMIUM}; .ci/browser-deps installs it")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def test_the_page_in_chromium(ingest: ServedIngest, browser: Any) -> None:
    rows = _occurrences(ingest)
    checkout = rows["POST /checkout/7"]
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=ingest.base_url)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        # Without the key: refused with the sign-in form.
        refused = page.goto(f"{ingest.base_url}/")
        assert refused is not None and refused.status == 401
        page.fill("#key", READ_KEY)
        page.click("#sign-in")
        page.wait_for_selector("table.occurrences")
        assert _texts(page, "tr.occ a.op") == ["GET /inventory", "POST /checkout/7"]
        assert page.inner_text("#range") == "1–2 of 2 · page 1 of 1"
        page.screenshot(path=str(artifacts_dir() / "ingest-web-list.png"), full_page=True)

        # Filters: by status, then by operation.
        page.select_option("#f-status", "503")
        page.click("#f-apply")
        page.wait_for_url(re.compile(r".*status=503.*"))
        assert _texts(page, "tr.occ a.op") == ["GET /inventory"]
        page.click("a.clear")
        page.fill("#f-operation", "POST /checkout/7")
        page.click("#f-apply")
        page.wait_for_url(re.compile(r".*operation=POST.*"))
        assert _texts(page, "tr.occ a.op") == ["POST /checkout/7"]
        row = page.inner_text("tr.occ")
        for shown in ("500", "backend operation POST /checkout/7 returned HTTP 500"):
            assert shown in row
        for shown in ("2026.11.30-1", "9f1c2ab44d0e", "shop", "1×"):
            assert shown in row

        # The occurrence.
        page.click("tr.occ a.op")
        page.wait_for_selector("#exchanges")
        assert page.url == f"{ingest.base_url}/occurrences/{checkout['id']}"
        headings = _texts(page, "article.exchange h3")
        assert [re.sub(r"\s+", " ", h) for h in headings] == [
            f"#1 HTTP call 127.0.0.1:{_port(ingest, page)} GET /json",
            f"#2 HTTP call 127.0.0.1:{_port(ingest, page)} GET /query?token=$reproit&n=1",
            f"#3 HTTP call 127.0.0.1:{_port(ingest, page)} GET /sse",
            f"#4 HTTP call 127.0.0.1:{_port(ingest, page)} POST /echo",
            "#5 PG read pg SELECT n AS id, 'tea-' || n AS item, n * 1.5 AS price FROM "
            "generate_series(1, %s) AS n",
            "#6 PG write pg CREATE TEMP TABLE basket (id int)",
            "#7 PG read pg SELECT * FROM missing_prices WHERE order_id = %s",
        ]
        # Placeholders: the password in the input, the token in a URL.
        assert page.inner_text("#input .ph") == "$reproit redacted, string, 7 chars"
        assert "$reproit" in page.inner_text("#x2 .url mark.ph")
        # Streamed chunks, SQL rows as a table, the SQL error.
        assert _texts(page, "#x3 .chunk-size") == [f"{len(event)} B" for event in SSE_EVENTS]
        assert _texts(page, "#x5 table.rows th") == ["id", "item", "price"]
        assert _texts(page, "#x5 table.rows tbody tr") == [
            "1\ttea-1\t1.5",
            "2\ttea-2\t3.0",
            "3\ttea-3\t4.5",
        ]
        assert 'relation "missing_prices" does not exist' in page.inner_text("#x7 pre.err")
        # The recorded markup is shown as text; no script ran.
        assert XSS.replace('"', '\\"') in page.inner_text("#x4")
        assert dialogs == [] and errors == []
        assert page.inner_text("#return .status") == "500"
        assert "Complete" in page.inner_text("#completeness")
        assert "replaySeed" in page.inner_text("#envelope")

        # The replay command, copied by the button.
        capsule_file = f"{checkout['id']}.capsule.json"
        expected = (
            f"reproit-otel pull {checkout['id']} -o {capsule_file} --ingest {ingest.base_url}\n"
            f"reproit-otel check {capsule_file} --exec '{BOOT}'"
        )
        assert page.inner_text("#replay-command") == expected
        page.click("button.copy")
        page.wait_for_selector("button.copy.done")
        assert page.evaluate("navigator.clipboard.readText()") == expected
        # Beside it, the line that makes the pulled capsule a regression test.
        regression = f"reproit-otel regression {capsule_file} --exec '{BOOT}'"
        assert page.inner_text("#regression-command") == regression
        page.click("button[data-copy=regression-command]")
        page.wait_for_selector("button[data-copy=regression-command].done")
        assert page.evaluate("navigator.clipboard.readText()") == regression
        page.screenshot(path=str(artifacts_dir() / "ingest-web-occurrence.png"), full_page=True)

        # The capsule download is the capsule the API serves.
        with page.expect_download() as download_info:
            page.click("#capsule-link")
        download = download_info.value
        assert download.suggested_filename == capsule_file
        downloaded = Path(download.path()).read_bytes()
        served = httpx.get(
            f"{ingest.base_url}/v1/occurrences/{checkout['id']}/capsule",
            headers={"authorization": f"Bearer {READ_KEY}"},
        )
        assert downloaded == served.content
        assert load_capsule(downloaded.decode())["operation"] == "POST /checkout/7"
    finally:
        context.close()


def _texts(page: Any, selector: str) -> list[str]:
    return [text.strip() for text in page.locator(selector).all_inner_texts()]


def _port(ingest: ServedIngest, page: Any) -> str:
    url = page.inner_text("#x1 .url")
    match = re.match(r"http://127\.0\.0\.1:(\d+)/json", url)
    assert match is not None, url
    return match.group(1)
