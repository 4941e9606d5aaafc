"""No planted secret appears in any byte reproit-otel emits.

Secrets are planted where the capture contract promises to hide them (PROTOCOL D8 and the
redaction rules): values of secret-named headers, query parameters, JSON keys and SQL result
columns, and values configured in ``REPROIT_SECRET_VALUES`` wherever they occur (free text,
SQL parameters, rows, bodies, boundary arguments and results), a value an invoke boundary
reads through :func:`reproit_otel.secrets.get` while it runs, and the scan token
(``REPROIT_SCAN_TOKEN``, decision D12) the scan request carries. A request carrying all of
them runs through the real service (Flask behind werkzeug, requests to a loopback upstream,
psycopg2 against PostgreSQL, an invoke boundary) with reproit-otel capturing; a scan request
with a wrong token must get no ``x-reproit-events`` header at all. Then every output is
searched for every secret:

* the events handed to the uploader, the uploaded batch bytes, the capsule projected from the
  batch, a CI spool capsule of the events, the debug dump files, the scan-mode
  ``x-reproit-events`` header (decoded), the invoke-boundary fixture files the request's
  boundary call wrote (``REPROIT_TOOLS=record``), and every log record reproit-otel wrote;
* end to end, the raw files of a real ``reproit-otel serve`` SQLite store, what
  ``reproit-otel show --json`` and ``pull`` print, and the server's own log.

A marker that is not secret is planted beside the secrets, and must be found, so an empty
output cannot pass.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests
from flask import Flask, jsonify, request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reproit_otel import secrets as reproit_secrets
from reproit_otel.capture.uploader import Uploader
from reproit_otel.ci.spool import Spool, ci_capsule
from reproit_otel.instrumentation.invoke import boundary
from reproit_otel.redaction.core import SECRET_PARTS, is_secret_key
from reproit_otel.wire.capsule import capsule_from_batch, capsule_text
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.upstream import Upstream
from tests.reliability.harness import fetch, served

pytestmark = pytest.mark.postgres

MARKER = "visible-marker-7f3a"
TRACE_HEADER = "x-reproit-trace"
SCAN_TOKEN_HEADER = "x-reproit-scan-token"
READ_NAME = "REPROIT_TEST_SIGNING_TOKEN"


@dataclass(frozen=True)
class Planted:
    """Where each secret goes. ``configured`` values are in ``REPROIT_SECRET_VALUES``."""

    header: str  # a secret-named inbound header ...
    query: str  # ... query parameter ...
    key: str  # ... JSON key (inbound body, upstream body, response body) ...
    column: str  # ... and SQL result column
    values: tuple[str, ...]  # by-name secrets, one per place (see `app`)
    configured: tuple[str, str]  # configured secret values
    read: str  # what the boundary call reads through reproit_otel.secrets.get(READ_NAME)
    scan_token: str  # REPROIT_SCAN_TOKEN, carried by the trusted scan request

    @property
    def row_secret(self) -> str:
        """What the secret-named SQL column holds: computed by PostgreSQL, never a parameter."""
        return hashlib.md5(self.configured[1].encode()).hexdigest()

    @property
    def secrets(self) -> tuple[str, ...]:
        return (*self.values, *self.configured, self.row_secret, self.read, self.scan_token)


def _names() -> st.SearchStrategy[str]:
    """A key name that contains a secret fragment, in assorted spellings."""
    affixes = st.sampled_from(["", "x", "my", "client", "db", "v2"])
    case = st.sampled_from([str.lower, str.upper, str.title])
    return st.builds(
        lambda before, part, after, shape: shape(f"{before}{part}{after}"),
        affixes,
        st.sampled_from(SECRET_PARTS),
        affixes,
        case,
    ).filter(is_secret_key)


def _secret_values(count: int) -> st.SearchStrategy[list[str]]:
    token = st.text("0123456789abcdef", min_size=16, max_size=16).map(lambda h: f"Zq{h}")
    return st.lists(token, min_size=count, max_size=count, unique=True)


PLANTED = st.builds(
    lambda header, query, key, column, values: Planted(
        header=f"x-{header}",
        query=query,
        key=key,
        column=column.lower(),
        values=tuple(values[:10]),
        configured=(values[10], values[11]),
        read=values[12],
        scan_token=values[13],
    ),
    _names(),
    _names(),
    _names(),
    _names(),
    _secret_values(14),
)


def app(upstream: str, dsn: str, planted: Planted) -> Flask:
    """A service that handles secrets the way real ones do."""
    service = Flask("secrets")
    v = planted.values
    free, param = planted.configured

    @boundary("vault", "sign")
    def sign(payload: str, credentials: dict[str, str]) -> dict[str, str]:
        token = reproit_secrets.get(READ_NAME)
        return {
            "signature": f"signed with {token} for {MARKER}",
            f"by {token}": f"key of {free}",
            planted.key: f"{token}",
        }

    @service.post("/checkout")
    def checkout() -> Any:
        payload = request.get_json()
        answer = requests.post(
            f"{upstream}/echo",
            params={planted.query: v[3], "page": "2"},
            headers={planted.header: v[4], "authorization": f"Bearer {v[5]}"},
            json={planted.key: v[6], "note": f"forwarding {free} for {MARKER}"},
            timeout=5,
        )
        connection = psycopg2.connect(dsn)
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    f'SELECT %s AS note, md5(%s) AS "{planted.column}", %s AS plain',
                    (f"{MARKER} {free}", param, param),
                )
                row = cursor.fetchone()
                names = [column.name for column in cursor.description]
        finally:
            connection.close()
        signed = sign(f"order {MARKER} paid with {free}", {planted.key: v[9], "user": "ada"})
        body = {
            "error": f"checkout failed for {MARKER}",
            "signed": sorted(signed),
            planted.key: v[7],
            "detail": f"see {free}",
            "echoed": answer.json(),
            "received": payload,
            "row": dict(zip(names, row, strict=True)),
        }
        return jsonify(body), 500, {"set-cookie": f"session={v[8]}"}

    return service


def _request(planted: Planted) -> tuple[str, bytes, dict[str, str]]:
    v = planted.values
    path = f"/checkout?{planted.query}={v[1]}&item={MARKER}"
    body = json.dumps({planted.key: v[2], "note": f"paid with {planted.configured[0]}"})
    headers = {
        planted.header: v[0],
        "cookie": f"sid={v[0]}",
        "content-type": "application/json",
        TRACE_HEADER: "t-secret",
        SCAN_TOKEN_HEADER: planted.scan_token,
    }
    return path, body.encode(), headers


def _environ(endpoint: str, planted: Planted, dump: Path) -> dict[str, str]:
    return {
        "REPROIT_ENDPOINT": endpoint,
        "REPROIT_API_KEY": "k",
        "REPROIT_APP_ID": "shop",
        "REPROIT_FLUSH_INTERVAL_MS": "100",
        "REPROIT_SECRET_VALUES": json.dumps(list(planted.configured)),
        "REPROIT_DEBUG_DUMP": str(dump),
        "REPROIT_SCAN": "1",
        "REPROIT_SCAN_TOKEN": planted.scan_token,
    }


class _Records(logging.Handler):
    """Every record the ``reproit_otel`` logger emits, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter().format(record) + repr(record.args))


@contextmanager
def _boundary_settings(planted: Planted, fixtures: Path) -> Iterator[None]:
    """Record boundary fixtures into ``fixtures``; the boundary reads ``planted.read``."""
    saved = {name: os.environ.get(name) for name in ("REPROIT_TOOLS", "REPROIT_FIXTURES")}
    os.environ.update(REPROIT_TOOLS="record", REPROIT_FIXTURES=str(fixtures))
    reproit_secrets.set_source({READ_NAME: planted.read})
    try:
        yield
    finally:
        reproit_secrets.set_source(None)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _reproit_logs() -> Iterator[_Records]:
    logger = logging.getLogger("reproit_otel")
    handler = _Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _files(folder: Path) -> list[str]:
    return [
        path.read_bytes().decode("utf-8", "replace")
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    ]


def _leaks(planted: Planted, outputs: dict[str, Sequence[str]]) -> dict[str, list[str]]:
    """For each output, the planted secrets found in it."""
    found: dict[str, list[str]] = {}
    for name, texts in outputs.items():
        hits = [secret for secret in planted.secrets if any(secret in text for text in texts)]
        if hits:
            found[name] = hits
    return found


def _events_header(value: str | None) -> str:
    assert value is not None, "the scan request got no x-reproit-events header"
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("utf-8")


def _capture(upstream: Upstream, dsn: str, planted: Planted, folder: Path) -> dict[str, list[str]]:
    """Run the scan request and the captured request; every output reproit-otel produced."""
    ingest = LoopbackIngest()
    dump = folder / "dump"
    events: list[Any] = []
    try:
        with (
            _boundary_settings(planted, folder / "fixtures"),
            _reproit_logs() as logs,
            served(
                upstream.base,
                dsn,
                _environ(ingest.url, planted, dump),
                app=app(upstream.base, dsn, planted),
            ) as service,
        ):
            assert service.processor is not None
            service.processor.add_sink(_ListSink(events))
            path, body, headers = _request(planted)
            status, scan_headers, _ = fetch(service.base, "POST", path, body, headers)
            assert status == 500
            # D12: a wrong scan token makes the trace header untrusted, and nothing is echoed.
            forged = {**headers, SCAN_TOKEN_HEADER: f"not-{MARKER}"}
            status, forged_headers, _ = fetch(service.base, "POST", path, body, forged)
            assert status == 500
            assert "x-reproit-events" not in dict(forged_headers)
            plain = {k: v for k, v in headers.items() if k not in (TRACE_HEADER, SCAN_TOKEN_HEADER)}
            assert fetch(service.base, "POST", path, body, plain)[0] == 500
            [uploader] = [s for s in service.sinks() if isinstance(s, Uploader)]
            assert uploader.flush(20) is True
            uploads = ingest.wait_for(2)
    finally:
        ingest.stop()
    assert len(uploads) == 2  # the forged scan request was captured as an ordinary one
    capsules = [capsule_from_batch(json.loads(upload.body)) for upload in uploads]
    spool = Spool(str(folder / "spool"), 1 << 20)
    assert spool.write(ci_capsule("test:secrets#checkout", events[0], {})) is not None
    return {
        "events": [json.dumps(e) for e in events],
        "scan header": [_events_header(dict(scan_headers).get("x-reproit-events"))],
        "upload request": [
            text
            for upload in uploads
            for text in (upload.body.decode("utf-8"), json.dumps(upload.headers))
        ],
        "capsule": [capsule_text(capsule) for capsule in capsules if capsule is not None],
        "spool": _files(folder / "spool"),
        "debug dump": _files(dump),
        "fixtures": _files(folder / "fixtures"),
        "logs": logs.lines,
    }


class _ListSink:
    def __init__(self, into: list[Any]) -> None:
        self.into = into

    def submit(self, trace: Any) -> None:
        self.into.append(list(trace.events))


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


@settings(
    max_examples=int(os.environ.get("REPROIT_SECRET_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(planted=PLANTED)
def test_planted_secrets_appear_in_no_output(
    planted: Planted, upstream: Upstream, postgres_dsn: str
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        outputs = _capture(upstream, postgres_dsn, planted, Path(scratch))
    assert MARKER in outputs["upload request"][0]
    assert all(outputs[name] for name in ("events", "spool", "debug dump", "capsule", "fixtures"))
    assert MARKER in outputs["fixtures"][0]
    assert _leaks(planted, outputs) == {}


FIXED = Planted(
    header="x-api-key",
    query="access_token",
    key="password",
    column="client_secret",
    values=tuple(f"Zq{index:016x}" for index in range(10)),
    configured=("Zqconfigured00001", "Zqconfigured00002"),
    read="Zqreadsecret00001",
    scan_token="Zqscantoken000001",
)


def test_a_real_ingest_stores_no_secret(
    upstream: Upstream, postgres_dsn: str, tmp_path: Path
) -> None:
    """End to end: the raw SQLite store of `reproit-otel serve`, `show`, `pull`, its log."""
    database = tmp_path / "ingest.db"
    ingest = ServedIngest(f"sqlite:///{database}", "--api-key", "team-key")
    stopped = False
    try:
        environ = {
            **_environ(f"{ingest.base_url}/v1/capture-batches", FIXED, tmp_path / "dump"),
            "REPROIT_API_KEY": "team-key",
        }
        with served(
            upstream.base, postgres_dsn, environ, app=app(upstream.base, postgres_dsn, FIXED)
        ) as service:
            path, body, headers = _request(FIXED)
            del headers[TRACE_HEADER]
            assert fetch(service.base, "POST", path, body, headers)[0] == 500
            [uploader] = [s for s in service.sinks() if isinstance(s, Uploader)]
            # The response reaches the client as it is yielded, before the server thread has
            # closed the operation: flush() only waits for what is already queued.
            for _ in range(400):
                if uploader.stats()["captured_operations"] >= 1:
                    break
                time.sleep(0.025)
            assert uploader.flush(20) is True
            assert uploader.stats()["sent_batches"] == 1
        env = {**os.environ, "REPROIT_API_KEY": "team-key"}
        listed = subprocess.run(
            cli_command("list", "--json", "--ingest", ingest.base_url),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        ).stdout
        [occurrence] = json.loads(listed)["occurrences"]
        shown = subprocess.run(
            cli_command("show", occurrence["id"], "--json", "--ingest", ingest.base_url),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        ).stdout
        pulled = subprocess.run(
            cli_command("pull", occurrence["id"], "--ingest", ingest.base_url),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        ).stdout
        assert ingest.stop() == 0
        stopped = True
    finally:
        if not stopped:
            ingest.stop()
    stored = [
        path.read_bytes().decode("latin-1")
        for path in tmp_path.iterdir()
        if path.name.startswith("ingest.db")
    ]
    outputs = {
        "store files": stored,
        "list": [listed],
        "show": [shown],
        "pull": [pulled],
        "server log": ingest.lines,
    }
    assert MARKER in pulled
    assert any(MARKER in text for text in stored)
    assert _leaks(FIXED, outputs) == {}
