"""Flask-Login + Flask-WTF, zero code: a signed-in user's failing form and JSON POSTs.

The notes site in ``apps/notes_flask`` (written the way the Flask, Flask-Login and Flask-WTF
tutorials write one) runs under gunicorn and the real ``opentelemetry-instrument`` on a real
PostgreSQL. The user signs in with the login form, then sends a CSRF-protected note form and
a JSON note with the ``X-CSRFToken`` header; both hit the planted bug (500). With PostgreSQL
stopped and another secret key, ``reproit-otel check`` replays each as the same user:
reproduced, then fixed with the fix. No password, cookie or CSRF token is in any artifact.
The same runs under Flask-Login's ``strong`` session protection with the user's requests sent
from another address than the replay's (127.0.0.2): the client identifier the session is
bound to is served from the recording, so the replayed request is still the user's.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest

from tests.integration.auth_stacks import (
    PASSWORD,
    SECRET_KEY,
    LoggedInRun,
    Scenario,
    Sent,
    assert_no_secret,
    hidden_field,
    recorded_checks,
    run_logged_in,
)
from tests.integration.stack_support import Request, Stack, dumped, exchanges

APP = Path(__file__).resolve().parent / "apps" / "notes_flask"
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))


def init(env: Mapping[str, str]) -> None:
    subprocess.run(
        [sys.executable, "app.py", "init", "ada", PASSWORD],
        cwd=APP,
        env=dict(env),
        check=True,
        timeout=120,
    )


STACK = Stack(
    name="notes-flask",
    cwd=APP,
    serve=(GUNICORN, "--bind", "127.0.0.1:{port}", "app:app"),
    healthy=Request("GET", "/"),
    failing=lambda identifier, kind: Request("GET", "/"),
    prepare=init,
    env={"NOTES_SECRET_KEY": "the-replaying-laptop-has-another-key"},
)


def session_csrf_token(cookie: str) -> str:
    """The raw CSRF token Flask-WTF keeps in the (signed, not encrypted) session cookie."""
    compressed = cookie.startswith(".")
    data = cookie.removeprefix(".").split(".")[0]
    raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    token: str = json.loads(zlib.decompress(raw) if compressed else raw)["csrf_token"]
    return token


def sign_in_and_fail(client: httpx.Client) -> Scenario:
    done = Scenario()
    login_token = hidden_field(client.get("/login").text, "csrf_token")
    signed_in = client.post(
        "/login", data={"csrf_token": login_token, "username": "ada", "password": PASSWORD}
    )
    assert (signed_in.status_code, signed_in.headers["location"]) == (302, "/notes/new")
    page = client.get("/notes/new")
    assert page.status_code == 200, page.text
    form_token = hidden_field(page.text, "csrf_token")
    meta = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert meta is not None
    cookie = client.cookies["session"]
    done.sent["form"] = Sent(
        "POST",
        "/notes",
        client.post(
            "/notes",
            data={"csrf_token": form_token, "title": "Groceries", "body": "milk eggs bread"},
        ),
    )
    done.sent["json"] = Sent(
        "POST",
        "/api/notes",
        client.post(
            "/api/notes",
            json={"title": "Reading", "body": "one line only"},
            headers={"X-CSRFToken": meta.group(1)},
        ),
    )
    done.keep("csrf", login_token, form_token, meta.group(1), session_csrf_token(cookie))
    done.keep("session cookie", cookie)
    return done


@pytest.fixture(scope="module", params=["basic", "strong"])
def signed_in(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoggedInRun]:
    protection = request.param
    production = {"NOTES_SECRET_KEY": SECRET_KEY}
    stack = dataclasses.replace(STACK, env={**STACK.env, "NOTES_SESSION_PROTECTION": protection})
    workdir = tmp_path_factory.mktemp(f"notes-flask-{protection}")
    address = "127.0.0.2" if protection == "strong" else "127.0.0.1"
    with run_logged_in(stack, workdir, sign_in_and_fail, production, address) as run:
        yield run


@pytest.mark.parametrize("kind", ["form", "json"])
def test_the_signed_in_failure_is_captured_with_its_credential_checks(
    signed_in: LoggedInRun, kind: str
) -> None:
    capture = signed_in.run.captures[kind]
    assert capture.status == 500, capture.body
    assert capture.capsule["events"][-1]["status"] == 500
    # Flask's session cookie, then Flask-WTF's token: both checked by itsdangerous; then
    # Flask-Login compares the client's identifier with the session's.
    assert recorded_checks(capture.capsule) == [
        "itsdangerous.loads",
        "itsdangerous.loads",
        "flask_login.session_identifier",
    ]
    session, token, client = [e for e in exchanges(capture.capsule) if e["protocol"] == "invoke"]
    assert [session["request"]["input"]["salt"], token["request"]["input"]["salt"]] == [
        "cookie-session",
        "wtf-csrf-token",
    ]
    # The raw CSRF token kept in the session and the one the form's token carries are one
    # secret: one identity, so replay gives both the same stand-in and the comparison passes.
    kept = session["response"]["data"]["payload"]["csrf_token"]["$reproit"]
    carried = token["response"]["data"]["token"]["$reproit"]
    assert (kept["type"], kept["length"], kept["class"]) == ("string", 40, "hex")
    assert re.fullmatch(r"[0-9a-f]{24}", kept["id"])
    assert carried == kept
    # The identifier (a hash of the client's address) and the session's copy: one secret.
    bound = session["response"]["data"]["payload"]["_id"]["$reproit"]
    assert (bound["length"], bound["class"]) == (128, "hex")
    assert client["response"] == {"ok": True, "data": {"token": {"$reproit": bound}}}


def test_no_password_cookie_or_csrf_token_reaches_the_ingest(signed_in: LoggedInRun) -> None:
    assert_no_secret(signed_in)


@pytest.mark.parametrize("kind", ["form", "json"])
def test_the_replay_reproduces_the_failure_as_the_same_user(
    signed_in: LoggedInRun, kind: str
) -> None:
    code, result = signed_in.run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


@pytest.mark.parametrize(("kind", "status"), [("form", 302), ("json", 201)])
def test_the_fixed_code_replays_as_fixed(signed_in: LoggedInRun, kind: str, status: int) -> None:
    code, result = signed_in.run.check(kind, NOTES_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    assert result["observedResult"]["status"] == status
