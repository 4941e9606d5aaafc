"""A PyJWT (and a python-jose) bearer API on FastAPI, zero code, under uvicorn.

The notes API in ``apps/notes_fastapi`` (FastAPI's security tutorial: ``OAuth2PasswordBearer``,
``jwt.encode`` / ``jwt.decode`` with ``HS256``) runs under uvicorn and the real
``opentelemetry-instrument`` on a real PostgreSQL. A client gets a token from ``/token`` and
posts a note with ``Authorization: Bearer``; it hits the planted bug (500). With PostgreSQL
stopped and another secret key, ``reproit-otel check`` replays it as the same user (the
recorded claims are served for the stand-in token): reproduced, then fixed. Neither the
password nor the token is in any artifact. The same API making its tokens with python-jose
(``NOTES_JWT=jose``, FastAPI's tutorial before it moved to PyJWT) replays the same way through
the ``jose.jwt.decode`` seam.
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
    recorded_checks,
    run_logged_in,
)
from tests.integration.stack_support import Request, Stack, dumped, exchanges

APP = Path(__file__).resolve().parent / "apps" / "notes_fastapi"
UVICORN = str(Path(sys.executable).with_name("uvicorn"))


def init(env: Mapping[str, str]) -> None:
    subprocess.run(
        [sys.executable, "app.py", "init", "ada", PASSWORD],
        cwd=APP,
        env=dict(env),
        check=True,
        timeout=120,
    )


CHECKS = {"pyjwt": "jwt.decode", "jose": "jose.jwt.decode"}
"""The credential check each JWT library's ``decode`` is recorded as."""


def stack(library: str) -> Stack:
    return Stack(
        name=f"notes-fastapi-{library}",
        cwd=APP,
        serve=(UVICORN, "--port", "{port}", "app:app"),
        healthy=Request("GET", "/"),
        failing=lambda identifier, kind: Request("GET", "/"),
        prepare=init,
        env={
            "NOTES_SECRET_KEY": "the-replaying-laptop-has-another-key-entirely",
            "NOTES_JWT": library,
        },
    )


def sign_in_and_fail(client: httpx.Client) -> Scenario:
    done = Scenario()
    issued = client.post("/token", json={"username": "ada", "password": PASSWORD})
    assert issued.status_code == 200, issued.text
    token = issued.json()["access_token"]
    done.sent["bearer"] = Sent(
        "POST",
        "/notes",
        client.post(
            "/notes",
            json={"title": "Reading", "body": "one line only"},
            headers={"Authorization": f"Bearer {token}"},
        ),
    )
    done.keep("bearer token", token, *token.split("."))
    return done


@pytest.fixture(scope="module", params=sorted(CHECKS))
def signed_in(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoggedInRun]:
    production = {"NOTES_SECRET_KEY": SECRET_KEY}
    workdir = tmp_path_factory.mktemp(f"notes-fastapi-{request.param}")
    with run_logged_in(stack(request.param), workdir, sign_in_and_fail, production) as run:
        yield run


def test_the_bearer_failure_is_captured_with_the_decoded_claims(signed_in: LoggedInRun) -> None:
    capture = signed_in.run.captures["bearer"]
    library = signed_in.run.stack.env["NOTES_JWT"]
    assert capture.status == 500, capture.body
    assert recorded_checks(capture.capsule) == [CHECKS[library]]
    [check] = [e for e in exchanges(capture.capsule) if e["protocol"] == "invoke"]
    data = check["response"]["data"]
    assert (sorted(data["payload"]), data["payload"]["sub"]) == (["exp", "sub"], "ada")
    # PyJWT's decode_complete also hands back the header; python-jose's decode the claims only.
    assert data.get("header") == ({"alg": "HS256", "typ": "JWT"} if library == "pyjwt" else None)


def test_neither_password_nor_token_reaches_the_ingest(signed_in: LoggedInRun) -> None:
    assert_no_secret(signed_in)


def test_the_replay_reproduces_the_failure_as_the_same_user(signed_in: LoggedInRun) -> None:
    code, result = signed_in.run.check("bearer")
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


def test_the_fixed_code_replays_as_fixed(signed_in: LoggedInRun) -> None:
    code, result = signed_in.run.check("bearer", NOTES_FIXED="1")
    assert (code, result["verdict"]) == (0, "fixed"), dumped(result)
    assert result["observedResult"]["status"] == 201
