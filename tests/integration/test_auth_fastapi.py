"""A PyJWT (and a python-jose) bearer API on FastAPI, zero code, under uvicorn.

The notes API in ``apps/notes_fastapi`` (FastAPI's security tutorial: ``OAuth2PasswordBearer``,
``jwt.encode`` / ``jwt.decode`` with ``HS256``) runs under uvicorn and the real
``opentelemetry-instrument`` on a real PostgreSQL. A client gets a token from ``/token`` and
posts a note with ``Authorization: Bearer``; it hits the planted bug (500). With PostgreSQL
stopped and another secret key, ``reproit-otel check`` replays it as the same user (the
recorded claims are served for the stand-in token): reproduced, then fixed. Neither the
password nor the token is in any artifact. The same API making its tokens with python-jose
(``NOTES_JWT=jose``, FastAPI's tutorial before it moved to PyJWT) replays the same way through
the ``jose.jwt.decode`` seam. With ``NOTES_KEY_ID=1`` the API reads the token's header
before verifying it (``jwt.get_unverified_header``, to choose the key by its ``kid``, as
Flask-JWT-Extended and services that rotate keys do): that read is served from the recording
too, since a stand-in has no header to read.
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


VARIANTS: dict[str, tuple[dict[str, str], list[str]]] = {
    "pyjwt": ({"NOTES_JWT": "pyjwt"}, ["jwt.decode"]),
    "jose": ({"NOTES_JWT": "jose"}, ["jose.jwt.decode"]),
    "pyjwt-kid": (
        {"NOTES_JWT": "pyjwt", "NOTES_KEY_ID": "1"},
        ["jwt.get_unverified_header", "jwt.decode"],
    ),
}
"""Each variant's settings and the credential checks its request records, in order."""


def stack(variant: str) -> Stack:
    return Stack(
        name=f"notes-fastapi-{variant}",
        cwd=APP,
        serve=(UVICORN, "--port", "{port}", "app:app"),
        healthy=Request("GET", "/"),
        failing=lambda identifier, kind: Request("GET", "/"),
        prepare=init,
        env={
            "NOTES_SECRET_KEY": "the-replaying-laptop-has-another-key-entirely",
            **VARIANTS[variant][0],
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


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def signed_in(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LoggedInRun]:
    production = {"NOTES_SECRET_KEY": SECRET_KEY}
    workdir = tmp_path_factory.mktemp(f"notes-fastapi-{request.param}")
    with run_logged_in(stack(request.param), workdir, sign_in_and_fail, production) as run:
        yield run


def test_the_bearer_failure_is_captured_with_the_decoded_claims(signed_in: LoggedInRun) -> None:
    capture = signed_in.run.captures["bearer"]
    env = signed_in.run.stack.env
    variant = signed_in.run.stack.name.removeprefix("notes-fastapi-")
    assert capture.status == 500, capture.body
    assert recorded_checks(capture.capsule) == VARIANTS[variant][1]
    *read, check = [e for e in exchanges(capture.capsule) if e["protocol"] == "invoke"]
    data = check["response"]["data"]
    assert (sorted(data["payload"]), data["payload"]["sub"]) == (["exp", "sub"], "ada")
    # PyJWT's decode_complete also hands back the header; python-jose's decode the claims only.
    header = {"alg": "HS256", "typ": "JWT", **({"kid": "current"} if read else {})}
    assert data.get("header") == (header if env["NOTES_JWT"] == "pyjwt" else None)
    # The header read before the check is its outcome too: the replay serves it for the
    # stand-in, which is no JWT and whose header could not be read.
    assert [e["response"] for e in read] == (
        [{"ok": True, "data": {"header": header}}] if read else []
    )


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
