"""Logged-in failures of real applications: captured under ``opentelemetry-instrument``, replayed.

:func:`run_logged_in` does what :func:`~tests.integration.stack_support.run_stack` does (a real
PostgreSQL, a real ``reproit-otel serve``, the application under the real launcher uploading
its failures, then PostgreSQL stopped) for a user who signs in first: the stack's ``scenario``
signs in with an ``httpx.Client`` as a browser or API client would, sends the failing
requests, and names the credentials it planted or received (password, cookies, CSRF tokens,
API tokens). :func:`assert_no_secret` then looks for each of them, raw, URL-encoded, base64 and
JSON-escaped, in every capsule, the ingest's database files and the ingest's pages.
"""

from __future__ import annotations

import base64
import html
import json
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx

from tests.integration.served_ingest import ServedIngest
from tests.integration.stack_support import (
    KEY,
    Capture,
    Request,
    Stack,
    StackRun,
    answers,
    clean_environ,
    serving,
    wait_for_occurrence,
)
from tests.pgserver import ThrowawayPostgres

PASSWORD = "correct-horse-" + uuid.uuid4().hex[:12]
"""The planted password of the signed-in user (a new one per test session)."""

SECRET_KEY = "production-key-" + uuid.uuid4().hex
"""The application's production secret key (the replaying process gets another)."""


@dataclass
class Sent:
    """One failing request the scenario sent, and what the live application answered."""

    method: str
    path: str
    response: httpx.Response


@dataclass
class Scenario:
    """What a sign-in scenario did: the failing requests by name, the credentials it saw."""

    sent: dict[str, Sent] = field(default_factory=dict)
    secrets: dict[str, list[str]] = field(default_factory=dict)

    def keep(self, kind: str, *values: str | None) -> None:
        """Remember credentials of ``kind`` (``"session"``, ``"api token"``...)."""
        self.secrets.setdefault(kind, []).extend(value for value in values if value)


@dataclass
class LoggedInRun:
    run: StackRun
    secrets: dict[str, list[str]]
    """The credentials by kind, with the planted ``"password"`` and ``"secret key"``."""


def secret_forms(secret: str) -> set[str]:
    """``secret`` as it may appear: raw, URL-encoded, base64 (both alphabets, padded or not)
    and JSON-escaped."""
    data = secret.encode()
    encoded = {base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()}
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret),
        json.dumps(secret)[1:-1],
        *encoded,
        *(form.rstrip("=") for form in encoded),
    }


@contextmanager
def run_logged_in(
    stack: Stack,
    workdir: Path,
    scenario: Callable[[httpx.Client], Scenario],
    production: Mapping[str, str],
    client_address: str = "127.0.0.1",
) -> Iterator[LoggedInRun]:
    """Capture the scenario's failures of ``stack``, then stop PostgreSQL.

    ``production`` is the environment only production has (its secret key): the application
    is prepared and captured with it, and replayed without it. The scenario's client sends
    from ``client_address`` (a loopback address; ``check`` replays from 127.0.0.1).
    """
    ingest = ServedIngest(f"sqlite:///{workdir / 'ingest.db'}", "--api-key", KEY)
    postgres = ThrowawayPostgres()
    try:
        postgres.start()
        base_env = {"DATABASE_URL": postgres.dsn, **stack.env}
        stack.prepare(clean_environ(**{**base_env, **production}))
        capture_env = {
            **base_env,
            **production,
            "OTEL_SERVICE_NAME": stack.name,
            "OTEL_TRACES_EXPORTER": "reproit",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "REPROIT_ENDPOINT": f"{ingest.base_url}/v1/capture-batches",
            "REPROIT_API_KEY": KEY,
            "REPROIT_APP_ID": stack.name,
            "REPROIT_FLUSH_INTERVAL_MS": "100",
        }
        with serving(stack, capture_env) as port:
            transport = httpx.HTTPTransport(local_address=client_address)
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", timeout=30, transport=transport
            ) as client:
                done = scenario(client)
            occurrences = {
                name: wait_for_occurrence(ingest, f"{sent.method} {sent.path}")
                for name, sent in done.sent.items()
            }
        captures: dict[str, Capture] = {}
        for name, sent in done.sent.items():
            capsule = httpx.get(
                f"{ingest.base_url}/v1/occurrences/{occurrences[name]}/capsule",
                headers={"authorization": f"Bearer {KEY}"},
            ).json()
            captures[name] = Capture(
                occurrences[name],
                capsule,
                Request(sent.method, sent.path),
                sent.response.status_code,
                sent.response.content,
            )
        postgres.stop()
        assert not answers(postgres.port)
        run = StackRun(stack, ingest, workdir, base_env, captures)
        yield LoggedInRun(run, {**done.secrets, "password": [PASSWORD], "secret key": [SECRET_KEY]})
    finally:
        if postgres.data.exists():
            postgres.stop()
        ingest.stop()


def hidden_field(page: str, name: str) -> str:
    """The value of the form field ``name`` in an HTML page."""
    found = re.search(rf'name="{re.escape(name)}"[^>]*value="([^"]*)"', page) or re.search(
        rf'value="([^"]*)"[^>]*name="{re.escape(name)}"', page
    )
    assert found is not None, page
    return html.unescape(found.group(1))


def assert_no_secret(logged_in: LoggedInRun, *kinds: str) -> None:
    """No planted or received credential of ``kinds`` (default: all), in any form, in any
    artifact of the ingest."""
    run = logged_in.run
    headers = {"authorization": f"Bearer {KEY}"}
    places: dict[str, str] = {}
    for name, capture in run.captures.items():
        places[f"capsule {name}"] = json.dumps(capture.capsule, ensure_ascii=False)
        places[f"capsule {name} (ascii)"] = json.dumps(capture.capsule)
        page = httpx.get(f"{run.ingest.base_url}/occurrences/{capture.occurrence}", headers=headers)
        assert page.status_code == 200, page.text
        places[f"page {name}"] = page.text
        places[f"page {name} (unescaped)"] = html.unescape(page.text)
    places["list page"] = httpx.get(f"{run.ingest.base_url}/", headers=headers).text
    for path in sorted(run.workdir.glob("ingest.db*")):
        places[path.name] = path.read_bytes().decode("latin-1")
    assert any(p.startswith("ingest.db") for p in places), sorted(places)
    found = [
        (place, secret[:6] + "...")
        for kind, secrets in logged_in.secrets.items()
        if not kinds or kind in kinds
        for secret in secrets
        for form in secret_forms(secret)
        for place, text in places.items()
        if form in text
    ]
    assert found == [], found


def recorded_checks(capsule: Mapping[str, Any]) -> list[str]:
    """The ``op`` of every credential check the capsule recorded, in order."""
    return [
        event["exchange"]["request"]["op"]
        for event in capsule["events"]
        if event["kind"] == "effect"
        and event["exchange"]["protocol"] == "invoke"
        and event["exchange"]["request"].get("tool") == "credential"
    ]
