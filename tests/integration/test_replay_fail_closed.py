"""Replay fails closed: a process either arms the whole replay or does not serve at all.

The application is ``apps/replay_loop_app.py`` (no reproit-otel code). Its ``GET /quote``
calls the upstream and PostgreSQL named by ``UPSTREAM`` and ``DATABASE_URL``; here both are
canaries: loopback listeners that record every connection they accept and answer nothing. A
replay that serves from the capsule never reaches them; an application running live
(replay not armed) reaches the upstream first.

* a hostile capsule (a NUL in the envelope's ``tz``, and other fields replay cannot pin):
  ``check`` refuses it with exit 2 naming the field before anything boots; the application
  started directly with it under ``opentelemetry-instrument`` stops with exit 78 and a
  ``REPROIT:REPLAY-FAILED`` line instead of serving; the ingest refuses such a batch with 400;
* a capsule or batch whose connection ``setup`` answers replay would misread (a NUL in a
  carried ``TimeZone``, a data statement among them, an answer without rows): refused the
  same three ways;
* an unusable setting next to ``REPROIT_REPLAY``: the application stops the same way, and
  ``check`` exits 2 naming the cause from that line;
* ``--exec`` without the launcher: the application answers HTTP but never says that replay
  is armed; ``check`` exits 2 without firing the recorded request.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.bootstrap import REPLAY_FAILED_EXIT, REPLAY_FAILED_MARKER
from reproit_otel.check.judgement import REPLAY_FAILED_MARKER as VERDICT_FAILED_MARKER
from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_batch
from reproit_otel.wire.trace import BackendTrace, TraceContext
from tests.integration.capture_helpers import SEED, built_batch, queued
from tests.integration.served_ingest import ServedIngest, cli_command

APP = Path(__file__).resolve().parent / "apps" / "replay_loop_app.py"
LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")
KEY = "closed-key"
RUN_TIMEOUT_S = 120
NUL_TZ = "UTC\x00; DROP TABLE orders"


class Canary:
    """A loopback TCP listener that records every connection and closes it unanswered."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self.connections: list[tuple[str, int]] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, peer = self._server.accept()
            except OSError:
                return
            self.connections.append(peer)
            connection.close()

    def close(self) -> None:
        self._server.close()
        self._thread.join(5)


@pytest.fixture
def canaries() -> Iterator[tuple[Canary, Canary]]:
    upstream, database = Canary(), Canary()
    try:
        yield upstream, database
    finally:
        upstream.close()
        database.close()


def app_environ(upstream: Canary, database: Canary, **extra: str) -> dict[str, str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "REPROIT_")) or key == "REPROIT_STRICT_INTERNAL"
    }
    environ.update(
        UPSTREAM=f"http://127.0.0.1:{upstream.port}",
        DATABASE_URL=f"postgresql://app:secret@127.0.0.1:{database.port}/shop",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        **extra,
    )
    return environ


SELECT_TEXT = "SELECT %s::int + 1, %s::text"


def pg_exchange(setup: list[dict[str, Any]]) -> dict[str, Any]:
    """The recorded statement of ``GET /quote``, carrying a warm connection's ``setup``."""
    return {
        "protocol": "pg",
        "request": {"text": SELECT_TEXT, "values": [41, "x"]},
        "response": {"command": "SELECT", "rowCount": 1, "rows": [{"?column?": 42, "text": "x"}]},
        "setup": setup,
    }


def show(name: str, value: Any) -> dict[str, Any]:
    """A carried ``SHOW name`` answer."""
    return {
        "protocol": "pg",
        "request": {"text": f"SHOW {name}"},
        "response": {"command": "SHOW", "rowCount": 1, "rows": [{name.lower(): value}]},
    }


GOOD_SETUP = [show("TimeZone", "Europe/Paris"), show("DateStyle", "ISO, DMY")]
HOSTILE_SETUPS = [
    pytest.param(
        [show("TimeZone", NUL_TZ)],
        "setup[0].response.rows[0] must hold text of at most 4096 characters without control "
        "characters, null or a redaction placeholder",
        id="nul-in-timezone",
    ),
    pytest.param(
        [
            show("TimeZone", "UTC"),
            {**show("TimeZone", "UTC"), "request": {"text": "DELETE FROM orders"}},
        ],
        "setup[1].request.text is not a connection-scope setting or introspection statement",
        id="data-statement",
    ),
    pytest.param(
        [{**show("DateStyle", "ISO"), "response": {"command": "SHOW", "rowCount": 1}}],
        "setup[0].response.rows must be an array of row objects",
        id="no-rows",
    ),
]


def capsule(
    envelope: dict[str, Any] | None = None, setup: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A production capsule of ``GET /quote`` with one recorded upstream call (and, given
    ``setup``, its statement on a warm connection that carries those answers)."""
    document: dict[str, Any] = {
        "format": "reproit-backend-capture",
        "version": 2,
        "operation": "GET /quote",
        "oracle": "backend-server-error",
        "events": [
            {"kind": "start", "sequence": 0, "operation": "GET /quote", "input": {}},
            {
                "kind": "effect",
                "sequence": 1,
                "operation": "GET /quote",
                "effect": "call",
                "exchange": {
                    "protocol": "http",
                    "request": {"method": "GET", "url": "http://pricing.internal/json"},
                    "response": {"status": 200, "body": {"rate": 1.5}},
                },
            },
            {"kind": "return", "sequence": 2, "operation": "GET /quote", "status": 500},
        ],
    }
    if setup is not None:
        read = {"kind": "effect", "sequence": 2, "operation": "GET /quote", "effect": "read"}
        document["events"].insert(2, {**read, "resource": "pg", "exchange": pg_exchange(setup)})
        document["events"][-1]["sequence"] = 3
    for event in document["events"]:
        event.update(traceId="4bf92f3577b34da6a3ce929d0e0e4736", spanId="00f067aa0ba902b7")
    if envelope is not None:
        document["envelope"] = envelope
    return document


GOOD_ENVELOPE = {"observedAtMs": 1_753_617_600_000, "replaySeed": "00ff00ff00ff00ff", "tz": "UTC"}
HOSTILE_ENVELOPES = [
    pytest.param({**GOOD_ENVELOPE, "tz": NUL_TZ}, "tz", id="nul-in-tz"),
    pytest.param({**GOOD_ENVELOPE, "tz": "Europe/Paris\n"}, "tz", id="newline-in-tz"),
    pytest.param({**GOOD_ENVELOPE, "tz": "x" * 300}, "tz", id="long-tz"),
    pytest.param({**GOOD_ENVELOPE, "replaySeed": "not-hex!"}, "replaySeed", id="seed"),
    pytest.param({**GOOD_ENVELOPE, "observedAtMs": 10**20}, "observedAtMs", id="clock"),
]


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def check(
    target: Path, command: str, environ: dict[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command("check", str(target), "--exec", command, *flags),
        env=environ,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def launched(*prefix: str) -> str:
    parts = (*prefix, str(LAUNCHER), sys.executable, str(APP))
    return " ".join(shlex.quote(part) for part in parts)


@pytest.mark.parametrize(("envelope", "field"), HOSTILE_ENVELOPES)
def test_check_refuses_a_hostile_capsule_before_anything_runs(
    tmp_path: Path, canaries: tuple[Canary, Canary], envelope: dict[str, Any], field: str
) -> None:
    upstream, database = canaries
    path = write(tmp_path / "capsule.json", capsule(envelope))
    done = check(path, launched(), app_environ(upstream, database))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"reproit-otel check: {path}: capsule envelope: {field} must")
    assert (upstream.connections, database.connections) == ([], [])


@pytest.mark.parametrize(("setup", "problem"), HOSTILE_SETUPS)
def test_check_refuses_connection_setup_it_cannot_serve_before_anything_runs(
    tmp_path: Path, canaries: tuple[Canary, Canary], setup: list[dict[str, Any]], problem: str
) -> None:
    upstream, database = canaries
    path = write(tmp_path / "capsule.json", capsule(GOOD_ENVELOPE, setup))
    done = check(path, launched(), app_environ(upstream, database))
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"reproit-otel check: {path}: events[2].exchange.{problem}")
    assert "; replay cannot serve this connection" in done.stderr
    assert (upstream.connections, database.connections) == ([], [])


@pytest.mark.parametrize(
    ("envelope", "setup", "cause"),
    [
        pytest.param(
            {**GOOD_ENVELOPE, "tz": NUL_TZ}, None, "capsule envelope: tz must be", id="envelope"
        ),
        pytest.param(
            GOOD_ENVELOPE,
            HOSTILE_SETUPS[0].values[0],
            f"events[2].exchange.{HOSTILE_SETUPS[0].values[1]}",
            id="connection-setup",
        ),
    ],
)
def test_the_application_stops_instead_of_serving_a_capsule_it_cannot_arm(
    tmp_path: Path,
    canaries: tuple[Canary, Canary],
    envelope: dict[str, Any],
    setup: list[dict[str, Any]] | None,
    cause: str,
) -> None:
    upstream, database = canaries
    path = write(tmp_path / "capsule.json", capsule(envelope, setup))
    port = free_port()
    app = subprocess.Popen(
        [str(LAUNCHER), sys.executable, "-u", str(APP)],
        env=app_environ(upstream, database, REPROIT_REPLAY=str(path), PORT=str(port)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert app.stdout is not None
    first = app.stdout.readline().strip()
    if first == "listening":  # serving live: what a replay must never do
        httpx.get(f"http://127.0.0.1:{port}/quote", timeout=30)
    out, err = app.communicate(timeout=RUN_TIMEOUT_S) if first != "listening" else ("", "")
    if app.poll() is None:
        app.kill()
        app.communicate(timeout=30)
    assert (first, out, app.returncode) == ("", "", REPLAY_FAILED_EXIT)
    [failed] = [line for line in err.splitlines() if line.startswith(REPLAY_FAILED_MARKER)]
    payload = json.loads(failed[len(REPLAY_FAILED_MARKER) :])
    assert payload["capsule"] == str(path)
    assert payload["error"].startswith(f"CapsuleError: {path}: {cause}")
    assert err.splitlines()[-1].startswith(
        f"reproit-otel: the replay of REPROIT_REPLAY={path} could not be armed (CapsuleError: "
    )
    assert (upstream.connections, database.connections) == ([], [])


def test_check_names_the_cause_when_the_application_cannot_arm(
    tmp_path: Path, canaries: tuple[Canary, Canary]
) -> None:
    # The capsule is fine; a setting next to REPROIT_REPLAY is not, so nothing is armed.
    upstream, database = canaries
    path = write(tmp_path / "capsule.json", capsule(GOOD_ENVELOPE))
    done = check(
        path, launched("env", "REPROIT_FLUSH_INTERVAL_MS=soon"), app_environ(upstream, database)
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        "reproit-otel check: the application could not arm the replay and stopped before "
        "serving: ConfigurationError: REPROIT_FLUSH_INTERVAL_MS: "
    )
    assert done.stderr.rstrip().endswith("the recorded request was not sent")
    assert (upstream.connections, database.connections) == ([], [])


def test_check_without_the_launcher_never_fires_the_request(
    tmp_path: Path, canaries: tuple[Canary, Canary]
) -> None:
    upstream, database = canaries
    path = write(tmp_path / "capsule.json", capsule(GOOD_ENVELOPE))
    command = " ".join(shlex.quote(part) for part in (sys.executable, str(APP)))
    done = check(path, command, app_environ(upstream, database), "--boot-timeout", "5")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        "reproit-otel check: the application answers HTTP on $PORT but never reported that "
        "replay is armed (no REPROIT:REPLAY line within 5 s): it runs live, without replay."
    )
    assert (upstream.connections, database.connections) == ([], [])


def test_the_check_and_the_bootstrap_agree_on_the_failure_marker() -> None:
    assert REPLAY_FAILED_MARKER == VERDICT_FAILED_MARKER == "REPROIT:REPLAY-FAILED "


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    folder = tmp_path_factory.mktemp("closed-ingest")
    server = ServedIngest(f"sqlite:///{folder / 'ingest.db'}", "--api-key", KEY)
    yield server
    assert server.stop() == 0


def with_envelope(batch: dict[str, Any], **attributes: Any) -> dict[str, Any]:
    for entry in batch["events"]:
        event = entry["event"]
        if event["kind"] == "checkpoint" and event["name"] == "determinism-envelope":
            event["attributes"] = {**event["attributes"], **attributes}
    return batch


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({"tz": NUL_TZ}, id="nul-in-tz"),
        pytest.param({"tz": "Europe/Paris\n"}, id="newline-in-tz"),
        pytest.param({"replaySeed": "not-hex!"}, id="seed"),
        pytest.param({"observedAtMs": 10**17}, id="clock"),
    ],
)
def test_the_ingest_refuses_a_batch_whose_envelope_cannot_arm(
    ingest: ServedIngest, attributes: dict[str, Any]
) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    url = f"{ingest.base_url}/v1/capture-batches"
    body = json.dumps(with_envelope(built_batch(), **attributes)).encode()
    answer = httpx.post(url, content=body, headers=headers, timeout=60)
    refusal = answer.json()["error"]
    assert (answer.status_code, refusal["rule"], refusal["field"]) == (
        400,
        "determinism-envelope",
        "batch.events[2].event.attributes",
    )


def test_the_ingest_accepts_an_envelope_that_arms(ingest: ServedIngest) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    url = f"{ingest.base_url}/v1/capture-batches"
    batch = with_envelope(built_batch(), tz="America/Argentina/Buenos_Aires")
    answer = httpx.post(url, content=json.dumps(batch).encode(), headers=headers, timeout=60)
    assert answer.status_code == 202


def pg_batch(setup: list[dict[str, Any]]) -> dict[str, Any]:
    """A failing ``GET /quote`` batch whose one exchange is the statement carrying ``setup``."""
    context = TraceContext(trace_id="cap-1-1", capture_envelope=True, replay_seed=SEED)
    trace = BackendTrace.begin(context, "GET /quote", input={}, wall_ms=lambda: 1_753_617_600_000)
    trace.effect("read", resource="pg", key=SELECT_TEXT, exchange=pg_exchange(setup))
    trace.finish({"error": "quote failed"}, 500, False, True)
    return build_capture_batch(
        queued(trace),
        config=CaptureSettings(project_id="shop"),
        environment=CaptureEnvironment(
            now_ms=1_753_617_600_500,
            batch_number=1,
            runtime="python 3.11.0",
            os="linux",
            arch="x64",
            tz="UTC",
        ),
    )


@pytest.mark.parametrize(("setup", "problem"), HOSTILE_SETUPS)
def test_the_ingest_refuses_a_batch_whose_connection_setup_cannot_be_served(
    ingest: ServedIngest, setup: list[dict[str, Any]], problem: str
) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    batch = pg_batch(setup)
    before = httpx.get(f"{ingest.base_url}/v1/occurrences", headers=headers, timeout=60)
    answer = httpx.post(
        f"{ingest.base_url}/v1/capture-batches",
        content=json.dumps(batch).encode(),
        headers=headers,
        timeout=60,
    )
    refusal = answer.json()["error"]
    field, _, message = problem.partition(" ")
    [index] = [n for n, e in enumerate(batch["events"]) if e["event"]["kind"] == "state-access"]
    assert (answer.status_code, refusal["rule"], refusal["field"]) == (
        400,
        "connection-setup",
        f"batch.events[{index}].event.value.value.exchange.{field}",
    )
    assert refusal["message"].startswith(message)
    # Nothing of it was stored: the occurrences are what they were.
    after = httpx.get(f"{ingest.base_url}/v1/occurrences", headers=headers, timeout=60)
    assert (before.status_code, after.json()) == (200, before.json())


def test_the_ingest_accepts_connection_setup_replay_can_serve(ingest: ServedIngest) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    answer = httpx.post(
        f"{ingest.base_url}/v1/capture-batches",
        content=json.dumps(pg_batch(GOOD_SETUP)).encode(),
        headers=headers,
        timeout=60,
    )
    assert answer.status_code == 202


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
