"""The replay sends the request production received: its bytes, its headers, stand-ins for secrets.

Three unmodified apps (``apps/fidelity_*.py``: Flask on gunicorn, FastAPI on uvicorn, Django
on gunicorn) run under the real ``opentelemetry-instrument`` launcher on a real PostgreSQL and
upload their failures to a real ``reproit-otel serve``. Then PostgreSQL and the upstream are
stopped and ``reproit-otel check`` replays each occurrence:

* bodies: JSON with unsorted keys and ``9.0``, a form, a multipart upload with a binary file,
  a chunked body (not on Django, which does not read chunked bodies), a Latin-1 text: each
  view answers the SHA-256 and length of the bytes it read, so the replay's answer equals
  production's only if the application read the same bytes;
* headers: a French request of the ``acme`` tenant (``Accept-Language``, ``X-Tenant``) takes
  the failing branch; the replay takes it again;
* the server: each app looks a site up by the host and port its server says it received the
  request on (as Wagtail does); the replayed application listens on another port, and is
  handed production's, so the lookup replays and answers what production answered;
* stand-ins: a JSON sign-up whose password and e-mail are redacted reaches ``set_password``
  with strings and fails as production did (the e-mail is taken); an API key sent as a bearer
  token, looked up in SQL and forwarded to the upstream replays with one stand-in, and the
  capsule links its three appearances with one identity. The planted secrets are in no
  capsule, raw, URL-encoded, base64 or JSON-escaped.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import shlex
import sys
import urllib.parse
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.served_ingest import ServedIngest
from tests.integration.stack_support import (
    KEY,
    Capture,
    Request,
    Stack,
    StackRun,
    answers,
    clean_environ,
    dumped,
    exchanges,
    serving,
    start_input,
    wait_for_occurrence,
)
from tests.integration.upstream import Upstream
from tests.pgserver import ThrowawayPostgres

APPS = Path(__file__).resolve().parent / "apps"
sys.path.insert(0, str(APPS))
from fidelity_logic import (  # noqa: E402  (the app folder is not a package)
    PLANTED_KEY,
    PLANTED_PASSWORD,
    TAKEN_EMAIL,
    prepare,
)

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
UVICORN = str(Path(sys.executable).with_name("uvicorn"))
BOUNDARY = "----fidelity7MA4YWxkTrZu0gW"


@dataclass(frozen=True)
class Sent:
    """One request as production receives it: header lines in order, the body, chunked or not."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    chunked: bool = False

    def send(self, port: int) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.putrequest(self.method, self.path, skip_accept_encoding=True)
            for name, value in self.headers:
                connection.putheader(name, value)
            if self.chunked and self.body is not None:
                connection.putheader("Transfer-Encoding", "chunked")
                connection.endheaders()
                for start in range(0, len(self.body), 7):
                    piece = self.body[start : start + 7]
                    connection.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                connection.send(b"0\r\n\r\n")
            else:
                if self.body is not None:
                    connection.putheader("Content-Length", str(len(self.body)))
                connection.endheaders(self.body)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def multipart() -> bytes:
    file_bytes = bytes(range(256)) + b"\r\n--not-the-boundary\r\n"
    return (
        (
            f"--{BOUNDARY}\r\n"
            'Content-Disposition: form-data; name="title"\r\n\r\n'
            "Résumé\r\n"
            f"--{BOUNDARY}\r\n"
            'Content-Disposition: form-data; name="upload"; filename="blob.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + file_bytes
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


BODIES: dict[str, Sent] = {
    "json": Sent(
        "POST",
        "/body/json",
        (("Content-Type", "application/json"),),
        b'{"z": 9.0, "a": [1, 2.50], "m": "caf\\u00e9"}',
    ),
    "form": Sent(
        "POST",
        "/body/form",
        (("Content-Type", "application/x-www-form-urlencoded"),),
        b"b=2&a=1&a=3&note=caf%C3%A9+au+lait",
    ),
    "multipart": Sent(
        "POST",
        "/body/multipart",
        (("Content-Type", f"multipart/form-data; boundary={BOUNDARY}"),),
        multipart(),
    ),
    "chunked": Sent(
        "POST",
        "/body/chunked",
        (("Content-Type", "text/plain; charset=utf-8"),),
        "line one\nline two: ünïcode\n".encode() * 3,
        chunked=True,
    ),
    "latin1": Sent(
        "POST",
        "/body/latin1",
        (("Content-Type", "text/plain; charset=iso-8859-1"),),
        "Grüße aus Köln, 25 °C".encode("latin-1"),
    ),
}

GREET = Sent(
    "GET",
    "/greet",
    (
        ("Accept", "application/json"),
        ("Accept-Language", "fr-CH, fr;q=0.9"),
        ("X-Tenant", "acme"),
        ("User-Agent", "fidelity-test/1"),
    ),
)
SIGN_UP = Sent(
    "POST",
    "/signup",
    (("Content-Type", "application/json"),),
    json.dumps({"name": "Ada", "password": PLANTED_PASSWORD, "email": TAKEN_EMAIL}).encode(),
)
ITEMS = Sent(
    "GET",
    "/items",
    (("Authorization", f"Bearer {PLANTED_KEY}"), ("Cookie", f"theme=dark; session={PLANTED_KEY}")),
)


SERVER = Sent("GET", "/server")


LONG_CHUNKED = Sent(
    "POST",
    "/body/long",
    (("Content-Type", "application/octet-stream"),),
    bytes(range(256)) * 300,  # 76800 bytes: past what is read ahead for the capture
    chunked=True,
)


def stack(name: str, serve: tuple[str, ...], **env: str) -> Stack:
    return Stack(
        name=name, cwd=APPS, serve=serve, healthy=Request("GET", "/"), failing=_unused, env=env
    )


def _unused(identifier: str, kind: str) -> Request:
    raise AssertionError("the fidelity stacks send their own requests")


STACKS = {
    "flask": stack(
        "fidelity-flask", (GUNICORN, "--bind", "127.0.0.1:{port}", "fidelity_flask:app")
    ),
    "fastapi": stack("fidelity-fastapi", (UVICORN, "--port", "{port}", "fidelity_fastapi:app")),
    "django": stack(
        "fidelity-django",
        (GUNICORN, "--bind", "127.0.0.1:{port}", "fidelity_django:application"),
        DJANGO_SETTINGS_MODULE="fidelity_django",
        PYTHONPATH=str(APPS),
    ),
}


def sent_for(name: str) -> dict[str, Sent]:
    bodies = {**BODIES, "server": SERVER}
    if name == "django":
        del bodies["chunked"]  # Django reads no chunked request body (it needs a length)
    if name == "flask":
        bodies.update({"greet": GREET, "signup": SIGN_UP, "items": ITEMS, "long": LONG_CHUNKED})
    return bodies


@contextmanager
def captured(name: str, workdir: Path) -> Iterator[StackRun]:
    """Every request of ``sent_for(name)`` captured once, then PostgreSQL and upstream stopped."""
    the_stack = STACKS[name]
    ingest = ServedIngest(f"sqlite:///{workdir / 'ingest.db'}", "--api-key", KEY)
    upstream = Upstream()
    postgres = ThrowawayPostgres()
    try:
        postgres.start()
        prepare(postgres.dsn)
        base_env = {"UPSTREAM": upstream.base, "DATABASE_URL": postgres.dsn, **the_stack.env}
        capture_env = {
            **base_env,
            "OTEL_SERVICE_NAME": the_stack.name,
            "OTEL_TRACES_EXPORTER": "reproit",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": the_stack.name,
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
        captures: dict[str, Capture] = {}
        with serving(the_stack, capture_env) as port:
            for case, sent in sent_for(name).items():
                status, body = sent.send(port)
                operation = f"{sent.method} {sent.path}"
                occurrence = wait_for_occurrence(ingest, operation)
                capsule = httpx.get(
                    f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule",
                    headers={"authorization": f"Bearer {KEY}"},
                ).json()
                placeholder = Request(sent.method, sent.path)
                captures[case] = Capture(occurrence, capsule, placeholder, status, body)
        upstream_port = int(upstream.base.rsplit(":", 1)[1])
        upstream.stop()
        postgres.stop()
        assert not answers(upstream_port) and not answers(postgres.port)
        yield StackRun(the_stack, ingest, workdir, base_env, captures)
    finally:
        upstream.stop()
        if postgres.data.exists():
            postgres.stop()
        ingest.stop()


flask_only = pytest.mark.parametrize("run", ["flask"], indirect=True)
"""Headers and stand-ins are exercised on the Flask app (the captures of the other stacks
do not send those requests)."""


@pytest.fixture(scope="module", params=sorted(STACKS))
def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackRun]:
    name: str = request.param
    with captured(name, tmp_path_factory.mktemp(name)) as result:
        yield result


def _digest(data: bytes) -> dict[str, Any]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "length": len(data)}


@pytest.mark.parametrize("case", sorted(BODIES))
def test_the_replayed_application_reads_the_bytes_production_read(run: StackRun, case: str) -> None:
    if case not in run.captures:
        assert (run.stack.name, case) == ("fidelity-django", "chunked")
        return
    capture = run.captures[case]
    assert (capture.status, json.loads(capture.body)) == (500, _digest(BODIES[case].body or b""))
    code, result = run.check(case)
    assert (code, result["verdict"]) == (1, "reproduced"), dumped(result)
    assert json.loads(result["observedResult"]["body"]) == json.loads(capture.body)


def test_the_recorded_request_keeps_the_header_lines_and_the_exact_bytes(run: StackRun) -> None:
    recorded = start_input(run.captures["latin1"].capsule)["request"]
    names = [name.lower() for name, _ in recorded["headers"]]
    assert names[:1] == ["host"] and "content-type" in names
    assert base64.b64decode(recorded["bodyBase64"]) == BODIES["latin1"].body
    as_text = start_input(run.captures["json"].capsule)["request"]
    assert as_text["body"] == (BODIES["json"].body or b"").decode()


@flask_only
def test_a_long_chunked_body_reaches_the_application_whole(run: StackRun) -> None:
    """Past 64 KiB the capture keeps no bytes, and the application still reads every one."""
    capture = run.captures["long"]
    assert (capture.status, json.loads(capture.body)) == (500, _digest(LONG_CHUNKED.body or b""))
    recorded = start_input(capture.capsule)["request"]
    assert {k: v for k, v in recorded.items() if k not in ("headers", "server")} == {
        "chunked": True
    }


def test_the_replayed_application_is_handed_the_server_address_production_had(
    run: StackRun,
) -> None:
    capture = run.captures["server"]
    site = json.loads(capture.body)["site"]
    recorded = start_input(capture.capsule)["request"]["server"]
    assert (capture.status, site) == (500, f"{recorded[0]}:{recorded[1]}")
    assert recorded[0] == "127.0.0.1" and isinstance(recorded[1], int)
    code, result = run.check("server")
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert json.loads(result["observedResult"]["body"]) == {"site": site}


@flask_only
def test_the_recorded_headers_take_the_recorded_branch(run: StackRun) -> None:
    assert run.captures["greet"].status == 500
    code, result = run.check("greet")
    assert (code, result["verdict"]) == (1, "reproduced"), dumped(result)
    assert result["observedResult"]["status"] == 500


@flask_only
def test_a_sign_up_with_redacted_password_and_email_reaches_the_real_failure(
    run: StackRun,
) -> None:
    capture = run.captures["signup"]
    assert capture.status == 500
    body = start_input(capture.capsule)["body"]
    assert body["password"]["$reproit"]["type"] == "string"
    assert body["email"]["$reproit"]["class"] == "email"
    code, result = run.check("signup")
    assert (code, result["verdict"]) == (1, "reproduced"), dumped(result)
    replayed = result.get("replayedException") or {}
    assert "UniqueViolation" in json.dumps(replayed), dumped(result)
    assert "has no attribute" not in result["_stderr"]


def _identities(value: Any) -> list[str]:
    found: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            body = item.get("$reproit")
            if isinstance(body, Mapping) and "id" in body:
                found.append(body["id"])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and "$reproit." in item:
            found.extend(part.split(".")[3][:24] for part in item.split("$reproit")[1:] if part)
    return found


@flask_only
def test_a_looked_up_api_key_replays_with_one_stand_in_everywhere(run: StackRun) -> None:
    capture = run.captures["items"]
    assert capture.status == 500
    recorded = start_input(capture.capsule)["request"]
    authorization = dict(recorded["headers"])["Authorization"]
    assert authorization.startswith("Bearer $reproit.base64.")
    cookie = dict(recorded["headers"])["Cookie"]
    assert cookie.startswith("theme=dark; session=$reproit.base64.")
    [key_id] = set(_identities(authorization))
    [sql] = [e for e in exchanges(capture.capsule) if e["protocol"] == "pg"]
    [http] = [e for e in exchanges(capture.capsule) if e["protocol"] == "http"]
    assert _identities(sql["request"]["values"]) == [key_id]
    assert _identities(http["request"]["headers"]["x-api-key"]) == [key_id]
    assert set(_identities(cookie)) == {key_id}
    code, result = run.check("items")
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), dumped(result)
    assert result["observedResult"]["status"] == 500


def _where(value: Any, needle: str, at: str = "") -> list[str]:
    """The paths inside ``value`` whose text holds ``needle``."""
    if isinstance(value, Mapping):
        return [p for k, v in value.items() for p in _where(v, needle, f"{at}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _where(v, needle, f"{at}[{i}]")]
    return [at] if needle in json.dumps(value) or needle in str(value) else []


def test_the_planted_secrets_are_in_no_capsule(run: StackRun) -> None:
    capsules = {case: c.capsule for case, c in run.captures.items()}
    text = json.dumps(capsules, ensure_ascii=False)
    ascii_text = json.dumps(capsules)
    for secret in (PLANTED_KEY, PLANTED_PASSWORD, TAKEN_EMAIL):
        forms = {
            secret,
            urllib.parse.quote(secret),
            urllib.parse.quote_plus(secret),
            base64.b64encode(secret.encode()).decode(),
            base64.b64encode(f"Bearer {secret}".encode()).decode(),
            json.dumps(secret)[1:-1],
        }
        for form in forms:
            assert form not in text and form not in ascii_text, _where(capsules, form)


@flask_only
def test_overrides_replace_the_recorded_credential(run: StackRun, tmp_path: Path) -> None:
    """``--header`` replaces the stand-in: a key of the wrong shape answers 401, not 500."""
    code, result = _check_with(run, "items", "--header", "Authorization: Bearer short")
    assert (code, result["observedResult"]["status"]) == (3, 401), dumped(result)


def _check_with(run: StackRun, case: str, *extra: str) -> tuple[int, dict[str, Any]]:
    import subprocess

    from tests.integration.served_ingest import cli_command
    from tests.integration.stack_support import BOOT_TIMEOUT_S, CHECK_TIMEOUT_S

    done = subprocess.run(
        [
            *cli_command(
                "check",
                run.captures[case].occurrence,
                "--exec",
                f"cd {shlex.quote(str(run.stack.cwd))} && {run.stack.boot_command()}",
                "--json",
                "--ingest",
                run.ingest.base_url,
                "--api-key",
                KEY,
                "--boot-timeout",
                str(BOOT_TIMEOUT_S),
                *extra,
            )
        ],
        cwd=run.workdir,
        env=clean_environ(
            **run.base_env,
            OTEL_TRACES_EXPORTER="none",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
        ),
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        check=False,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    result["_stderr"] = done.stderr
    return done.returncode, result


_ = uuid  # identifiers come from the paths
