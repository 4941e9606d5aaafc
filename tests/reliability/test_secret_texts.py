"""Secrets inside error texts and messages stay out of every artifact (one scrubber).

A real service (Flask behind werkzeug, psycopg2 against PostgreSQL, ``requests`` to a
loopback server) is captured while secrets ride in the places text rules must reach:

* a psycopg2 not-null violation whose ``Failing row contains (...)`` echoes parameters the
  request redacted (bound to secret columns), once with positional parameters and once with
  one tuple standing for the whole row (``VALUES %s``), and a unique violation whose
  ``DETAIL`` echoes a tuple item;
* an outbound ``multipart/form-data`` body with a password field;
* the exception the request raises: its message holds a dict repr, a JSON repr, ``token:``,
  ``Bearer``, a DSN and URL user info, and its cause is the psycopg2 error (whose echo only
  the original parameter values can scrub).

The uploaded batch, the capsule and the debug dump are searched for every planted value in
raw, URL-encoded, base64 and JSON-escaped form. A pytest run in capture mode whose failing
test's message holds the same kinds of secrets spools a capsule holding none of them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import psycopg2
import pytest
import requests
from flask import Flask, jsonify

from reproit_otel.capture.uploader import Uploader
from reproit_otel.redaction.core import placeholder
from reproit_otel.wire.capsule import capsule_from_batch, capsule_text
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.pytest_runs import SampleProject
from tests.integration.upstream import serving
from tests.reliability.harness import fetch, served

pytestmark = pytest.mark.postgres

MARKER = "visible-marker-c41a"
ROW_PASSWORD = "Zqrowpassword0101"
ROW_EMAIL = "zq.row.0102@example.com"
TUPLE_PASSWORD = "Zqtuplepassword0103"
TUPLE_EMAIL = "zq.tuple.0104@example.com"
FORM_PASSWORD = "Zqformpassword0105"
DICT_PASSWORD = "Zqdictpassword0106"
JSON_KEY = "Zqjsonapikey00107"
COLON_TOKEN = "Zqcolontoken00108"
BEARER = "eyJZqbearer000109"
DSN_PASSWORD = "Zqdsnpassword0110"
URL_TOKEN = "ghp_Zqurltoken0111"
PLANTED = (
    ROW_PASSWORD,
    ROW_EMAIL,
    TUPLE_PASSWORD,
    TUPLE_EMAIL,
    FORM_PASSWORD,
    DICT_PASSWORD,
    JSON_KEY,
    COLON_TOKEN,
    BEARER,
    DSN_PASSWORD,
    URL_TOKEN,
)
MESSAGE = (
    f"signup failed for {{'user': 'ada', 'password': '{DICT_PASSWORD}'}} "
    f'upstream {{"api_key": "{JSON_KEY}", "m": "{MARKER}"}} token: {COLON_TOKEN} '
    f"header Authorization: Bearer {BEARER} "
    f"db postgresql://admin:{DSN_PASSWORD}@db.internal:5432/app "
    f"repo https://{URL_TOKEN}@github.com/acme/app.git"
)


def forms(secret: str) -> list[str]:
    """``secret`` as it may sit in an artifact: raw, URL-encoded, JSON-escaped, base64 (at
    each of the three alignments a value can take inside a longer base64 text)."""
    found = {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + secret.encode("utf-8")).decode("ascii")
        inner = encoded[(shift * 4 + 2) // 3 + 1 : -4]  # characters that hold only the secret
        if len(inner) >= 8:
            found.add(inner)
    return sorted(found)


def leaks(texts: list[str]) -> list[str]:
    return [secret for secret in PLANTED for form in forms(secret) if any(form in t for t in texts)]


class _Echo(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(MARKER)))
        self.end_headers()
        self.wfile.write(MARKER.encode() if body else b"")


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with serving(_Echo) as base:
        yield base


@pytest.fixture
def members(postgres_dsn: str) -> Iterator[str]:
    connection = psycopg2.connect(postgres_dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS text_members")
        cursor.execute(
            "CREATE TABLE text_members (id int PRIMARY KEY, email text UNIQUE,"
            " password_hash text, name text NOT NULL)"
        )
        cursor.execute(
            "INSERT INTO text_members (id, email, password_hash, name) VALUES (1, %s, 'x', 'n')",
            (TUPLE_EMAIL,),
        )
    connection.close()
    yield postgres_dsn


def _failing_statements(dsn: str) -> None:
    connection = psycopg2.connect(dsn)
    try:
        with connection.cursor() as cursor:
            try:  # not-null violation: Failing row contains (5, email, password, null)
                cursor.execute(
                    "INSERT INTO text_members (id, email, password_hash, name)"
                    " VALUES (%s, %s, %s, %s)",
                    (5, ROW_EMAIL, ROW_PASSWORD, None),
                )
            except psycopg2.IntegrityError:
                connection.rollback()
            try:  # unique violation on a row given as one tuple: Key (email)=(...)
                cursor.execute(
                    "INSERT INTO text_members (id, email, password_hash, name) VALUES %s",
                    ((6, TUPLE_EMAIL, TUPLE_PASSWORD, "n"),),
                )
            except psycopg2.IntegrityError:
                connection.rollback()
            # the failure the request raises from: its echo can only be scrubbed with the
            # original values of the redacted parameters
            cursor.execute(
                "INSERT INTO text_members (id, email, password_hash, name) VALUES %s",
                ((7, ROW_EMAIL, ROW_PASSWORD, None),),
            )
    finally:
        connection.close()


def make_app(upstream: str, dsn: str) -> Flask:
    app = Flask("texts")

    @app.get("/signup/<marker>")
    def signup(marker: str) -> Any:
        requests.post(
            f"{upstream}/accounts",
            data={"user": "ada", "password": FORM_PASSWORD, "m": marker},
            files={"avatar": ("a.txt", marker.encode())},
            timeout=5,
        )
        try:
            _failing_statements(dsn)
        except psycopg2.IntegrityError as error:
            raise RuntimeError(MESSAGE) from error
        return "unreachable"

    @app.get("/quiet/<marker>")
    def quiet(marker: str) -> Any:
        # The error is caught and its text answered: the body echoes what the statement's
        # redaction hid, so the operation's other texts are scrubbed of those values too.
        try:
            _failing_statements(dsn)
        except psycopg2.IntegrityError as error:
            return jsonify({"error": str(error), "m": marker}), 500
        return "unreachable"

    return app


def _capture(upstream: str, members: str, tmp_path: Path, path: str) -> dict[str, Any]:
    ingest = LoopbackIngest()
    dump = tmp_path / "dump"
    environ = {
        "REPROIT_ENDPOINT": ingest.url,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
        "REPROIT_DEBUG_DUMP": str(dump),
    }
    try:
        with served(upstream, members, environ, app=make_app(upstream, members)) as service:
            assert fetch(service.base, "GET", path)[0] == 500
            [uploader] = [s for s in service.sinks() if isinstance(s, Uploader)]
            assert uploader.flush(20) is True
            [upload] = ingest.wait_for(1)
    finally:
        ingest.stop()
    body = upload.body.decode("utf-8")
    capsule = capsule_from_batch(json.loads(body))
    assert capsule is not None
    dumps = [file.read_text(encoding="utf-8") for file in sorted(dump.glob("*.json"))]
    return {"body": body, "capsule": capsule, "dumps": dumps}


@pytest.fixture
def captured(upstream: str, members: str, tmp_path: Path) -> dict[str, Any]:
    return _capture(upstream, members, tmp_path, f"/signup/{MARKER}")


def test_the_planted_forms_are_what_the_search_looks_for() -> None:
    # The search itself finds each form (a search that cannot find is no test).
    text = base64.b64encode(b"prefix:" + DICT_PASSWORD.encode()).decode()
    assert leaks([text]) == [DICT_PASSWORD]
    assert leaks([quote(f"x={URL_TOKEN}")]) == [URL_TOKEN]
    assert leaks([json.dumps({"m": f'"{BEARER}"'})]) == [BEARER]


def test_no_planted_secret_in_any_artifact(captured: dict[str, Any]) -> None:
    capsule = captured["capsule"]
    texts = [captured["body"], capsule_text(capsule), *captured["dumps"]]
    assert MARKER in captured["body"]
    assert captured["dumps"]
    assert leaks(texts) == []


def test_error_texts_keep_their_shape_with_the_secrets_replaced(captured: dict[str, Any]) -> None:
    exchanges = [e["exchange"] for e in captured["capsule"]["events"] if e["kind"] == "effect"]
    outbound, not_null, duplicate, raised = exchanges
    body = outbound["request"]["body"]
    assert 'name="password"\r\n\r\n$reproit\r\n' in body
    assert 'name="user"\r\n\r\nada\r\n' in body
    assert not_null["response"]["error"]["pgerror"].endswith(
        "DETAIL:  Failing row contains (5, $reproit, $reproit, null).\n"
    )
    [row] = duplicate["request"]["values"]
    keyed = [item["$reproit"] for item in row["v"][1:3]]
    # While capturing, each placeholder carries its character class and keyed identity.
    assert [(body.pop("class"), len(body.pop("id"))) for body in keyed] == [
        ("email", 24),
        ("alnum", 24),
    ]
    assert row == {
        "$pg": "tuple",
        "v": [6, placeholder(TUPLE_EMAIL), placeholder(TUPLE_PASSWORD), "n"],
    }
    assert duplicate["response"]["error"]["pgerror"].endswith(
        "DETAIL:  Key (email)=($reproit) already exists.\n"
    )
    assert raised["response"]["error"]["pgerror"].endswith(
        "DETAIL:  Failing row contains (7, $reproit, $reproit, null).\n"
    )
    [end] = [e for e in captured["capsule"]["events"] if e["kind"] == "return"]
    error = end["output"]["error"]
    assert error["message"] == (
        "signup failed for {'user': 'ada', 'password': '$reproit'} "
        f'upstream {{"api_key": "$reproit", "m": "{MARKER}"}} token: $reproit '
        "header Authorization: Bearer $reproit "
        "db postgresql://$reproit@db.internal:5432/app "
        "repo https://$reproit@github.com/acme/app.git"
    )
    cause = error["cause"]
    assert cause["type"] == "psycopg2.errors.NotNullViolation"
    assert cause["message"] == (
        'null value in column "name" of relation "text_members" violates not-null constraint\n'
        "DETAIL:  Failing row contains (7, $reproit, $reproit, null).\n"
    )


CI_TEST = f"""
def test_signup():
    settings = {{"user": "ada", "password": "{DICT_PASSWORD}"}}
    raise AssertionError(
        f"signup failed with {{settings}} token: {COLON_TOKEN} Bearer {BEARER} "
        "postgresql://admin:{DSN_PASSWORD}@db/app {MARKER}"
    )
"""


def test_a_ci_failure_text_is_scrubbed(tmp_path: Path) -> None:
    project = SampleProject(tmp_path, {"test_signup.py": CI_TEST}).setup()
    run = project.pytest(env={"REPROIT_CI_CAPTURE": "1"})
    assert run.exit_code == 1
    [capsule] = project.capsules().values()
    [end] = [e for e in capsule["events"] if e["kind"] == "return"]
    assert end["output"] == {
        "error": "signup failed with {'user': 'ada', 'password': '$reproit'} token: $reproit "
        f"Bearer $reproit postgresql://$reproit@db/app {MARKER}"
    }
    assert leaks([json.dumps(capsule), *run.markers]) == []


def test_a_response_body_echoing_the_error_is_scrubbed_of_the_originals(
    upstream: str, members: str, tmp_path: Path
) -> None:
    captured = _capture(upstream, members, tmp_path, f"/quiet/{MARKER}")
    capsule = captured["capsule"]
    assert leaks([captured["body"], capsule_text(capsule), *captured["dumps"]]) == []
    [end] = [e for e in capsule["events"] if e["kind"] == "return"]
    assert end["output"] == {
        "error": 'null value in column "name" of relation "text_members" violates not-null '
        "constraint\nDETAIL:  Failing row contains (7, $reproit, $reproit, null).\n",
        "m": MARKER,
    }
