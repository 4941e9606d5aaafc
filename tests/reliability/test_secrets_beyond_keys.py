"""Secrets that key names alone do not reach stay out of the capture, and replay still matches.

A real service (Flask behind werkzeug, ``requests`` to a loopback server, psycopg2 against
PostgreSQL) is captured with reproit-otel while it handles secrets the way services do:

* a configured secret value (``REPROIT_SECRET_VALUES``) in the inbound request path;
* a call that fails to connect to a URL carrying ``api_key=...`` (the transport error's
  message names the URL);
* an OAuth token request and its response as ``application/x-www-form-urlencoded``, a
  ``text/plain`` body that is JSON with a ``password`` in it, a redirect whose ``Location``
  carries ``#access_token=...``, a token used as the URL's user name, and headers named
  ``x-auth-key`` and ``ocp-apim-subscription-key``;
* SQL whose positional parameters bind to secret columns (``INSERT ... (email,
  password_hash)``, ``UPDATE ... SET token = %s``, ``WHERE api_key = %s``, ``executemany``),
  and a unique violation whose ``DETAIL`` echoes the e-mail address.

The uploaded batch bytes, the capsule projected from them and the debug dump hold none of the
planted values, and the exchanges hold exactly the redacted shapes. Replaying the capsule
in-process, the same calls with the same secrets are served (the live call is redacted as
the recorded one was), and a drifted call's DIVERGENCE line holds no planted value either.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests
from flask import Flask, jsonify

from reproit_otel.capture.uploader import Uploader
from reproit_otel.errors import DivergedError
from reproit_otel.redaction.core import placeholder
from reproit_otel.replay import install_replay, uninstall_replay
from reproit_otel.wire.capsule import capsule_from_batch, capsule_text
from reproit_otel.wire.standins import untagged
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.upstream import closed_port, serving
from tests.reliability.harness import fetch, served

pytestmark = pytest.mark.postgres

MARKER = "visible-marker-b7e2"
IN_PATH = "Zqpathsecret00001"  # configured: rides in the inbound path
CLIENT_SECRET = "Zqclientsecret0002"
ACCESS_TOKEN = "Zqaccesstoken00003"
TEXT_PASSWORD = "Zqtextpassword0004"
FRAGMENT_TOKEN = "Zqfragmenttoken005"
USER_TOKEN = "ghp_Zqusertoken00006"
AUTH_KEY = "Zqauthkey000000007"
SUBSCRIPTION = "Zqsubscription0008"
API_KEY = "Zqapikey0000000009"
EMAIL = "zq.ada.0010@example.com"
PASSWORD_HASH = "Zqpasswordhash0011"
TOKEN = "Zqtoken00000000012"
LOOKUP_KEY = "Zqlookupkey0000013"
MANY_PASSWORDS = ("Zqmanypassword0014", "Zqmanypassword0015")
PLANTED = (
    IN_PATH,
    CLIENT_SECRET,
    ACCESS_TOKEN,
    TEXT_PASSWORD,
    FRAGMENT_TOKEN,
    USER_TOKEN,
    AUTH_KEY,
    SUBSCRIPTION,
    API_KEY,
    EMAIL,
    PASSWORD_HASH,
    TOKEN,
    LOOKUP_KEY,
    *MANY_PASSWORDS,
)
FORM = "application/x-www-form-urlencoded"


class _Handler(BaseHTTPRequestHandler):
    """``POST`` echoes the body with its content type; ``GET /authorize`` redirects."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        location = f"https://app.example/cb#access_token={FRAGMENT_TOKEN}&state={MARKER}"
        self._answer(302, {"location": location, "content-type": "text/plain"}, b"moved")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self._answer(200, {"content-type": self.headers.get("content-type") or ""}, body)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with serving(_Handler) as base:
        yield base


@pytest.fixture
def accounts(postgres_dsn: str) -> Iterator[str]:
    connection = psycopg2.connect(postgres_dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS beyond_accounts")
        cursor.execute(
            "CREATE TABLE beyond_accounts (id serial PRIMARY KEY, email text UNIQUE,"
            " password_hash text, token text, api_key text)"
        )
        cursor.execute(
            "INSERT INTO beyond_accounts (email, api_key) VALUES (%s, %s)",
            (EMAIL, LOOKUP_KEY),
        )
    connection.close()
    yield postgres_dsn


def _outbound(upstream: str) -> list[Any]:
    """The outbound HTTP calls; what the application saw of each."""
    seen: list[Any] = []
    token = requests.post(
        f"{upstream}/oauth/token",
        data={"grant_type": "client_credentials", "client_secret": CLIENT_SECRET, "m": MARKER},
        headers={"x-auth-key": AUTH_KEY, "ocp-apim-subscription-key": SUBSCRIPTION},
        timeout=5,
    )
    seen.append(token.text)
    granted = requests.post(
        f"{upstream}/grant",
        data=f"access_token={ACCESS_TOKEN}&expires_in=3600",
        headers={"content-type": FORM},
        timeout=5,
    )
    seen.append(granted.text)
    text = requests.post(
        f"{upstream}/notes",
        data=json.dumps({"password": TEXT_PASSWORD, "note": MARKER}),
        headers={"content-type": "text/plain"},
        timeout=5,
    )
    seen.append(text.text)
    moved = requests.get(
        f"https://{USER_TOKEN}@{upstream.removeprefix('http://')}/authorize".replace(
            "https://", "http://"
        ),
        allow_redirects=False,
        timeout=5,
    )
    seen.append(moved.headers["location"])
    return seen


def _refused() -> str:
    try:
        requests.get(f"http://127.0.0.1:{closed_port()}/rates?api_key={API_KEY}", timeout=5)
    except requests.exceptions.ConnectionError as error:
        return type(error).__name__
    raise AssertionError("the closed port answered")


def _statements(dsn: str) -> list[Any]:
    seen: list[Any] = []
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE beyond_accounts SET token = %s WHERE api_key = %s RETURNING id",
                (TOKEN, LOOKUP_KEY),
            )
            seen.append(cursor.rowcount)
            cursor.executemany(
                "INSERT INTO beyond_accounts (email, password_hash) VALUES (%s, %s)",
                [(f"{MARKER}-{n}@example.org", secret) for n, secret in enumerate(MANY_PASSWORDS)],
            )
            try:
                cursor.execute(
                    "INSERT INTO beyond_accounts (email, password_hash) VALUES (%s, %s)",
                    (EMAIL, PASSWORD_HASH),
                )
            except psycopg2.IntegrityError as error:
                seen.append(error.pgcode)
        connection.rollback()
    finally:
        connection.close()
    return seen


def make_app(upstream: str, dsn: str) -> Flask:
    app = Flask("beyond")

    @app.get("/fail/<path:rest>")
    def fail(rest: str) -> Any:
        seen = [_refused(), *_outbound(upstream), *_statements(dsn)]
        return jsonify({"error": f"failed {MARKER}", "calls": len(seen)}), 500

    return app


def _environ(endpoint: str, dump: Path) -> dict[str, str]:
    return {
        "REPROIT_ENDPOINT": endpoint,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
        "REPROIT_SECRET_VALUES": json.dumps([IN_PATH]),
        "REPROIT_DEBUG_DUMP": str(dump),
    }


def _leaks(texts: list[str]) -> list[str]:
    return [secret for secret in PLANTED if any(secret in text for text in texts)]


@pytest.fixture
def captured(upstream: str, accounts: str, tmp_path: Path) -> dict[str, Any]:
    ingest = LoopbackIngest()
    dump = tmp_path / "dump"
    try:
        with served(
            upstream, accounts, _environ(ingest.url, dump), app=make_app(upstream, accounts)
        ) as service:
            status = fetch(service.base, "GET", f"/fail/{IN_PATH}/{MARKER}")[0]
            assert status == 500
            [uploader] = [s for s in service.sinks() if isinstance(s, Uploader)]
            assert uploader.flush(20) is True
            [upload] = ingest.wait_for(1)
    finally:
        ingest.stop()
    body = upload.body.decode("utf-8")
    capsule = capsule_from_batch(json.loads(body))
    assert capsule is not None
    dumps = [path.read_text(encoding="utf-8") for path in sorted(dump.glob("*.json"))]
    return {"body": body, "capsule": capsule, "dumps": dumps}


def _without_identities(value: Any) -> Any:
    """``value`` with the capture's keyed ``class``/``id`` left out of every placeholder (the
    key is the capturing process's own, so a test cannot compute them)."""
    if isinstance(value, dict):
        body = value.get("$reproit")
        if len(value) == 1 and isinstance(body, dict) and body.get("redacted") is True:
            assert "id" in body, value
            return {"$reproit": {k: v for k, v in body.items() if k not in ("class", "id")}}
        return {k: _without_identities(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_identities(item) for item in value]
    return value


def _exchanges(capsule: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _without_identities(e["exchange"]) for e in capsule["events"] if e.get("kind") == "effect"
    ]


def test_no_planted_secret_leaves_the_process(captured: dict[str, Any], upstream: str) -> None:
    capsule = captured["capsule"]
    texts = [captured["body"], capsule_text(capsule), *captured["dumps"]]
    assert MARKER in captured["body"]
    assert captured["dumps"]
    assert _leaks(texts) == []
    assert capsule["operation"] == f"GET /fail/$reproit/{MARKER}"


def test_exchanges_hold_the_redacted_shapes(captured: dict[str, Any], upstream: str) -> None:
    refused, token, granted, text, moved, update, many, duplicate = _exchanges(captured["capsule"])
    assert refused["request"]["url"].endswith("/rates?api_key=$reproit")
    message = refused["response"]["error"]["message"]
    assert "/rates?api_key=$reproit " in message
    # The form's text placeholder carries the secret's identity while capturing.
    assert untagged(token["request"]["body"]) == (
        f"grant_type=client_credentials&client_secret=$reproit&m={MARKER}"
    )
    assert token["request"]["body"] != untagged(token["request"]["body"])
    assert token["response"]["body"] == token["request"]["body"]
    headers = token["request"]["headers"]
    assert headers["x-auth-key"] == placeholder(AUTH_KEY)
    assert headers["ocp-apim-subscription-key"] == placeholder(SUBSCRIPTION)
    assert untagged(granted["response"]["body"]) == "access_token=$reproit&expires_in=3600"
    assert text["request"]["body"] == {"password": placeholder(TEXT_PASSWORD), "note": MARKER}
    host = upstream.removeprefix("http://")
    assert moved["request"]["url"] == f"http://$reproit@{host}/authorize"
    assert moved["response"]["headers"]["location"] == (
        f"https://app.example/cb#access_token=$reproit&state={MARKER}"
    )
    assert update["request"]["values"] == [placeholder(TOKEN), placeholder(LOOKUP_KEY)]
    # ``email`` is a secret name too: every row loses both values.
    assert many["request"]["values"] == [
        [placeholder(f"{MARKER}-{n}@example.org"), placeholder(secret)]
        for n, secret in enumerate(MANY_PASSWORDS)
    ]
    assert duplicate["request"]["values"] == [placeholder(EMAIL), placeholder(PASSWORD_HASH)]
    error = duplicate["response"]["error"]
    assert error["code"] == "23505"
    assert error["pgerror"] == (
        'ERROR:  duplicate key value violates unique constraint "beyond_accounts_email_key"\n'
        "DETAIL:  Key (email)=($reproit) already exists.\n"
    )


def test_the_same_calls_are_served_in_replay_and_a_drifted_one_leaks_nothing(
    captured: dict[str, Any],
    upstream: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("REPROIT_SECRET_VALUES", json.dumps([IN_PATH]))
    monkeypatch.delenv("REPROIT_TOOLS", raising=False)
    path = tmp_path / "capsule.json"
    path.write_text(capsule_text(captured["capsule"]), encoding="utf-8")
    install_replay(path)
    try:
        assert _refused() == "ConnectionError"
        seen = _outbound(upstream)
        # Replay serves stand-ins where the recording has placeholders: made-up text of the
        # secret's length and class, never the secret and never the placeholder itself.
        served = re.fullmatch(
            rf"grant_type=client_credentials&client_secret=(\w+)&m={MARKER}", seen[0]
        )
        assert served is not None, seen[0]
        assert len(served[1]) == len(CLIENT_SECRET) and served[1] != CLIENT_SECRET
        moved = re.fullmatch(rf"https://app\.example/cb#access_token=(\w+)&state={MARKER}", seen[3])
        assert moved is not None, seen[3]
        assert moved[1] != FRAGMENT_TOKEN
        assert not any("$reproit" in str(text) for text in seen)
        assert _statements("host=db.internal dbname=shop") == [1, "23505"]
        with pytest.raises(DivergedError):
            connection = psycopg2.connect("host=db.internal dbname=shop")
            connection.cursor().execute(
                "UPDATE beyond_accounts SET token = %s WHERE api_key = %s", (TOKEN, MARKER)
            )
    finally:
        uninstall_replay()
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("REPROIT:DIVERGENCE ")]
    assert len(lines) == 1
    report = json.loads(lines[0].removeprefix("REPROIT:DIVERGENCE "))
    assert report["got"]["text"] == "UPDATE beyond_accounts SET token = %s WHERE api_key = %s"
    assert report["got"]["values"] == [placeholder(TOKEN), placeholder(MARKER)]
    assert _leaks([err]) == []
