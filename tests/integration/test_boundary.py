"""Invoke boundaries end to end: record against a real mailbox, stop it, replay.

The mailbox (``mailbox.py``) is a real line-protocol server on a loopback port; the
"embedding model" is a local function. Fixtures are recorded with ``REPROIT_TOOLS=record``,
the server is stopped (connections are refused), and ``REPROIT_TOOLS=replay`` must give the
same results without a connection, a password or the callable running. A boundary inside a
Flask request is captured by the real span processor and replayed by ``reproit-otel check``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.instrumentation.flask import FlaskInstrumentor

from reproit_otel.errors import MissingFixtureError, ToolCallError
from reproit_otel.fixtures import fixture_name
from reproit_otel.instrumentation.invoke import use_tracer_provider
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.invoke import fixture_key
from reproit_otel.wire.payload import capture_payload
from reproit_otel.wire.standins import text_standins
from tests.integration.apps.mailbox_app import (
    MailClient,
    MailError,
    ProtocolFault,
    embed,
    embed_async,
    make_app,
)
from tests.integration.mailbox import Mailbox
from tests.integration.pipeline_support import ServedWSGI, pipeline, stable

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "mailbox-pass-7f3a9c"
SESSION = f"a1 OK [AUTH {PASSWORD}] logged in as ada"
SCRUBBED_SESSION = "a1 OK [AUTH $reproit] logged in as ada"
SERVED_SESSION = text_standins(SCRUBBED_SESSION)
"""What replay serves for it: the placeholder's stand-in, never the placeholder or the secret."""


@pytest.fixture
def mailbox() -> Iterator[Mailbox]:
    server = Mailbox()
    yield server
    server.stop()


@pytest.fixture
def fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "fixtures"
    monkeypatch.setenv("REPROIT_FIXTURES", str(directory))
    monkeypatch.setenv("MAILBOX_PASSWORD", PASSWORD)
    monkeypatch.delenv("REPROIT_SECRET_VALUES", raising=False)
    return directory


def vector(text: str, dims: int = 4) -> list[float]:
    """What the local embedding model gives for ``text``."""
    return [round(byte / 255, 6) for byte in hashlib.sha256(text.encode()).digest()[:dims]]


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "value", call()
    except ToolCallError as error:
        fields = ("message", "code", "status", "cause_message", "cause_status")
        return "ToolCallError", {name: getattr(error, name) for name in fields}
    except MissingFixtureError as error:
        return "MissingFixtureError", error.line
    except (MailError, ProtocolFault) as error:
        return type(error).__name__, str(error)


def test_fixtures_record_then_replay_with_the_mailbox_stopped(
    mailbox: Mailbox,
    fixtures: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    client = MailClient(mailbox.address)
    calls = [
        lambda: client.fetch("INBOX", 1),
        lambda: client.fetch(folder="Archive", uid=1),
        lambda: client.fetch("INBOX", 9),
        lambda: client.fetch("INBOX", 500),
        lambda: embed("Quarterly report"),
    ]
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    recorded = [_outcome(call) for call in calls]
    assert recorded == [
        (
            "value",
            {"folder": "INBOX", "session": SESSION, "subject": "Quarterly report", "uid": 1},
        ),
        (
            "value",
            {"folder": "Archive", "session": SESSION, "subject": "Grüße aus Köln", "uid": 1},
        ),
        ("MailError", "[NONEXISTENT] no such message"),
        ("ProtocolFault", "a2 BAD internal server fault"),
        ("value", vector("Quarterly report")),
    ]
    assert len(mailbox.commands) == 12
    names = sorted(path.name for path in fixtures.iterdir())
    assert len(names) == 4  # the BAD answer has no status: nothing is recorded for it
    assert all(
        name.startswith(("module.mailbox.fetch.", "module.embedding.embed.")) for name in names
    )

    mailbox.stop()
    assert mailbox.is_down()
    monkeypatch.setenv("REPROIT_TOOLS", "replay")
    monkeypatch.delenv("MAILBOX_PASSWORD")
    capfd.readouterr()
    replayed = [_outcome(call) for call in calls]
    line = (
        'REPROIT:DIVERGENCE {"protocol":"invoke","got":{"tool":"mailbox","op":"fetch",'
        '"input":{"folder":"INBOX","self":{"$object":"MailClient"},"uid":500}},'
        '"expected":{"input":{"folder":"INBOX","self":{"$object":"MailClient"},"uid":1},'
        '"op":"fetch","tool":"mailbox"},"consumed":0,"total":4}'
    )
    assert replayed == [
        (
            "value",
            {
                "folder": "INBOX",
                "session": SERVED_SESSION,
                "subject": "Quarterly report",
                "uid": 1,
            },
        ),
        (
            "value",
            {
                "folder": "Archive",
                "session": SERVED_SESSION,
                "subject": "Grüße aus Köln",
                "uid": 1,
            },
        ),
        (
            "ToolCallError",
            {
                "message": "[NONEXISTENT] no such message",
                "code": "MailError",
                "status": 404,
                "cause_message": "a2 NO [NONEXISTENT] no such message",
                "cause_status": 404,
            },
        ),
        ("MissingFixtureError", line),
        ("value", vector("Quarterly report")),
    ]
    assert capfd.readouterr().err == line + "\n"
    assert len(mailbox.commands) == 12  # nothing reached the (stopped) server


def test_the_password_never_reaches_a_fixture(
    mailbox: Mailbox, fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    client = MailClient(mailbox.address)
    client.fetch("INBOX", 1)
    with pytest.raises(MailError):
        client.fetch("INBOX", 7)
    [found, missing] = sorted(fixtures.iterdir(), key=lambda p: 'uid": 7' in p.read_text())
    assert all(PASSWORD not in path.read_text() for path in (found, missing))
    key = fixture_key(
        "mailbox", "fetch", {"folder": "INBOX", "self": {"$object": "MailClient"}, "uid": 1}
    )
    assert found.name == fixture_name("mailbox", "fetch", key)
    assert json.loads(found.read_text()) == {
        "exchange": {
            "protocol": "invoke",
            "request": {
                "input": {"folder": "INBOX", "self": {"$object": "MailClient"}, "uid": 1},
                "op": "fetch",
                "tool": "mailbox",
            },
            "response": {
                "data": {
                    "folder": "INBOX",
                    "session": SCRUBBED_SESSION,
                    "subject": "Quarterly report",
                    "uid": 1,
                },
                "ok": True,
            },
        },
        "format": "reproit-invoke-fixture",
        "key": key,
        "version": 1,
    }


def test_a_rotated_configured_secret_still_finds_its_fixture(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    monkeypatch.setenv("REPROIT_SECRET_VALUES", "old-api-key-1234")
    expected = vector("sign with old-api-key-1234", dims=2)
    assert embed("sign with old-api-key-1234", dims=2) == expected
    [path] = fixtures.iterdir()
    assert "old-api-key-1234" not in path.read_text()
    monkeypatch.setenv("REPROIT_TOOLS", "replay")
    monkeypatch.setenv("REPROIT_SECRET_VALUES", "new-api-key-98765")
    assert embed("sign with new-api-key-98765", dims=2) == expected


def test_two_calls_with_one_input_write_one_fixture_and_the_last_wins(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    assert embed("a") == embed(text="a", dims=4)
    assert len(list(fixtures.iterdir())) == 1
    [path] = fixtures.iterdir()
    document = json.loads(path.read_text())
    document["exchange"]["response"]["data"] = [1, 2]
    path.write_text(json.dumps(document))
    monkeypatch.setenv("REPROIT_TOOLS", "replay")
    assert embed("a") == [1, 2]  # a fixture written by hand is served as it is


def test_async_boundaries_record_and_replay_instantly(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    live = asyncio.run(embed_async("hello"))
    assert live == vector("hello")
    monkeypatch.setenv("REPROIT_TOOLS", "replay")
    coroutine = embed_async("hello")
    # Replay never suspends: the first step already finishes, so no cancellation can land.
    with pytest.raises(StopIteration) as done:
        coroutine.send(None)
    assert done.value.value == live

    async def cancelled_soon() -> list[float]:
        task = asyncio.ensure_future(embed_async("hello"))
        await asyncio.sleep(0)
        task.cancel()
        return await task

    assert asyncio.run(cancelled_soon()) == live


def test_output_validates_live_and_replayed_results(
    fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPROIT_TOOLS", "record")
    assert isinstance(embed("x"), list)  # the callable returns a tuple; output=list holds
    [path] = fixtures.iterdir()
    document = json.loads(path.read_text())
    document["exchange"]["response"]["data"] = {"not": "a list"}
    path.write_text(json.dumps(document))
    monkeypatch.setenv("REPROIT_TOOLS", "replay")
    with pytest.raises(TypeError) as error:
        embed("x")
    assert str(error.value) == (
        "boundary embedding.embed returned dict, expected list; fix the callable or the "
        "boundary's output="
    )


def test_doctor_reports_a_boundary_with_no_fixture(tmp_path: Path) -> None:
    (tmp_path / "tools_mod.py").write_text(
        "from reproit_otel.instrumentation.invoke import boundary\n"
        "import imaplib\n\n"
        "@boundary('search', 'query')\n"
        "def query(text: str) -> list[str]:\n"
        "    return []\n"
    )
    fixtures_dir = tmp_path / "fx"
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPROIT_")}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{REPO}"
    argv = [sys.executable, "-m", "reproit_otel", "doctor", "--import", "tools_mod"]
    argv += ["--fixtures", str(fixtures_dir)]
    run = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert (
        "error    fixtures      boundary search.query (tools_mod:query) has no fixture in "
        f"{fixtures_dir}; record it: REPROIT_TOOLS=record REPROIT_FIXTURES={fixtures_dir} "
        "<the command that runs your tests>"
    ) in lines
    assert (
        "warning  libraries     IMAP (imaplib) is imported but not recorded: a replay cannot "
        "serve its calls; make them inside a reproit_otel.boundary"
    ) in lines
    assert "ok       import        imported tools_mod" in lines
    assert lines[-1] == "1 error(s), 1 warning(s)"

    env["REPROIT_FIXTURES"] = str(fixtures_dir)
    env["REPROIT_TOOLS"] = "record"
    subprocess.run(
        [sys.executable, "-c", "import tools_mod; tools_mod.query('a')"],
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=60,
    )
    run = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ok       fixtures      1 boundary(ies), each with a fixture" in run.stdout.splitlines()


@pytest.fixture
def captured(mailbox: Mailbox, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("MAILBOX_PASSWORD", PASSWORD)
    monkeypatch.delenv("REPROIT_TOOLS", raising=False)
    with pipeline() as active:
        use_tracer_provider(active.provider)
        app = make_app(MailClient(mailbox.address))
        FlaskInstrumentor().instrument_app(app, tracer_provider=active.provider)
        server = ServedWSGI(app)
        try:
            yield active, server
        finally:
            server.stop()
            FlaskInstrumentor().uninstrument_app(app)
            use_tracer_provider(None)


def _effect(sequence: int, resource: str, key: str, exchange: dict[str, Any]) -> dict[str, Any]:
    return {
        "actionIndex": 0,
        "effect": "call",
        "exchange": exchange,
        "key": key,
        "kind": "effect",
        "operation": "GET /triage/INBOX/2",
        "resource": resource,
        "sequence": sequence,
        "spanId": "<trace>:GET /triage/INBOX/2",
        "traceId": "<trace>",
    }


def test_a_boundary_in_a_flask_request_is_captured_and_replays_through_check(
    captured: Any, mailbox: Mailbox, tmp_path: Path
) -> None:
    import http.client

    active, server = captured
    connection = http.client.HTTPConnection(server.base.removeprefix("http://"), timeout=10)
    connection.request("GET", "/triage/INBOX/2")
    response = connection.getresponse()
    live_body = json.loads(response.read())
    assert response.status == 500
    [trace] = active.sink.wait_for(1)
    events = stable(trace.events)
    urgent = vector("Urgent: server down")
    assert live_body == {
        "error": "cannot triage urgent mail",
        "subject": "Urgent: server down",
        "vector": urgent,
    }
    assert events[1:3] == [
        _effect(
            1,
            "mailbox",
            "fetch",
            {
                "protocol": "invoke",
                "request": {
                    "input": {"folder": "INBOX", "self": {"$object": "MailClient"}, "uid": 2},
                    "op": "fetch",
                    "tool": "mailbox",
                },
                "response": {
                    "data": {
                        "folder": "INBOX",
                        "session": SCRUBBED_SESSION,
                        "subject": "Urgent: server down",
                        "uid": 2,
                    },
                    "ok": True,
                },
            },
        ),
        _effect(
            2,
            "embedding",
            "embed",
            {
                "protocol": "invoke",
                "request": {
                    "input": {"dims": 4, "text": "Urgent: server down"},
                    "op": "embed",
                    "tool": "embedding",
                },
                "response": {"data": urgent, "ok": True},
            },
        ),
    ]
    assert events[3]["kind"] == "return"
    assert (events[3]["status"], events[3]["effectsComplete"]) == (500, True)
    assert PASSWORD not in canonical_json(trace.events)

    payload, dropped = capture_payload({"operation": trace.operation, "events": trace.events})
    assert payload is not None and dropped == 0
    capsule = tmp_path / "capsule.json"
    capsule.write_text(canonical_json(payload))
    mailbox.stop()
    assert mailbox.is_down()
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPROIT_")}
    env.pop("MAILBOX_PASSWORD", None)
    env["MAILBOX"] = mailbox.address
    env["PYTHONPATH"] = str(REPO)
    command = f"{sys.executable} tests/integration/apps/mailbox_app.py"
    run = subprocess.run(
        [sys.executable, "-m", "reproit_otel", "check", str(capsule), "--exec", command, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "REPROIT:DIVERGENCE" not in run.stderr
    assert run.returncode == 1, run.stdout + run.stderr
    assert json.loads(run.stdout)["verdict"] == "reproduced"


def test_an_error_without_a_status_leaves_the_capture_incomplete(
    captured: Any, mailbox: Mailbox
) -> None:
    import http.client

    active, server = captured
    connection = http.client.HTTPConnection(server.base.removeprefix("http://"), timeout=10)
    connection.request("GET", "/triage/INBOX/500")
    assert connection.getresponse().status == 500
    [trace] = active.sink.wait_for(1)
    assert [event["kind"] for event in trace.events] == ["start", "return"]
    assert (trace.events[-1]["status"], trace.events[-1]["effectsComplete"]) == (500, False)
    assert active.processor.stats()["incomplete_reasons"] == {
        "invoke: mailbox.fetch: ProtocolFault without a status is not recorded": 1
    }
