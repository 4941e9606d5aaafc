"""The whole loop with real parts: capture a failing request, stop everything, replay it.

A Flask app with no reproit-otel code (``apps/replay_loop_app.py``) runs under the real
``opentelemetry-instrument`` launcher with ``OTEL_TRACES_EXPORTER=reproit`` and sends its
failures to a real ``reproit-otel serve``. Its ``GET /quote`` calls a real loopback upstream
twice with requests (the second call streamed) and runs two statements on a real PostgreSQL
(the second fails) before answering 500. Then the app, the upstream and PostgreSQL are
stopped, and ``reproit-otel check OCC`` (the real CLI, pulling the capsule from the ingest)
replays the occurrence against variants of the app:

* unchanged: *reproduced* (exit 1) with the live run's status and body, byte for byte;
* the bug fixed: *fixed* (exit 0);
* asking for another URL: *diverged* (exit 3), the DIVERGENCE line naming that call;
* also calling ``urllib.request`` on a non-loopback address: refused before any packet
  leaves (the app will not even try without the tripwire), a ``socket`` divergence;
* twice with the clock and random values in the body: both replays answer the same bytes,
  with the clock at the capsule's recorded instant and the recorded seed's draws.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.wire.rng import ReplayRNG
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.upstream import SSE_EVENTS, Upstream
from tests.pgserver import ThrowawayPostgres

APP = Path(__file__).resolve().parent / "apps" / "replay_loop_app.py"
LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")
KEY = "loop-key"
CHECK_TIMEOUT_S = 180


def clean_environ(**extra: str) -> dict[str, str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "REPROIT_")) or key == "REPROIT_STRICT_INTERNAL"
    }
    environ.update(extra)
    return environ


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class Loop:
    ingest: ServedIngest
    occurrence: str
    capsule: dict[str, Any]
    live_status: int
    live_body: bytes
    upstream: str
    database: str
    workdir: Path

    def check(self, target: str | None = None, **flags: str) -> tuple[int, dict[str, Any]]:
        """``reproit-otel check`` of the occurrence (or ``target``) against the app."""
        command = " ".join(shlex.quote(str(part)) for part in (LAUNCHER, sys.executable, APP))
        done = subprocess.run(
            cli_command(
                "check",
                target or self.occurrence,
                "--exec",
                command,
                "--json",
                "--ingest",
                self.ingest.base_url,
                "--api-key",
                KEY,
            ),
            cwd=self.workdir,
            env=clean_environ(
                OTEL_TRACES_EXPORTER="none",
                OTEL_METRICS_EXPORTER="none",
                OTEL_LOGS_EXPORTER="none",
                UPSTREAM=self.upstream,
                DATABASE_URL=self.database,
                **flags,
            ),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
        try:
            result: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            message = f"check gave no JSON (exit {done.returncode}):\n{done.stderr}"
            raise AssertionError(message) from None
        return done.returncode, result


def wait_for_occurrence(ingest: ServedIngest) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = httpx.get(
            f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {KEY}"}
        ).json()["occurrences"]
        ready = [row for row in rows if row["capsuleAvailable"]]
        if ready:
            [row] = ready
            assert (row["operation"], row["status"]) == ("GET /quote", 500)
            identifier: str = row["id"]
            return identifier
        time.sleep(0.1)
    raise AssertionError(f"no occurrence reached the ingest: {ingest.lines}")


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    workdir = tmp_path_factory.mktemp("replay-loop")
    ingest = ServedIngest(f"sqlite:///{workdir / 'ingest.db'}", "--api-key", KEY)
    upstream = Upstream()
    postgres = ThrowawayPostgres()
    app: subprocess.Popen[str] | None = None
    try:
        postgres.start()
        port = int(upstream.base.rsplit(":", 1)[1])
        app_port = free_port()
        app = subprocess.Popen(
            [str(LAUNCHER), sys.executable, "-u", str(APP)],
            env=clean_environ(
                PORT=str(app_port),
                UPSTREAM=upstream.base,
                DATABASE_URL=postgres.dsn,
                OTEL_SERVICE_NAME="loop",
                OTEL_TRACES_EXPORTER="reproit",
                OTEL_METRICS_EXPORTER="none",
                OTEL_LOGS_EXPORTER="none",
                REPROIT_ENDPOINT=f"{ingest.base_url}/v1/capture-batches",
                REPROIT_API_KEY=KEY,
                REPROIT_APP_ID="loop",
                REPROIT_FLUSH_INTERVAL_MS="100",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "listening", app.communicate(timeout=10)
        live = httpx.get(f"http://127.0.0.1:{app_port}/quote", timeout=30)
        occurrence = wait_for_occurrence(ingest)
        capsule = httpx.get(
            f"{ingest.base_url}/v1/occurrences/{occurrence}/capsule",
            headers={"authorization": f"Bearer {KEY}"},
        ).json()
        # Everything the app depends on is really stopped before any replay.
        app.terminate()
        app.communicate(timeout=30)
        upstream.stop()
        postgres.stop()
        assert not answers(port) and not answers(postgres.port) and not answers(app_port)
        yield Loop(
            ingest=ingest,
            occurrence=occurrence,
            capsule=capsule,
            live_status=live.status_code,
            live_body=live.content,
            upstream=upstream.base,
            database=postgres.dsn,
            workdir=workdir,
        )
    finally:
        if app is not None and app.poll() is None:
            app.kill()
            app.communicate(timeout=30)
        upstream.stop()
        if postgres.data.exists():
            postgres.stop()
        assert ingest.stop() == 0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exchanges(capsule: dict[str, Any]) -> list[Any]:
    return [event["exchange"] for event in capsule["events"] if event["kind"] == "effect"]


def test_the_capture_holds_every_call_of_the_failing_request(loop: Loop) -> None:
    assert (loop.live_status, json.loads(loop.live_body)) == (
        500,
        {
            "error": "pricing failed",
            "rate": {"rate": 1.5, "currency": "EUR"},
            "chunks": [event.decode() for event in SSE_EVENTS],
            "row": [42, "grüße"],
            "failure": {"class": "UndefinedTable", "pgcode": "42P01"},
        },
    )
    seen = [
        (
            exchange["protocol"],
            exchange["request"].get("url") or exchange["request"].get("text"),
            exchange["response"].get("status") or exchange["response"].get("error", {}).get("code"),
            len(exchange["response"].get("stream", {}).get("chunks", [])),
        )
        for exchange in exchanges(loop.capsule)
    ]
    assert seen == [
        ("http", f"{loop.upstream}/json", 200, 0),
        ("http", f"{loop.upstream}/sse", 200, len(SSE_EVENTS)),
        ("pg", "SELECT %s::int + 1, %s::text", None, 0),
        ("pg", "SELECT total FROM ledger_that_does_not_exist", "42P01", 0),
    ]
    assert loop.capsule["events"][-1]["status"] == 500


def test_the_replay_reproduces_the_live_answer_byte_for_byte(loop: Loop) -> None:
    code, result = loop.check()
    assert (code, result["verdict"], result["divergences"]) == (1, "reproduced", []), result
    observed = result["observedResult"]
    assert (observed["status"], observed["body"]) == (loop.live_status, loop.live_body.decode())
    assert observed["bodyBytes"] == len(loop.live_body)
    saved = loop.workdir / ".reproit" / "capsules" / f"{loop.occurrence}.json"
    assert observed["replay"] == {"capsule": str(saved.resolve()), "exchanges": 4}
    assert result["capture"] == {"mode": "production-hermetic", "operation": "GET /quote"}


def test_the_fixed_app_replays_as_fixed(loop: Loop) -> None:
    code, result = loop.check(LOOP_FIXED="1")
    assert (code, result["verdict"], result["observedResult"]["status"]) == (0, "fixed", 200)
    assert json.loads(result["observedResult"]["body"])["ok"] is True


def test_a_call_to_another_url_diverges_and_names_it(loop: Loop) -> None:
    code, result = loop.check(LOOP_OTHER_URL="1")
    assert (code, result["verdict"]) == (3, "diverged"), result
    [divergence] = result["divergences"]
    recorded = exchanges(loop.capsule)[0]["request"]
    assert divergence == {
        "protocol": "http",
        "got": {"method": "GET", "url": f"{loop.upstream}/json?currency=USD"},
        "expected": recorded,
        "consumed": 0,
        "total": 4,
    }


def test_an_unpatched_client_is_refused_with_a_socket_divergence(loop: Loop) -> None:
    code, result = loop.check(LOOP_UNPATCHED="1")
    assert (code, result["verdict"]) == (3, "diverged"), result
    assert result["divergences"] == [
        {
            "protocol": "socket",
            "got": {"address": "10.255.255.1", "port": 80, "family": "AF_INET"},
            "expected": None,
            "consumed": 4,
            "total": 4,
        }
    ]
    # The app got a refusal, not a timeout: nothing was sent to 10.255.255.1.
    body = json.loads(result["observedResult"]["body"])
    assert body["unpatched"] == (
        "ConnectionRefusedError: [Errno 111] reproit replay refused a connection to "
        "10.255.255.1:80: the capsule does not serve this client, and a replay never reaches "
        "a live system"
    )


def test_two_replays_pin_the_clock_and_random_values_identically(loop: Loop) -> None:
    capsule = dict(loop.capsule)
    # A recorded instant far from now makes the pinning visible; the hour boundary is 800 s
    # past it, so the clock ticking through two boots cannot cross it.
    capsule["envelope"] = {**capsule["envelope"], "observedAtMs": 1_000_000_000_000, "tz": "UTC"}
    path = loop.workdir / "pinned.json"
    path.write_text(json.dumps(capsule), encoding="utf-8")
    bodies = []
    for _ in range(2):
        code, result = loop.check(str(path), LOOP_ENVELOPE="1")
        assert (code, result["verdict"]) == (1, "reproduced"), result
        bodies.append(result["observedResult"]["body"])
    assert bodies[0] == bodies[1]
    rng = ReplayRNG(capsule["envelope"]["replaySeed"])
    assert json.loads(bodies[0])["envelope"] == {
        "hour": "2001-09-09 01",
        "utcHour": "2001-09-09 01",
        "today": "2001-09-09",
        "epochHour": 1_000_000_000 // 3600,
        "epochNsHour": 1_000_000_000 // 3600,
        "random": [rng.random() for _ in range(3)],
    }
