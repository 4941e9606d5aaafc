"""``pull`` and ``check OCC`` against a hostile ingest on loopback, and a planted symbolic link.

The ingest here is a plain HTTP server that answers the capsule route the way an attacker (or
a broken proxy) would: an endless body, or one byte at a time forever. The CLI runs as a real
subprocess; it must stop with exit 2 and one clear line, bounded in bytes and in total time,
and write nothing. ``check OCC`` must not write a pulled capsule through a symbolic link
planted where it saves capsules.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from reproit_otel.cli.occurrences import MAX_ANSWER_BYTES
from tests.integration.served_ingest import cli_command
from tests.integration.upstream import serving

CAPSULE = {
    "format": "reproit-backend-capture",
    "version": 2,
    "operation": "GET /x",
    "oracle": "backend-server-error",
    "events": [],
}


class _Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        try:
            if "/endless/" in self.path:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("connection", "close")
                self.end_headers()
                block = b"[" * 65536
                while True:
                    self.wfile.write(block)
            elif "/trickle/" in self.path:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("connection", "close")
                self.end_headers()
                while True:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                body = json.dumps(CAPSULE).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
        except OSError:  # the client hung up, as it should
            pass


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serving(_Hostile) as base:
        yield base


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(*args),
        check=False,
        capture_output=True,
        text=True,
        timeout=90,  # far past the bounds under test: reaching it fails the test
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("REPROIT_")},
    )


def test_an_endless_answer_is_cut_at_the_byte_bound(hostile: str, tmp_path: Path) -> None:
    output = tmp_path / "capsule.json"
    done = _run("pull", "endless", "-o", str(output), "--ingest", hostile, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"reproit-otel pull: the ingest at {hostile} sent more than {MAX_ANSWER_BYTES} bytes "
        "in one answer; refused (is --ingest an ingest URL?)\n"
    )
    assert not output.exists()


def test_a_trickling_answer_is_cut_at_the_total_timeout(hostile: str, tmp_path: Path) -> None:
    output = tmp_path / "capsule.json"
    args = ("pull", "trickle", "-o", str(output), "--ingest", hostile, "--timeout", "2")
    done = _run(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        f"reproit-otel pull: the ingest at {hostile} did not answer within 2 s (--timeout); "
        "is it overloaded or is --ingest another server?\n"
    )
    assert not output.exists()


@pytest.mark.parametrize("planted", ["file", "folder"])
def test_check_refuses_to_write_a_pulled_capsule_through_a_symlink(
    hostile: str, tmp_path: Path, planted: str
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    precious = victim / "occ_planted.json"
    precious.write_text("precious")
    capsules = tmp_path / "project" / ".reproit" / "capsules"
    if planted == "file":
        capsules.mkdir(parents=True)
        (capsules / "occ_planted.json").symlink_to(precious)
        link = capsules / "occ_planted.json"
    else:
        capsules.parent.mkdir(parents=True)
        capsules.symlink_to(victim, target_is_directory=True)
        link = capsules
    done = _run("check", "occ_planted", "--ingest", hostile, cwd=tmp_path / "project")
    assert done.returncode == 2
    shown = os.path.join(".reproit", "capsules", "occ_planted.json")
    assert done.stderr.strip().endswith(
        f"{shown if planted == 'file' else os.path.join('.reproit', 'capsules')} is a symbolic "
        "link: refusing to write the pulled capsule through it"
    )
    assert precious.read_text() == "precious"
    assert sorted(p.name for p in victim.iterdir()) == ["occ_planted.json"]
    assert link.is_symlink()
