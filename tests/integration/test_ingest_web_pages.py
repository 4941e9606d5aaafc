"""The web page's HTML over the real stores (SQLite and PostgreSQL), in process.

Batches are written straight into the store, so each test can hold exactly the recorded
values it is about: hostile markup everywhere a recorded string is shown, placeholders, bodies
kept by identity, truncated rows and streams, partial capabilities, an occurrence seen only
over OTLP. The browser test (``test_ingest_web.py``) covers a capture from a real request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.ingest.app import create_app
from reproit_otel.ingest.facts import batch_facts, server_span_facts
from reproit_otel.ingest.store import OccurrenceFacets, Store, open_store
from reproit_otel.ingest.webauth import COOKIE_NAME, SESSION_SECONDS, ReadKeys
from reproit_otel.wire.canonical import canonical_json
from tests.integration.pipeline_support import ServedASGI
from tests.pgserver import fresh_database

KEY = "k-ingest"
EVIL = "<script>alert(1)</script>"
PLACEHOLDER = {"$reproit": {"redacted": True, "type": "string", "length": 7}}
IDENTITY = {"bodyBytes": 10000, "bodySha256": "ab" * 32, "truncated": True}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        opened = open_store(f"sqlite:///{tmp_path / 'ingest.db'}")
    else:
        opened = open_store(fresh_database(request.getfixturevalue("postgres_dsn")))
    yield opened
    opened.close()


def _replayable(value: Any) -> dict[str, Any]:
    return {"representation": "replayable", "value": value, "redaction": "redacted-at-source"}


def _effect(sequence: int, effect: str, resource: str, key: str, exchange: Any) -> dict[str, Any]:
    return {
        "sequence": sequence,
        "kind": "effect",
        "effect": effect,
        "resource": resource,
        "key": key,
        "exchange": exchange,
    }


def hostile_batch(operation: str = f"GET /x{EVIL}") -> dict[str, Any]:
    """A batch whose every shown string carries markup, plus placeholders and identities."""
    http = {
        "protocol": "http",
        "request": {
            "method": "POST",
            "url": f"http://up/{EVIL}?token=$reproit",
            "headers": {f"x-{EVIL}": EVIL, "authorization": PLACEHOLDER},
            "body": {EVIL: [EVIL, 1, None, True]},
        },
        "response": {
            "status": 200,
            "headers": {"content-type": "text/event-stream"},
            "body": f"data: {EVIL}\n\n",
            "stream": {"chunks": [4, 5], "truncated": True},
        },
    }
    big = {
        "protocol": "http",
        "request": {"method": "GET", "url": "http://up/big"},
        "response": {"status": 200, **IDENTITY},
    }
    sql = {
        "protocol": "pg",
        "request": {"text": f"SELECT '{EVIL}'", "values": [EVIL]},
        "response": {
            "command": "SELECT 65",
            "rowCount": 65,
            "rows": [{EVIL: EVIL, "email": PLACEHOLDER, "n": {"$pg": "decimal", "v": "1.50"}}],
            "truncated": True,
            "columns": [[EVIL, 25], ["email", 25], ["n", 1700]],
        },
    }
    failed_sql = {
        "protocol": "pg",
        "request": {"text": "SELECT 1/0"},
        "response": {"error": {"message": f"division {EVIL}", "code": "22012"}},
    }
    invoke = {
        "protocol": "invoke",
        "request": {"tool": "imap", "op": "fetch", "input": {"q": EVIL}},
        "response": {"ok": True, "data": {"subject": EVIL}},
    }
    events: list[dict[str, Any]] = [
        {"kind": "operation-start", "name": operation},
        {
            "kind": "trigger",
            "trigger": "http-request",
            "subject": operation,
            "value": _replayable(
                {"body": {"password": PLACEHOLDER, "note": EVIL}, "query": {"q": [EVIL]}}
            ),
        },
        {
            "kind": "checkpoint",
            "name": "determinism-envelope",
            "attributes": {"observedAtMs": 1790000000123, "tz": EVIL, "replaySeed": "0" * 16},
        },
        {
            "kind": "dependency",
            "system": "service",
            "operation": "call",
            "subject": "up",
            "value": _replayable(_effect(1, "call", "up", f"POST /{EVIL}", http)),
        },
        {
            "kind": "dependency",
            "system": "service",
            "operation": "call",
            "subject": "up",
            "value": _replayable(_effect(2, "call", "up", "GET /big", big)),
        },
        {
            "kind": "state-access",
            "state": "database",
            "operation": "read",
            "subject": "pg",
            "value": _replayable(_effect(3, "read", "pg", f"SELECT '{EVIL}'", sql)),
        },
        {
            "kind": "state-access",
            "state": "database",
            "operation": "read",
            "subject": "pg",
            "value": _replayable(_effect(4, "read", "pg", "SELECT 1/0", failed_sql)),
        },
        {
            "kind": "dependency",
            "system": "service",
            "operation": "call",
            "subject": "imap",
            "value": _replayable(_effect(5, "call", "imap", "imap fetch", invoke)),
        },
        {
            "kind": "effect",
            "effect": "emit",
            "subject": "reproit-oracle",
            "value": {"representation": "structural", "shape": {"key": EVIL}},
        },
        {
            "kind": "effect",
            "effect": "operation-return",
            "subject": "operation-return",
            "value": _replayable(
                {
                    "kind": "return",
                    "sequence": 6,
                    "status": 500,
                    "success": False,
                    "effectsComplete": True,
                    "output": {"error": EVIL},
                }
            ),
        },
        {"kind": "operation-end", "name": operation, "outcome": "failed"},
        {
            "kind": "observation",
            "failure": {
                "observation": "exception",
                "authority": "runtime-diagnosis",
                "summary": f"backend operation {operation} returned HTTP 500",
                "signature": f"backend-server-error:{operation}",
                "observationPoint": operation,
                "artifactIds": [],
            },
        },
    ]
    return {
        "version": 1,
        "batchId": "cb-python-otel-1790000000000-1",
        "projectId": "shop",
        "sessionId": "cap-1",
        "emitter": {"id": "backend-python-otel", "kind": "runtime-sdk"},
        "deployment": {"version": "7", "commit": "abc"},
        "observedAt": "2026-09-21T13:33:20.123Z",
        "capabilities": [
            {"capability": "http", "completeness": "complete"},
            {
                "capability": "network",
                "completeness": "partial",
                "detail": f"2 effect event(s) dropped {EVIL}",
            },
        ],
        "events": [
            {"id": f"evt_{n}", "sequence": n, "event": event}
            for n, event in enumerate(events, start=1)
        ],
        "artifacts": [],
    }


def _record(store: Store, batch: dict[str, Any]) -> str:
    facts = batch_facts(batch)
    return store.record_batch(batch, facts, body=canonical_json(batch)).occurrence_id


@contextmanager
def _served(store: Store, **options: Any) -> Iterator[httpx.Client]:
    """The ingest application over ``store`` behind uvicorn on a loopback port."""
    served = ServedASGI(create_app(store, **options))
    try:
        with httpx.Client(base_url=served.base) as client:
            yield client
    finally:
        served.stop()


def _client(store: Store, **options: Any) -> Any:
    return _served(store, api_keys=[KEY], **options)


def _get(client: httpx.Client, path: str) -> str:
    answer = client.get(path, headers={"authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200, answer.text
    return answer.text


def test_every_recorded_string_is_escaped(store: Store) -> None:
    occurrence = _record(store, hostile_batch())
    with _client(store) as client:
        listed, page = _get(client, "/"), _get(client, f"/occurrences/{occurrence}")
    for html in (listed, page):
        tags = re.findall(r"<(script|img|iframe)\b[^>]*>", html)
        assert tags == ["script"]  # the page's own web.js
        assert '<script src="/static/web.js" defer></script>' in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # title, heading, summary, signature; input body and query; the HTTP call's key, URL,
    # header name and value, body key and item, response body; the SQL key, text, parameter,
    # column, cell and error; the invoke input and data; the structural shape; the output;
    # the envelope's tz; the capability detail.
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 26


def test_placeholders_identities_and_truncation_are_marked(store: Store) -> None:
    occurrence = _record(store, hostile_batch("GET /marked"))
    with _client(store) as client:
        page = _get(client, f"/occurrences/{occurrence}")
    badge = (
        '<span class="ph" title="removed at the source; replay accepts any value here">'
        "$reproit <small>redacted, string, 7 chars</small></span>"
    )
    # The input's password, the authorization header and the email column.
    assert page.count(badge) == 3
    assert '?token=<mark class="ph" title="secret removed at the source">$reproit</mark>' in page
    assert (
        '<span class="trunc" title="over the 8192-byte budget: only its size and digest were '
        f'recorded">truncated: 10000 bytes not recorded <small>sha256 {"ab" * 32}</small></span>'
    ) in page
    assert "more than 64 rows: only the first 64 were recorded" in page
    assert "more than 128 chunks: the rest were counted, not recorded" in page
    assert '<span class="pg" title="PostgreSQL decimal">1.50</span>' in page
    assert '<b>network</b> <span class="pill">partial</span>' in page
    assert "<b>Partial capture.</b>" in page
    assert "not replayable: recorded as a shape only" in page
    assert '<pre class="code err">division &lt;script&gt;' in page
    assert "(2026-09-21T14:13:20.123Z)" in page
    # Without --replay-exec the boot command is a stand-in the reader is told to replace.
    assert (
        f"reproit-otel check {occurrence}.capsule.json --exec "
        "&#x27;&lt;command that starts the service on $PORT&gt;&#x27;"
    ) in page
    assert "Replace the <code>--exec</code> command" in page
    # The regression command beside it, with its own copy button.
    assert (
        '<div class="command"><pre id="regression-command">'
        f"reproit-otel regression {occurrence}.capsule.json --exec "
        "&#x27;&lt;command that starts the service on $PORT&gt;&#x27;</pre>"
        '<button type="button" class="copy" data-copy="regression-command">Copy</button></div>'
    ) in page


def test_facets_and_filters(store: Store) -> None:
    for n, (operation, status) in enumerate(
        [("GET /a", 500), ("GET /a", 500), ("GET /b", 502), ("POST /c", 500)]
    ):
        facts = server_span_facts(
            project_id="shop" if n < 3 else "admin",
            operation=operation,
            status=status,
            build=None,
            commit=None,
        )
        store.record_server_span(facts, trace_id=f"t{n}", span_id="s", received_ms=1000 + n)
    assert store.occurrence_facets() == OccurrenceFacets(
        operations=[("GET /a", 1), ("GET /b", 1), ("POST /c", 1)],
        statuses=[(500, 2), (502, 1)],
        projects=[("shop", 2), ("admin", 1)],
        truncated=False,
    )
    with _client(store) as client:
        listed = _get(client, "/?status=500")
        narrowed = _get(client, "/?status=500&project=shop")
        empty = _get(client, "/?operation=GET+/none")
        beyond = _get(client, "/?page=9")
    assert re.findall(r'<a class="op" href="[^"]*">([^<]*)</a>', listed) == ["POST /c", "GET /a"]
    assert '<option value="500" selected>500 (2)</option>' in listed
    assert '<option value="admin">admin (1)</option>' in listed
    assert re.findall(r'<a class="op" href="[^"]*">([^<]*)</a>', narrowed) == ["GET /a"]
    assert "No occurrence matches these filters." in empty
    assert '<span id="range">none of 3 · page 9 of 1</span> <a rel="prev" href="/?page=8">' in (
        beyond
    )


def test_an_occurrence_seen_only_over_otlp(store: Store) -> None:
    facts = server_span_facts(
        project_id="shop", operation="GET /span", status=503, build="9", commit=None
    )
    occurrence = store.record_server_span(facts, trace_id="t", span_id="s").occurrence_id
    with _client(store) as client:
        page = _get(client, f"/occurrences/{occurrence}")
        capsule = client.get(
            f"/occurrences/{occurrence}/capsule", headers={"authorization": f"Bearer {KEY}"}
        )
        unknown = client.get("/occurrences/occ_nope", headers={"authorization": f"Bearer {KEY}"})
    assert "it carries no exchanges, so there is no capsule to replay" in page
    assert ("replay-command" in page, "regression-command" in page) == (False, False)
    assert capsule.status_code == 404
    assert unknown.status_code == 404


def test_an_ingest_without_keys_serves_no_page(tmp_path: Path) -> None:
    opened = open_store(f"sqlite:///{tmp_path / 'open.db'}")
    try:
        with _served(opened) as client:
            listed = client.get("/")
            assert listed.status_code == 401
            assert "reproit-otel serve --api-key KEY" in listed.text
            assert client.get("/occurrences/occ_x").status_code == 401
            assert client.get("/occurrences/occ_x/capsule").status_code == 401
            assert client.post("/login", data={"key": "anything"}).status_code == 401
            # The API itself stays open on a keyless ingest, as before.
            assert client.get("/v1/occurrences").status_code == 200
    finally:
        opened.close()


def test_read_only_keys_and_web_off(tmp_path: Path) -> None:
    opened = open_store(f"sqlite:///{tmp_path / 'keys.db'}")
    try:
        reader = {"authorization": "Bearer reader"}
        with _served(opened, read_keys=["reader"]) as client:
            # Sending stays open (no ingest key), reading needs the read key.
            assert client.get("/v1/occurrences").status_code == 401
            assert client.get("/").status_code == 401
            assert client.get("/v1/occurrences", headers=reader).status_code == 200
            assert client.get("/", headers=reader).status_code == 200
        with _served(opened, api_keys=[KEY], web=False) as api_only:
            bearer = {"authorization": f"Bearer {KEY}"}
            assert api_only.get("/", headers=bearer).status_code == 404
    finally:
        opened.close()


def test_session_cookies_expire_and_follow_the_keys() -> None:
    now = [1_800_000_000.0]
    keys = ReadKeys(["a", "b"], clock=lambda: now[0])
    cookie = keys.session_for("b")
    assert keys.allowed({}, {COOKIE_NAME: cookie}) is True
    assert ReadKeys(["a"], clock=lambda: now[0]).session_valid(cookie) is False
    assert keys.session_valid(cookie.replace(".", ".0", 1)[:-1]) is False
    now[0] += SESSION_SECONDS + 1
    assert keys.session_valid(cookie) is False
    assert keys.allowed({"authorization": "Bearer a"}, {}) is True
    assert keys.allowed({"authorization": "Bearer c"}, {}) is False
