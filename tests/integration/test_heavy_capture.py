"""A heavy failing request travels whole and replays: 1,000 statements and 300 HTTP calls.

A Flask page with no reproit-otel code (``apps/heavy_app.py``) runs under the real
``opentelemetry-instrument`` launcher with the ``reproit`` exporter and a real ``reproit-otel
serve``. ``GET /report`` runs 1,000 statements on a real PostgreSQL and makes 300 calls to a
real loopback upstream answering about 8 KB each, then answers 500. That is far past the
256-event trace limit and the 48 KiB batch bound: the whole capsule goes to the ingest as a
content-addressed artifact before the batch that names it. Then the app, the upstream and
PostgreSQL are stopped, ``reproit-otel pull`` fetches the capsule (every exchange), and
``reproit-otel check OCC`` replays it: *reproduced*, with the live answer byte for byte.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from reproit_otel.wire.artifacts import CAPSULE_MEDIA_TYPE
from reproit_otel.wire.validate import validate_capture_batch
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.test_replay_loop import LAUNCHER, answers, clean_environ, free_port
from tests.pgserver import ThrowawayPostgres

APP = Path(__file__).resolve().parent / "apps" / "heavy_app.py"
KEY = "heavy-key"
STATEMENTS = 1000
CALLS = 300
CHECK_TIMEOUT_S = 300

pytestmark = pytest.mark.skipif(not LAUNCHER.exists(), reason="opentelemetry-instrument missing")


class _Items(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        item = int(parse_qs(urlsplit(self.path).query)["i"][0])
        # About 8 KB; a float written 1.0 and keys out of order, as real services answer.
        body = json.dumps({"i": item, "price": 1.0, "note": "n" * 7950}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass
class Heavy:
    ingest: ServedIngest
    database_file: Path
    occurrence: str
    live_status: int
    live_body: bytes
    upstream: str
    database: str
    workdir: Path


def _wait_for_occurrence(ingest: ServedIngest) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = httpx.get(
            f"{ingest.base_url}/v1/occurrences", headers={"authorization": f"Bearer {KEY}"}
        ).json()["occurrences"]
        if rows and rows[0]["capsuleAvailable"]:
            [row] = rows
            assert (row["operation"], row["status"]) == ("GET /report", 500)
            identifier: str = row["id"]
            return identifier
        time.sleep(0.2)
    raise AssertionError(f"no occurrence reached the ingest: {ingest.lines}")


@pytest.fixture(scope="module")
def heavy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Heavy]:
    workdir = tmp_path_factory.mktemp("heavy")
    database_file = workdir / "ingest.db"
    ingest = ServedIngest(f"sqlite:///{database_file}", "--api-key", KEY)
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Items)
    Thread(target=upstream.serve_forever, daemon=True).start()
    upstream_url = f"http://127.0.0.1:{upstream.server_address[1]}"
    postgres = ThrowawayPostgres()
    app: subprocess.Popen[str] | None = None
    try:
        postgres.start()
        app_port = free_port()
        app = subprocess.Popen(
            [str(LAUNCHER), sys.executable, "-u", str(APP)],
            env=clean_environ(
                PORT=str(app_port),
                UPSTREAM=upstream_url,
                DATABASE_URL=postgres.dsn,
                OTEL_SERVICE_NAME="heavy",
                OTEL_TRACES_EXPORTER="reproit",
                OTEL_METRICS_EXPORTER="none",
                OTEL_LOGS_EXPORTER="none",
                REPROIT_ENDPOINT=f"{ingest.base_url}/v1/capture-batches",
                REPROIT_API_KEY=KEY,
                REPROIT_APP_ID="heavy",
                REPROIT_FLUSH_INTERVAL_MS="100",
                REPROIT_REQUEST_TIMEOUT_MS="30000",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert app.stdout is not None
        assert app.stdout.readline().strip() == "listening", app.communicate(timeout=10)
        live = httpx.get(f"http://127.0.0.1:{app_port}/report", timeout=120)
        occurrence = _wait_for_occurrence(ingest)
        app.terminate()
        app.communicate(timeout=30)
        upstream.shutdown()
        upstream.server_close()
        postgres.stop()
        assert not answers(upstream.server_address[1]) and not answers(postgres.port)
        yield Heavy(
            ingest=ingest,
            database_file=database_file,
            occurrence=occurrence,
            live_status=live.status_code,
            live_body=live.content,
            upstream=upstream_url,
            database=postgres.dsn,
            workdir=workdir,
        )
    finally:
        if app is not None and app.poll() is None:
            app.kill()
            app.communicate(timeout=30)
        if postgres.data.exists():
            postgres.stop()
        assert ingest.stop() == 0


def _stored(heavy: Heavy, sql: str) -> list[Any]:
    with sqlite3.connect(heavy.database_file) as connection:
        return list(connection.execute(sql))


def test_the_batch_is_valid_and_names_the_stored_artifact(heavy: Heavy) -> None:
    assert heavy.live_status == 500
    [(body,)] = _stored(heavy, "SELECT body FROM reproit_batches")
    batch = json.loads(body)
    assert validate_capture_batch(batch) == []
    [artifact] = batch["artifacts"]
    assert (artifact["mediaType"], artifact["kind"]) == (CAPSULE_MEDIA_TYPE, "request-trace")
    stored = _stored(heavy, "SELECT id, bytes FROM reproit_artifacts")
    assert stored == [(artifact["id"], artifact["bytes"])]
    assert all(c["completeness"] == "complete" for c in batch["capabilities"])


def test_pull_gets_every_exchange(heavy: Heavy) -> None:
    target = heavy.workdir / "pulled.json"
    done = subprocess.run(
        cli_command(
            "pull",
            heavy.occurrence,
            "-o",
            str(target),
            "--ingest",
            heavy.ingest.base_url,
            "--api-key",
            KEY,
        ),
        cwd=heavy.workdir,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    capsule = json.loads(target.read_text(encoding="utf-8"))
    exchanges = [e["exchange"] for e in capsule["events"] if e["kind"] == "effect"]
    sql = [x for x in exchanges if x["protocol"] == "pg"]
    http = [x for x in exchanges if x["protocol"] == "http"]
    assert [x["request"]["text"] for x in sql].count("SELECT %s::int * 2, %s::text") == STATEMENTS
    assert [x["request"]["url"] for x in http] == [
        f"{heavy.upstream}/item?i={item}" for item in range(CALLS)
    ]
    assert capsule["events"][-1]["kind"] == "return"
    assert capsule["events"][-1]["status"] == 500


def test_the_replay_reproduces_with_everything_stopped(heavy: Heavy) -> None:
    command = " ".join(shlex.quote(str(part)) for part in (LAUNCHER, sys.executable, APP))
    done = subprocess.run(
        cli_command(
            "check",
            heavy.occurrence,
            "--exec",
            command,
            "--json",
            "--ingest",
            heavy.ingest.base_url,
            "--api-key",
            KEY,
        ),
        cwd=heavy.workdir,
        env=clean_environ(
            OTEL_TRACES_EXPORTER="none",
            OTEL_METRICS_EXPORTER="none",
            OTEL_LOGS_EXPORTER="none",
            UPSTREAM=heavy.upstream,
            DATABASE_URL=heavy.database,
        ),
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        check=False,
    )
    result = json.loads(done.stdout)
    assert (done.returncode, result["verdict"], result["divergences"]) == (
        1,
        "reproduced",
        [],
    ), done.stderr
    observed = result["observedResult"]
    assert (observed["status"], observed["body"]) == (500, heavy.live_body.decode())
    assert observed["replay"]["exchanges"] >= STATEMENTS + CALLS
