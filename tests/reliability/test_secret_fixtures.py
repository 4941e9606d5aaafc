"""No planted secret reaches an invoke-boundary fixture, its DIVERGENCE line or a log.

Fixtures (``REPROIT_TOOLS=record``) are files a team commits, so they are an output like any
other. Secrets are planted where an invoke boundary meets them:

* a configured secret value (``REPROIT_SECRET_VALUES``) in an argument's value, in an
  argument's key, in the result and in an error's message;
* a value the call reads through :func:`reproit_otel.secrets.get` while it runs, placed in the
  result's values and keys, in a recorded error's message and in its cause's message;
* values under secret-named keys, in the arguments and in the result.

Each example records a success and a failure with a status, replays both from the fixtures
(``REPROIT_TOOLS=replay``) with the configured secret rotated, and makes one replayed call
whose input differs and carries every secret: its ``MissingFixtureError`` and the
``REPROIT:DIVERGENCE`` line it writes to file descriptor 2 are searched too, with every fixture
file's bytes and every record the ``reproit_otel`` logger wrote.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider

from reproit_otel import bootstrap, secrets
from reproit_otel.config import read_config
from reproit_otel.errors import MissingFixtureError, ToolCallError
from reproit_otel.instrumentation.invoke import boundary
from reproit_otel.redaction.core import SECRET_PARTS, is_secret_key
from reproit_otel.wire.standins import materialize

MARKER = "visible-marker-b71e"
DIVERGENCE = "REPROIT:DIVERGENCE "
READ_NAME = "REPROIT_TEST_MAILBOX_TOKEN"


@dataclass(frozen=True)
class Planted:
    key: str  # a secret-named key, in the arguments and in the result
    in_argument: str  # its value in the arguments
    in_result: str  # its value in the result
    configured: str  # in REPROIT_SECRET_VALUES when recording ...
    rotated: str  # ... and its replacement when replaying
    read: str  # what the call reads through reproit_otel.secrets.get

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.in_argument, self.in_result, self.configured, self.rotated, self.read)


PLANTED = st.builds(
    lambda before, part, v: Planted(f"{before}{part}", *v),
    st.sampled_from(["", "x-", "imap_", "Api"]),
    st.sampled_from(SECRET_PARTS),
    st.lists(
        st.text("0123456789abcdef", min_size=16, max_size=16).map(lambda h: f"Zq{h}"),
        min_size=5,
        max_size=5,
        unique=True,
    ),
).filter(lambda planted: is_secret_key(planted.key))


class Refused(Exception):
    """What the mail relay's client raises: it carries an HTTP-style status."""

    status = 503


_current: list[Planted] = []


@boundary("mailbox", "fetch")
def fetch(folder: str, login: dict[str, str], note: str) -> dict[str, Any]:
    planted = _current[-1]
    token = secrets.get(READ_NAME)
    return {
        "folder": folder,
        "marker": MARKER,
        f"session {token}": f"authenticated with {token} as {planted.configured}",
        planted.key: planted.in_result,
        "greeting": f"hello {note}",
    }


@boundary("mailbox", "send")
def send(to: str, login: dict[str, str]) -> None:
    planted = _current[-1]
    token = secrets.get(READ_NAME)
    try:
        raise Refused(f"relay said no to {token} and {planted.configured}")
    except Refused as cause:
        raise ToolCallError(
            f"{MARKER}: sending with {token} for {planted.configured} refused",
            code="Refused",
            status=403,
        ) from cause


def _login(planted: Planted, configured: str) -> dict[str, str]:
    return {"user": "ada", planted.key: planted.in_argument, configured: "as a key"}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter().format(record) + repr(record.args))


@pytest.fixture
def logs() -> Iterator[_Records]:
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
        secrets.set_source(None)


def _round_trip(
    planted: Planted, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Any]:
    """Record, replay with the configured secret rotated, then one replayed miss."""
    monkeypatch.setenv("REPROIT_FIXTURES", str(folder))
    monkeypatch.setenv("REPROIT_SECRET_VALUES", json.dumps([planted.configured]))
    secrets.set_source({READ_NAME: planted.read})
    _current.append(planted)
    seen: list[str] = []
    try:
        monkeypatch.setenv("REPROIT_TOOLS", "record")
        note = f"note {planted.configured}"
        recorded = fetch("INBOX", _login(planted, planted.configured), note)
        with pytest.raises(ToolCallError):  # the application's own error: not an output
            send(f"bob {planted.configured}", _login(planted, planted.configured))

        monkeypatch.setenv("REPROIT_TOOLS", "replay")
        monkeypatch.setenv("REPROIT_SECRET_VALUES", json.dumps([planted.rotated]))
        secrets.set_source({})  # replay runs no call, so it reads no secret
        replayed = fetch("INBOX", _login(planted, planted.rotated), f"note {planted.rotated}")
        with pytest.raises(ToolCallError) as again:
            send(f"bob {planted.rotated}", _login(planted, planted.rotated))
        error = again.value
        assert (error.code, error.status, error.cause_status) == ("Refused", 403, 503)
        seen += [str(error), str(error.cause_message)]
        # What the fixture holds (placeholders where the secrets were), served as stand-ins.
        assert replayed == materialize(
            json.loads(
                json.dumps(recorded)
                .replace(planted.read, "$reproit")
                .replace(planted.configured, "$reproit")
                .replace(json.dumps(planted.in_result), json.dumps(_placeholder(planted.in_result)))
            )
        )
        with pytest.raises(MissingFixtureError) as missing:
            fetch(f"Sent {MARKER}", _login(planted, planted.rotated), f"{planted.read}")
        seen.append(str(missing.value))
        return seen, missing.value.line
    finally:
        _current.pop()


def _placeholder(text: str) -> dict[str, Any]:
    return {"$reproit": {"length": len(text), "redacted": True, "type": "string"}}


def _leaks(planted: Planted, outputs: dict[str, list[str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, texts in outputs.items():
        hits = [s for s in planted.secrets if any(s in text for text in texts)]
        if hits:
            found[name] = hits
    return found


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(planted=PLANTED)
def test_fixtures_and_their_divergence_lines_hold_no_planted_secret(
    planted: Planted,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    logs: _Records,
) -> None:
    folder = tmp_path_factory.mktemp("fixtures")
    capfd.readouterr()
    seen, line = _round_trip(planted, folder, monkeypatch)
    err = capfd.readouterr().err
    files = sorted(folder.iterdir())
    assert len(files) == 2  # one success, one failure with a status
    texts = [path.read_bytes().decode("utf-8") for path in files]
    divergences = [x for x in err.splitlines() if x.startswith(DIVERGENCE)]
    assert divergences == [line]
    assert all(MARKER in text for text in [*texts, line])
    outputs = {
        "fixtures": texts,
        "fixture names": [path.name for path in files],
        "stderr": [err],
        "exceptions": seen,
        "logs": logs.lines,
    }
    assert _leaks(planted, outputs) == {}


def test_secret_values_of_a_given_configuration_reach_no_fixture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``install(config=...)`` with secret values the environment does not name."""
    configured = "Zqgivenconfig0001"
    monkeypatch.delenv("REPROIT_SECRET_VALUES", raising=False)
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    monkeypatch.setenv("REPROIT_FIXTURES", str(tmp_path))

    @boundary("ledger", "post")
    def post(entry: str) -> str:
        return f"posted {entry}"

    provider = TracerProvider()
    bootstrap.install(provider, config=read_config({"REPROIT_SECRET_VALUES": configured}))
    try:
        assert post(f"{MARKER} {configured}") == f"posted {MARKER} {configured}"
    finally:
        bootstrap.uninstall()
        provider.shutdown()
    [fixture] = [path.read_text(encoding="utf-8") for path in tmp_path.iterdir()]
    assert f"posted {MARKER} $reproit" in fixture
    assert configured not in fixture
