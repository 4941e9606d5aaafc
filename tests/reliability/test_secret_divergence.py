"""A DIVERGENCE line echoes the live call, and must not echo a planted secret in it.

In replay a call the recording does not hold is reported on standard error as
``REPROIT:DIVERGENCE {"protocol":...,"got":<the live probe>,...}``. Decision D8 makes the
replay matcher apply the capture's redaction to the live call before it compares; the same
redacted probe is what the line prints. These tests replay a capsule the way production does
(:func:`reproit_otel.replay.install_replay` on a capsule file, with ``REPROIT_SECRET_VALUES``
in the environment) and make live calls that carry secrets and do not match:

* ``requests``: a secret-named query parameter, a password in the URL's user info, a
  secret-named key in the JSON body, a configured secret value and a value read through
  :func:`reproit_otel.secrets.get` in free text;
* ``psycopg2`` (served by the stub connection, no server): a secret-named named parameter,
  configured and read secret values in the statement text and in the parameters;
* an invoke boundary served from the capsule and one served from fixtures
  (``REPROIT_TOOLS=replay``): secret-named arguments and secret values in the arguments.

Every byte written to file descriptor 2 (the DIVERGENCE lines, the replay's own line), every
record the ``reproit_otel`` logger writes and the text of every exception the application sees
is searched for every planted secret. Calls that
carry the same secrets but otherwise equal the recording must still be served (the redaction
applies to matching too). A visible marker planted beside the secrets must appear in the
lines, so a line that lost its probe cannot pass.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reproit_otel import secrets
from reproit_otel.capture.uploader import Uploader
from reproit_otel.errors import DivergedError, MissingFixtureError
from reproit_otel.instrumentation.invoke import boundary, use_tracer_provider
from reproit_otel.redaction.core import (
    SECRET_PARTS,
    is_secret_key,
    placeholder,
    redact,
)
from reproit_otel.replay import install_replay, uninstall_replay
from reproit_otel.wire.capsule import capsule_from_batch
from tests.integration.loopback_ingest import LoopbackIngest
from tests.integration.upstream import Upstream
from tests.reliability.harness import fetch, served
from tests.reliability.secret_drift_app import MARKER as DRIFT_MARKER
from tests.reliability.secret_drift_app import TOKEN_NAME
from tests.reliability.secret_drift_app import make_app as drift_app

MARKER = "visible-marker-5c1d"
DIVERGENCE = "REPROIT:DIVERGENCE "
READ_NAME = "REPROIT_TEST_VAULT_TOKEN"


@dataclass(frozen=True)
class Planted:
    query: str  # a secret-named query parameter ...
    key: str  # ... JSON body key, SQL named parameter and boundary argument
    in_query: str  # the query parameter's value
    in_userinfo: str  # the URL user info's password
    in_body: str  # the secret-named body key's value
    in_param: str  # the secret-named SQL parameter's value
    in_argument: str  # the secret-named boundary argument's value
    configured: str  # in REPROIT_SECRET_VALUES
    read: str  # read through reproit_otel.secrets.get(READ_NAME)

    @property
    def secrets(self) -> tuple[str, ...]:
        return (
            self.in_query,
            self.in_userinfo,
            self.in_body,
            self.in_param,
            self.in_argument,
            self.configured,
            self.read,
        )


def _names() -> st.SearchStrategy[str]:
    affixes = st.sampled_from(["", "x_", "my", "client_", "v2_"])
    return st.builds(
        lambda before, part, after: f"{before}{part}{after}",
        affixes,
        st.sampled_from(SECRET_PARTS),
        st.sampled_from(["", "_id", "value", "2"]),
    ).filter(lambda name: is_secret_key(name) and name.isidentifier())


_VALUES = st.lists(
    st.text("0123456789abcdef", min_size=16, max_size=16).map(lambda h: f"Zq{h}"),
    min_size=7,
    max_size=7,
    unique=True,
)

PLANTED = st.builds(
    lambda query, key, v: Planted(query, key, *v),
    _names(),
    _names(),
    _VALUES,
)

FIXED = Planted(  # not hex after "Zq": never one of the values the fuzz registers
    query="access_token",
    key="password",
    in_query="Zqfixedxdivergence1",
    in_userinfo="Zqfixedxdivergence2",
    in_body="Zqfixedxdivergence3",
    in_param="Zqfixedxdivergence4",
    in_argument="Zqfixedxdivergence5",
    configured="Zqfixedxdivergence6",
    read="Zqfixedxdivergence7",
)


def _recorded_url(planted: Planted, page: int) -> str:
    return f"http://payments.internal/charge?{planted.query}=$reproit&page={page}"


def _capsule(planted: Planted) -> dict[str, Any]:
    """A capsule as the capture writes one: each request redacted (section 3, D8)."""
    secret = placeholder("x" * 18)
    exchanges = [
        {
            "protocol": "http",
            "request": {
                "method": "POST",
                "url": _recorded_url(planted, 1),
                "body": {planted.key: secret, "note": "recorded $reproit and $reproit"},
            },
            "response": {"status": 200, "headers": {}, "body": {"charged": True}},
        },
        {
            "protocol": "pg",
            "request": {
                "text": f"SELECT %({planted.key})s AS x, %(note)s AS note",
                "values": {planted.key: secret, "note": "recorded $reproit"},
            },
            "response": {"command": "SELECT 1", "rowCount": 1, "rows": [{"x": 1, "note": "n"}]},
        },
        {
            "protocol": "invoke",
            "request": {
                "tool": "vault",
                "op": "sign",
                "input": {planted.key: secret, "payload": "recorded $reproit"},
            },
            "response": {"ok": True, "data": "signed"},
        },
    ]
    return {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "POST /checkout",
        "events": [
            {"kind": "effect", "sequence": n + 1, "effect": "call", "exchange": redact(exchange)}
            for n, exchange in enumerate(exchanges)
        ],
    }


@boundary("vault", "sign")
def vault_sign(payload: str, **credentials: str) -> str:
    raise AssertionError("a replayed boundary must never run its callable")


def _live_calls(planted: Planted) -> list[str]:
    """The application's calls in replay: each diverging call, then each matching one.

    Returns the text of every exception the application saw.
    """
    read = secrets.get(READ_NAME)
    assert read == planted.read
    seen: list[str] = []
    free = f"{MARKER} {planted.configured} {read}"
    base = f"http://ada:{planted.in_userinfo}@payments.internal/charge"

    drifted = requests.post(
        f"{base}?{planted.query}={planted.in_query}&page=2&item={MARKER}",
        json={planted.key: planted.in_body, "note": free},
        timeout=5,
    )
    assert drifted.status_code == 599
    seen.append(drifted.text)

    connection = psycopg2.connect("host=db.internal dbname=shop")
    cursor = connection.cursor()
    for text, values in [
        (
            f"SELECT %({planted.key})s AS x, %(note)s AS note, %(more)s AS more",
            {planted.key: planted.in_param, "note": free, "more": MARKER},
        ),
        (f"SELECT '{planted.configured}', '{read}', %s, '{MARKER}'", (f"{read}!",)),
    ]:
        with pytest.raises(DivergedError) as diverged:
            cursor.execute(text, values)
        seen.append(str(diverged.value))

    with pytest.raises(MissingFixtureError) as missing:
        vault_sign(free, **{planted.key: planted.in_argument})
    seen.append(str(missing.value))

    # The same secrets, otherwise as recorded: served, because the live call is redacted
    # the way the capture redacted the recorded one.
    served = requests.post(
        f"{base}?{planted.query}={planted.in_query}&page=1",
        json={planted.key: planted.in_body, "note": f"recorded {planted.configured} and {read}"},
        timeout=5,
    )
    assert (served.status_code, served.json()) == (200, {"charged": True})
    cursor.execute(
        f"SELECT %({planted.key})s AS x, %(note)s AS note",
        {planted.key: planted.in_param, "note": f"recorded {read}"},
    )
    assert cursor.fetchall() == [(1, "n")]
    assert vault_sign(f"recorded {planted.configured}", **{planted.key: "any"}) == "signed"
    connection.close()
    return seen


class _Records(logging.Handler):
    """Every record the ``reproit_otel`` logger emits, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter().format(record) + repr(record.args))


@dataclass
class _Replay:
    folder: Path
    monkeypatch: pytest.MonkeyPatch
    logs: _Records

    @staticmethod
    def lines(err: str) -> list[str]:
        return [line for line in err.splitlines() if line.startswith(DIVERGENCE)]


@pytest.fixture
def replay_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[_Replay]:
    monkeypatch.delenv("REPROIT_TOOLS", raising=False)
    monkeypatch.delenv("REPROIT_REPLAY", raising=False)
    logger = logging.getLogger("reproit_otel")
    records = _Records()
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        yield _Replay(tmp_path, monkeypatch, records)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
        secrets.set_source(None)


def _replay(planted: Planted, folder: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replay the capsule as production does; what the application saw."""
    monkeypatch.setenv("REPROIT_SECRET_VALUES", json.dumps([planted.configured]))
    secrets.set_source({READ_NAME: planted.read})
    path = folder / "capsule.json"
    path.write_text(json.dumps(_capsule(planted)), encoding="utf-8")
    install_replay(path)
    try:
        return _live_calls(planted)
    finally:
        uninstall_replay()


def _leaks(planted: Planted, outputs: dict[str, list[str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, texts in outputs.items():
        hits = [s for s in planted.secrets if any(s in text for text in texts)]
        if hits:
            found[name] = hits
    return found


def test_divergence_lines_of_http_pg_and_invoke_hold_no_secret(
    replay_env: _Replay, capfd: pytest.CaptureFixture[str]
) -> None:
    seen = _replay(FIXED, replay_env.folder, replay_env.monkeypatch)
    err = capfd.readouterr().err
    lines = _Replay.lines(err)
    reports = [json.loads(line.removeprefix(DIVERGENCE)) for line in lines]
    assert [r["protocol"] for r in reports] == ["http", "pg", "pg", "invoke"]
    assert reports[0]["got"] == {
        "method": "POST",
        "url": (
            f"http://ada:$reproit@payments.internal/charge?access_token=$reproit&page=2&item={MARKER}"
        ),
        "body": {
            "password": placeholder(FIXED.in_body),
            "note": f"{MARKER} $reproit $reproit",
        },
    }
    assert reports[1]["got"] == {
        "text": "SELECT %(password)s AS x, %(note)s AS note, %(more)s AS more",
        "values": {
            "password": placeholder(FIXED.in_param),
            "note": f"{MARKER} $reproit $reproit",
            "more": MARKER,
        },
    }
    assert reports[2]["got"] == {
        "text": f"SELECT '$reproit', '$reproit', %s, '{MARKER}'",
        "values": ["$reproit!"],
    }
    assert reports[3]["got"] == {
        "tool": "vault",
        "op": "sign",
        "input": {
            "password": placeholder(FIXED.in_argument),
            "payload": f"{MARKER} $reproit $reproit",
        },
    }
    outputs = {"stderr": [err], "exceptions": seen, "logs": replay_env.logs.lines}
    assert _leaks(FIXED, outputs) == {}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(planted=PLANTED)
def test_no_divergence_line_echoes_a_planted_secret(
    planted: Planted, replay_env: _Replay, capfd: pytest.CaptureFixture[str]
) -> None:
    capfd.readouterr()
    seen = _replay(planted, replay_env.folder, replay_env.monkeypatch)
    err = capfd.readouterr().err
    lines = _Replay.lines(err)
    assert len(lines) == 4 and all(MARKER in line for line in lines)
    outputs = {"stderr": [err], "exceptions": seen, "logs": replay_env.logs.lines}
    assert _leaks(planted, outputs) == {}


# -- end to end: a captured request replayed with drift by `reproit-otel check` ----------------

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.postgres
def test_check_of_a_drifted_replay_prints_no_secret(
    postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capture ``GET /pay`` for real, then let ``check`` replay it with every call drifted."""
    token, note, pin = "Zqdrifttokenvalue01", "Zqdriftconfigured01", "Zqdriftpinvalue0001"
    monkeypatch.delenv("REPROIT_TOOLS", raising=False)
    upstream = Upstream()
    ingest = LoopbackIngest()
    secrets.set_source({TOKEN_NAME: token})
    try:
        environ = {
            "REPROIT_ENDPOINT": ingest.url,
            "REPROIT_API_KEY": "k",
            "REPROIT_APP_ID": "shop",
            "REPROIT_FLUSH_INTERVAL_MS": "100",
            "REPROIT_SECRET_VALUES": json.dumps([note]),
        }
        app = drift_app(upstream.base, postgres_dsn, note, pin)
        with served(upstream.base, postgres_dsn, environ, app=app) as service:
            use_tracer_provider(service.provider)
            status, _, body = fetch(service.base, "GET", "/pay")
            assert (status, json.loads(body)["seen"][0]) == (500, 200)
            [uploader] = [s for s in service.sinks() if isinstance(s, Uploader)]
            assert uploader.flush(20) is True
            [upload] = ingest.wait_for(1)
    finally:
        use_tracer_provider(None)
        secrets.set_source(None)
        ingest.stop()
        upstream.stop()
    batch = tmp_path / "batch.json"
    batch.write_bytes(upload.body)
    capsule = capsule_from_batch(json.loads(upload.body))
    assert capsule is not None
    recorded = [e["exchange"]["protocol"] for e in capsule["events"] if "exchange" in e]
    assert recorded == ["http", "invoke", "pg"]

    env = {k: v for k, v in os.environ.items() if not k.startswith("REPROIT_")}
    env.update(
        PYTHONPATH=str(REPO),
        REPROIT_SECRET_VALUES=json.dumps([note]),
        DRIFT_APP_TOKEN=token,
        DRIFT_APP_NOTE=note,
        DRIFT_APP_PIN=pin,
        DRIFT_APP_DRIFT="9",
        UPSTREAM="http://127.0.0.1:9",
        DSN=postgres_dsn,
    )
    command = f"{sys.executable} tests/reliability/secret_drift_app.py"
    run = subprocess.run(
        [sys.executable, "-m", "reproit_otel", "check", str(batch), "--exec", command, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(run.stdout)
    assert (report["verdict"], run.returncode) == ("diverged", 3), run.stdout + run.stderr
    divergences = report["divergences"]
    assert [d["protocol"] for d in divergences] == ["http", "invoke", "pg"]
    assert all(DRIFT_MARKER in json.dumps(d["got"]) for d in divergences)
    outputs = {
        "check stdout": [run.stdout],
        "check stderr": [run.stderr],
        "batch": [upload.body.decode("utf-8")],
    }
    found = {
        name: [s for s in (token, note, pin) if any(s in text for text in texts)]
        for name, texts in outputs.items()
    }
    assert {name: hits for name, hits in found.items() if hits} == {}
