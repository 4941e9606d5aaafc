"""Django session login + CSRF, and DRF TokenAuthentication, zero code, under runserver.

The notes project in ``apps/notes_django`` (``startproject`` settings, ``LoginView``, a
``ModelForm`` with ``{% csrf_token %}``, a DRF ``APIView`` behind ``TokenAuthentication``, hardened
to compare the stored key with the presented one, and ``obtain_auth_token``) runs under
``manage.py runserver`` and the real
``opentelemetry-instrument`` on a real PostgreSQL. The user signs in with the login form and
posts the note form; an API client gets a token from ``/api/token/`` and posts a note with
``Authorization: Token``. Both hit the planted bug (500). With PostgreSQL stopped and another
``SECRET_KEY``, ``reproit-otel check`` replays each as the same user: reproduced, then fixed.
No password, session or CSRF cookie, form token or API token is in any artifact.

The token is *looked up*: replay sends a stand-in in ``Authorization``, and the served
``authtoken_token`` row carries the same stand-in as its ``key`` (one identity, one
stand-in), so the hardened comparison passes and the request reaches the planted bug.
"""

from __future__ import annotations

import subprocess
import sys
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
from tests.integration.stack_support import Request, Stack, dumped

APP = Path(__file__).resolve().parent / "apps" / "notes_django"
SETTINGS = {"DJANGO_SETTINGS_MODULE": "notes_site.settings"}


def prepare(env: Mapping[str, str]) -> None:
    for command in (
        ["migrate", "--verbosity", "0"],
        [
            "shell",
            "-c",
            "import os; from django.contrib.auth.models import User; "
            "User.objects.create_user('ada', password=os.environ['NOTES_PASSWORD'])",
        ],
    ):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=APP,
            env={**env, "NOTES_PASSWORD": PASSWORD},
            check=True,
            timeout=120,
        )


STACK = Stack(
    name="notes-django",
    cwd=APP,
    serve=(sys.executable, "manage.py", "runserver", "--noreload", "127.0.0.1:{port}"),
    healthy=Request("GET", "/"),
    failing=lambda identifier, kind: Request("GET", "/"),
    prepare=prepare,
    env={**SETTINGS, "NOTES_SECRET_KEY": "the-replaying-laptop-has-another-key"},
)


def sign_in_and_fail(client: httpx.Client) -> Scenario:
    done = Scenario()
    login_token = hidden_field(client.get("/accounts/login/").text, "csrfmiddlewaretoken")
    login_cookie = client.cookies["csrftoken"]
    signed_in = client.post(
        "/accounts/login/",
        data={"csrfmiddlewaretoken": login_token, "username": "ada", "password": PASSWORD},
    )
    assert (signed_in.status_code, signed_in.headers["location"]) == (302, "/notes/new/")
    page = client.get("/notes/new/")
    assert page.status_code == 200, page.text
    form_token = hidden_field(page.text, "csrfmiddlewaretoken")
    done.sent["form"] = Sent(
        "POST",
        "/notes/new/",
        client.post(
            "/notes/new/",
            data={"csrfmiddlewaretoken": form_token, "title": "Groceries", "body": "milk eggs"},
        ),
    )
    done.keep("csrf", login_token, login_cookie, form_token, client.cookies["csrftoken"])
    done.keep("session cookie", client.cookies["sessionid"])
    with httpx.Client(base_url=client.base_url, timeout=30) as api:
        token = api.post("/api/token/", data={"username": "ada", "password": PASSWORD})
        assert token.status_code == 200, token.text
        key = token.json()["token"]
        done.sent["token"] = Sent(
            "POST",
            "/api/notes/",
            api.post(
                "/api/notes/",
                json={"title": "Reading", "body": "one line only"},
                headers={"Authorization": f"Token {key}"},
            ),
        )
    done.keep("api token", key)
    return done


@pytest.fixture(scope="module")
def signed_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedInRun]:
    production = {"NOTES_SECRET_KEY": SECRET_KEY}
    workdir = tmp_path_factory.mktemp("notes-django")
    with run_logged_in(STACK, workdir, sign_in_and_fail, production) as run:
        yield run


def test_the_session_login_failure_is_captured_with_its_credential_checks(
    signed_in: LoggedInRun,
) -> None:
    capture = signed_in.run.captures["form"]
    assert capture.status == 500, capture.body
    # The CSRF token (CsrfViewMiddleware.process_view), then, when login_required reads the
    # user, the database session's signed payload and its auth hash.
    assert recorded_checks(capture.capsule) == [
        "django.csrf.token_match",
        "django.signing.unsign_object",
        "django.auth.session_hash",
    ]


def test_the_stored_session_payload_is_recorded_only_as_a_placeholder(
    signed_in: LoggedInRun,
) -> None:
    # django_session.session_data is the signed session payload: the row carries its
    # placeholder, with the identity of the credential the recorded session decode was given.
    effects = [
        e["exchange"]
        for e in signed_in.run.captures["form"].capsule["events"]
        if e["kind"] == "effect"
    ]
    [row] = next(
        x["response"]["rows"] for x in effects if "django_session" in x["request"].get("text", "")
    )
    [decode] = [x for x in effects if x["request"].get("op") == "django.signing.unsign_object"]
    stored = row["session_data"]["$reproit"]
    assert stored == decode["request"]["input"]["credential"]["$reproit"]
    assert (stored["type"], stored["redacted"], len(stored["id"])) == ("string", True, 24)


def test_the_token_failure_is_looked_up_not_verified(signed_in: LoggedInRun) -> None:
    capture = signed_in.run.captures["token"]
    assert capture.status == 500, capture.body
    assert recorded_checks(capture.capsule) == []


def test_the_token_row_and_the_header_carry_one_identity(signed_in: LoggedInRun) -> None:
    capsule = signed_in.run.captures["token"].capsule
    start = next(event for event in capsule["events"] if event["kind"] == "start")
    header = dict(start["input"]["request"]["headers"])["Authorization"]
    lookup = next(
        event["exchange"]
        for event in capsule["events"]
        if event["kind"] == "effect" and "authtoken_token" in event["exchange"]["request"]["text"]
    )
    row_key = lookup["response"]["rows"][0]["key"]["$reproit"]
    assert header == f"Token $reproit.{row_key['class']}.{row_key['length']}.{row_key['id']}"
    assert lookup["request"]["values"] == [{"$reproit": row_key}]


def test_no_password_session_cookie_or_csrf_token_reaches_the_ingest(
    signed_in: LoggedInRun,
) -> None:
    assert_no_secret(signed_in, "password", "secret key", "csrf", "session cookie")


def test_no_api_token_reaches_the_ingest(signed_in: LoggedInRun) -> None:
    assert_no_secret(signed_in, "api token")


@pytest.mark.parametrize("kind", ["form", "token"])
def test_the_replay_reproduces_the_failure_as_the_same_user(
    signed_in: LoggedInRun, kind: str
) -> None:
    code, result = signed_in.run.check(kind)
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500
    # The planted bug, not a stumble on the way: for the token, the hardened comparison saw
    # the served row's key equal to the key the replayed request presented.
    replayed = result["replayedException"]
    assert (replayed["type"], result["differentFailure"]) == (
        "builtins.ZeroDivisionError",
        False,
    ), dumped(result)


@pytest.mark.parametrize(("kind", "status"), [("form", 302), ("token", 201)])
def test_the_fixed_code_replays_as_fixed(signed_in: LoggedInRun, kind: str, status: int) -> None:
    code, result = signed_in.run.check(kind, NOTES_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    assert result["observedResult"]["status"] == status
