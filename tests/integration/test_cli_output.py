"""Captured text cannot drive the terminal of whoever runs the CLI.

A request path is chosen by whoever sends the request. One that holds an OSC title sequence,
a screen clear, a new line with a fake verdict and a bidi override is captured by a real
``reproit-otel serve``; ``list``, ``show``, ``pull`` (to a terminal and to a pipe),
``check`` and ``doctor`` run as real subprocesses and must print every such character as a
visible escape. A capsule whose operation no HTTP request line can carry makes ``check
--exec`` exit 2 with a message naming the field, before anything is started. A reader that
went away (``check ... | head``) costs no traceback, and ``check`` keeps its verdict's code.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reproit_otel.wire.canonical import canonical_json
from tests.integration.capture_helpers import built_batch
from tests.integration.served_ingest import ServedIngest, cli_command

KEY = "team-key"
HOSTILE = "GET /fail/\x1b]0;pwned\x07\x1b[2J\nverdict: FIXED \u202eexe.txt\x9b31m"
SHOWN = "GET /fail/\\x1b]0;pwned\\x07\\x1b[2J\\nverdict: FIXED \\u202eexe.txt\\x9b31m"
UNSAFE = ("\x1b", "\x07", "\u202e", "\x9b")


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_command(*args),
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "REPROIT_API_KEY": KEY},
    )


def _clean(result: subprocess.CompletedProcess[str]) -> bool:
    return not any(char in result.stdout + result.stderr for char in UNSAFE)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedIngest]:
    folder = tmp_path_factory.mktemp("ingest")
    server = ServedIngest(f"sqlite:///{folder / 'ingest.db'}", "--api-key", KEY)
    body = canonical_json(built_batch(HOSTILE)).encode()
    response = httpx.post(
        f"{server.base_url}/v1/capture-batches",
        content=body,
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    assert response.status_code == 202
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def occurrence(served: ServedIngest) -> str:
    listed = _run("list", "--json", "--ingest", served.base_url)
    [row] = json.loads(listed.stdout)["occurrences"]
    assert row["operation"] == HOSTILE  # the JSON value is intact ...
    assert _clean(listed)  # ... and its unsafe characters are \u escapes
    return str(row["id"])


def test_list_and_show_print_the_operation_escaped(served: ServedIngest, occurrence: str) -> None:
    listed = _run("list", "--ingest", served.base_url)
    assert listed.returncode == 0 and _clean(listed)
    assert listed.stdout.splitlines()[1].endswith(f"  {SHOWN}")
    assert len(listed.stdout.splitlines()) == 2  # the fake verdict line did not appear

    shown = _run("show", occurrence, "--ingest", served.base_url)
    assert shown.returncode == 0 and _clean(shown)
    assert f"operation        {SHOWN}" in shown.stdout.splitlines()
    assert not any(line.startswith("verdict") for line in shown.stdout.splitlines())

    as_json = _run("show", occurrence, "--json", "--ingest", served.base_url)
    assert _clean(as_json)
    assert json.loads(as_json.stdout)["operation"] == HOSTILE


def test_pull_keeps_exact_bytes_in_a_pipe_and_escapes_on_a_terminal(
    served: ServedIngest, occurrence: str
) -> None:
    piped = subprocess.run(
        cli_command("pull", occurrence, "--ingest", served.base_url),
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "REPROIT_API_KEY": KEY},
    )
    capsule = json.loads(piped.stdout)
    assert capsule["operation"] == HOSTILE
    assert "\u202e".encode() in piped.stdout  # exact bytes, as stored

    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            cli_command("pull", occurrence, "--ingest", served.base_url),
            stdout=follower,
            stderr=subprocess.PIPE,
            env={**os.environ, "REPROIT_API_KEY": KEY},
        )
        os.close(follower)
        received = bytearray()
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closes when the child exits
                break
            if not chunk:
                break
            received += chunk
        assert process.wait(timeout=60) == 0
        assert process.stderr is not None
        process.stderr.close()
    finally:
        os.close(leader)
    text = received.decode("utf-8").replace("\r\n", "\n")
    assert not any(char in text for char in UNSAFE)
    assert json.loads(text) == capsule  # the same JSON value


def test_check_prints_the_verdict_with_the_operation_escaped(
    served: ServedIngest, occurrence: str, tmp_path: Path
) -> None:
    path = tmp_path / "capsule.json"
    pulled = _run("pull", occurrence, "--ingest", served.base_url, "-o", str(path))
    assert pulled.returncode == 0
    offline = _run("check", str(path))
    assert _clean(offline)
    lines = offline.stdout.splitlines()
    assert lines[0] == f"operation:   {SHOWN}"
    assert [line for line in lines if line.startswith("verdict")] == [lines[-1]]


def test_check_refuses_a_request_line_no_request_can_carry(
    served: ServedIngest, occurrence: str, tmp_path: Path
) -> None:
    path = tmp_path / "capsule.json"
    _run("pull", occurrence, "--ingest", served.base_url, "-o", str(path))
    started = tmp_path / "started"
    boot = f"{sys.executable} -c \"open('{started}', 'w').close()\""
    result = _run("check", str(path), "--exec", boot)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "reproit-otel check: the capsule's operation path holds the control character "
        "'\\x1b' at offset 6; an HTTP request cannot carry it, fix the capsule's \"operation\" "
        "field\n"
    )
    assert not started.exists()

    capsule = json.loads(path.read_text(encoding="utf-8"))
    capsule["operation"] = "G\tT /fail"
    path.write_text(json.dumps(capsule), encoding="utf-8")
    result = _run("check", str(path), "--exec", boot)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "reproit-otel check: the capsule's operation method 'G\\tT' is not an HTTP method (a "
        "token of letters, digits and !#$%&'*+.^_`|~-); fix the capsule's \"operation\" field\n"
    )


def test_doctor_prints_what_it_was_given_escaped(tmp_path: Path) -> None:
    result = _run(
        "doctor", "--import", "mod\x1b[2J\u202e", "--fixtures", str(tmp_path), cwd=tmp_path
    )
    assert _clean(result)
    assert "mod\\x1b[2J\\u202e" in result.stdout


def _to_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI with its standard output a pipe nobody reads any more (``... | head``
    after ``head`` exited): the read end is closed before the command starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            cli_command(*args),
            check=False,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "REPROIT_API_KEY": KEY},
        )
    finally:
        os.close(write_end)


def test_a_reader_that_went_away_ends_no_command_with_a_traceback(
    served: ServedIngest, occurrence: str, tmp_path: Path
) -> None:
    path = tmp_path / "capsule.json"
    assert _run("pull", occurrence, "--ingest", served.base_url, "-o", str(path)).returncode == 0
    read = _run("check", str(path))
    assert read.stdout  # it prints a verdict, and exits with its code
    # The verdict's exit code is kept: the command runs to its end, its output silenced.
    piped = _to_closed_pipe("check", str(path))
    assert (piped.returncode, piped.stderr) == (read.returncode, read.stderr)
    # A capsule written straight to standard output: exit 1, no traceback.
    pulled = _to_closed_pipe("pull", occurrence, "--ingest", served.base_url)
    assert pulled.returncode == 1
    assert "Traceback" not in pulled.stderr and "BrokenPipeError" not in pulled.stderr
