"""``reproit-otel check`` as a real subprocess: occurrence ids pulled from a real ingest, bad
input refused with exit code 2, and an application that never loaded the capsule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reproit_otel.wire.capsule import capsule_from_batch
from tests.integration.capture_helpers import built_batch
from tests.integration.served_ingest import ServedIngest, cli_command
from tests.integration.upstream import closed_port

KEY = "check-key"

# A server that answers 500 to everything and has no reproit-otel in it: it runs live.
LIVE_APP = """
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(500)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"no")
    do_POST = do_GET

    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    folder = tmp_path_factory.mktemp("check-ingest")
    server = ServedIngest(f"sqlite:///{folder / 'ingest.db'}", "--api-key", KEY)
    yield server
    assert server.stop() == 0


def recorded_capsule(operation: str = "GET /quote") -> dict[str, Any]:
    capsule = capsule_from_batch(built_batch(operation, trace_id="check-cli-capsule"))
    assert capsule is not None
    return capsule


def without_exchanges() -> dict[str, Any]:
    capsule = recorded_capsule()
    capsule["events"] = [e for e in capsule["events"] if e["kind"] != "effect"]
    return capsule


def check(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("REPROIT_", "OTEL_"))}
    environ.update(REPROIT_STRICT_INTERNAL="1", **env)
    return subprocess.run(
        cli_command("check", *args),
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def posted_occurrence(ingest: ServedIngest) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    batch = built_batch("POST /refunds", trace_id="check-cli-1")
    answer = httpx.post(f"{ingest.base_url}/v1/capture-batches", json=batch, headers=headers)
    assert answer.status_code < 300, answer.text
    rows = httpx.get(
        f"{ingest.base_url}/v1/occurrences",
        params={"operation": "POST /refunds"},
        headers=headers,
    ).json()["occurrences"]
    [row] = rows
    occurrence: dict[str, Any] = row
    return occurrence


def test_an_occurrence_id_is_pulled_saved_and_checked(ingest: ServedIngest, tmp_path: Path) -> None:
    occurrence = posted_occurrence(ingest)
    done = check(
        tmp_path, occurrence["id"], "--ingest", ingest.base_url, "--api-key", KEY, "--json"
    )
    saved = tmp_path / ".reproit" / "capsules" / f"{occurrence['id']}.json"
    assert done.stderr.splitlines() == [
        f"reproit-otel check: pulled occurrence {occurrence['id']} from {ingest.base_url} "
        f"into {Path('.reproit/capsules') / (occurrence['id'] + '.json')}"
    ]
    served = httpx.get(
        f"{ingest.base_url}/v1/occurrences/{occurrence['id']}/capsule",
        headers={"authorization": f"Bearer {KEY}"},
    ).content
    assert saved.read_bytes() == served
    result = json.loads(done.stdout)
    assert (done.returncode, result["verdict"], result["capture"]) == (
        1,
        "reproduced",
        {"mode": "offline", "operation": "POST /refunds"},
    )


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        (
            "occ_unknown",
            "reproit-otel check: occ_unknown is no file, and occurrence occ_unknown cannot be "
            "pulled: ",
        ),
        ("missing.json", "reproit-otel check: cannot read missing.json: "),
        ("sub/capsule", "reproit-otel check: cannot read sub/capsule: "),
    ],
)
def test_an_unknown_occurrence_or_a_missing_file_is_exit_2(
    ingest: ServedIngest, tmp_path: Path, argument: str, message: str
) -> None:
    done = check(tmp_path, argument, "--ingest", ingest.base_url, "--api-key", KEY)
    [line] = done.stderr.splitlines()
    assert (done.returncode, line.startswith(message), done.stdout) == (2, True, ""), line
    assert not (tmp_path / ".reproit").exists()


def test_an_ingest_that_does_not_answer_is_exit_2(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    done = check(tmp_path, "occ_abc", "--ingest", url)
    [line] = done.stderr.splitlines()
    assert done.returncode == 2
    assert line.startswith(
        f"reproit-otel check: occ_abc is no file, and occurrence occ_abc cannot be pulled: "
        f"no ingest answers at {url} ("
    ), line


def test_a_refused_key_is_exit_2(ingest: ServedIngest, tmp_path: Path) -> None:
    occurrence = posted_occurrence(ingest)
    done = check(tmp_path, occurrence["id"], "--ingest", ingest.base_url, "--api-key", "wrong")
    assert (done.returncode, done.stderr.splitlines()) == (
        2,
        [
            f"reproit-otel check: {occurrence['id']} is no file, and occurrence "
            f"{occurrence['id']} cannot be pulled: the ingest at {ingest.base_url} refused the "
            "API key; pass --api-key or set REPROIT_API_KEY to a key the ingest accepts"
        ],
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        (json.dumps({"format": "other", "version": 2, "events": []}), ""),
        (json.dumps({"format": "reproit-backend-capture", "version": 9, "events": []}), ""),
        (json.dumps(without_exchanges()), "records no dependency exchange"),
    ],
    ids=["not-json", "wrong-format", "wrong-version", "no-exchanges"],
)
def test_an_unusable_capsule_is_exit_2(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "capsule.json"
    path.write_text(content, encoding="utf-8")
    done = check(tmp_path, str(path), "--exec", "true")
    [line] = done.stderr.splitlines()
    assert (done.returncode, line.startswith("reproit-otel check: "), message in line) == (
        2,
        True,
        True,
    ), line


def test_an_application_that_never_armed_the_replay_is_never_sent_the_request(
    tmp_path: Path,
) -> None:
    # A live server answering 500 must not read as "reproduced", nor see the request at all.
    capsule = recorded_capsule()
    path = tmp_path / "capsule.json"
    path.write_text(json.dumps(capsule), encoding="utf-8")
    hits = tmp_path / "hits.txt"
    app = tmp_path / "live_app.py"
    app.write_text(
        LIVE_APP.replace(
            "    def do_GET(self):\n",
            "    def do_GET(self):\n"
            "        with open(os.environ['HITS'], 'a') as log:\n"
            "            log.write(self.command + ' ' + self.path + '\\n')\n",
        ),
        encoding="utf-8",
    )
    done = check(
        tmp_path,
        str(path),
        "--exec",
        f"{sys.executable} {app}",
        "--json",
        "--boot-timeout",
        "3",
        HITS=str(hits),
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(
        "reproit-otel check: the application answers HTTP on $PORT but never reported that "
        "replay is armed (no REPROIT:REPLAY line within 3 s): it runs live, without replay."
    )
    assert set(hits.read_text(encoding="utf-8").splitlines()) == {"GET /"}  # probes only
