"""The documents' commands, run as the documents spell them, with real parts.

Every command here is read from the Markdown (``tests/docs_commands.py``) and run through
``sh`` with the project's ``.venv/bin`` first on ``PATH``, as a reader who followed the setup
would. Only what cannot stay as written is replaced, and each test says what: a port
(``127.0.0.1:8765``, ``:5000``, ``localhost:8100``) becomes a free one, a fixed folder
(``/tmp/reproit-dump``) a temporary one, ``OCC`` the occurrence id, and ``reproit-otel serve``
gets ``--port 0`` (the ``list``/``show``/``pull`` commands then find it through
``REPROIT_INGEST_URL``, their documented default). The application of the guides
(``app.py``) is ``tests/integration/apps/orders_app.py``, an unmodified Flask service.

What each test covers, by document:

* README.md and docs/quickstart.md, "your own service": serve, the instrumented app, list,
  show, pull, check (REPRODUCED, then FIXED after the fix); docs/ingest.md's list filters
  and pull; docs/replay.md's check, of a file and of an occurrence id; the launch blocks of
  docs/quickstart.md and docs/capture.md.
* docs/capture.md, "seeing what would be captured": the debug dump, curl and cat.
* docs/boundary.md: ``REPROIT_TOOLS=record|replay pytest`` and ``reproit-otel doctor``.
* docs/ci.md and examples/ci/README.md: capture in pytest, check, the replay by hand.
* every documented ``reproit-otel serve`` command line: it starts, keys are enforced.
* docs/configuration.md: both regeneration commands reproduce the document.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import requests

from reproit_otel.ingest.server import LISTENING_PREFIX
from tests.docs_commands import (
    ROOT,
    block_commands,
    command_starting,
    commands_of,
    documents,
    exports,
)
from tests.integration.apps import orders_app
from tests.integration.pipeline_support import _free_port
from tests.integration.upstream import Upstream

BIN = Path(sys.executable).parent
NO_TELEMETRY = {
    "OTEL_TRACES_EXPORTER": "none",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
}
APP = Path(orders_app.__file__)

pytestmark = pytest.mark.skipif(
    "reproit" not in {e.name for e in entry_points(group="opentelemetry_traces_exporter")},
    reason="the `reproit` exporter entry point is not installed (pip install -e .)",
)


def _env(**extra: str) -> dict[str, str]:
    """A reader's shell: no OTEL_/REPROIT_ settings of ours, ``.venv/bin`` first on PATH."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OTEL_", "REPROIT_", "QUOTES_")) and name != "PYTEST_ADDOPTS"
    }
    env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        REPROIT_STRICT_INTERNAL="1",
        PYTHONDONTWRITEBYTECODE="1",
        **extra,
    )
    return env


def _sh(
    command: str, cwd: Path, env: dict[str, str], timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        shell=True,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _verdict(output: str) -> str:
    found = re.search(r"^verdict:\s+(\S+)", output, flags=re.M)
    assert found, output
    return found.group(1)


class Background:
    """A documented command running in the background (``sh -c '[NAME=value...] exec ...'``)."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        words = command.split(" ")
        assignments = list(itertools.takewhile(lambda w: re.match(r"^\w+=\S*$", w), words))
        rest = words[len(assignments) :]
        self.process = subprocess.Popen(
            ["sh", "-c", " ".join([*assignments, "exec", *rest])],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_prefix(self, prefix: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line: {self.lines}") from None
            if line is None:
                raise AssertionError(f"exited before {prefix!r}: {self.lines}")
            if line.startswith(prefix):
                return line[len(prefix) :]

    def wait_http(self, url: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                requests.get(url, timeout=1)
                return
            except requests.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{url} never answered: {self.lines}") from None
                time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
        try:
            code = self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            code = self.process.wait(10)
        self._reader.join(10)
        return code


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.stop()


def _serve(command: str, cwd: Path, env: dict[str, str]) -> tuple[Background, str]:
    served = Background(f"{command} --port 0", cwd, env)
    return served, served.wait_for_prefix(LISTENING_PREFIX)


def _rows(listed: str) -> list[list[str]]:
    """``reproit-otel list``'s table: ID COUNT STATUS LAST SEEN CAPSULE OPERATION."""
    return [line.split() for line in listed.splitlines()[1:] if line.strip()]


def _wait_for_rows(command: str, cwd: Path, env: dict[str, str]) -> list[list[str]]:
    deadline = time.monotonic() + 30
    while True:
        done = _sh(command, cwd, env)
        assert done.returncode == 0, done.stderr
        rows = _rows(done.stdout)
        if rows or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def _launch_block(path: str, first: str, ingest: str) -> tuple[dict[str, str], str]:
    """The exported variables (the ingest's address put in) and the launch line of a block."""
    block = block_commands(path, first)
    variables = {
        name: value.replace("http://127.0.0.1:8765", ingest)
        for name, value in exports(block).items()
    }
    return variables, block[-1]


# --- README.md, docs/quickstart.md, docs/ingest.md, docs/replay.md -------------------------


def test_the_five_minute_guide_captures_pulls_and_replays(
    upstream: Upstream, tmp_path: Path
) -> None:
    shutil.copy(APP, tmp_path / "app.py")
    serve = command_starting("README.md", "reproit-otel serve")
    assert serve == "reproit-otel serve --api-key dev-key"
    ingest, ingest_url = _serve(serve, tmp_path, _env())
    try:
        # The README's block, in one shell: the exports, then the launch line.
        variables, launch = _launch_block("README.md", "export OTEL_TRACES_EXPORTER", ingest_url)
        assert launch == "opentelemetry-instrument python app.py"
        port = _free_port()
        shell = _env(
            **variables,
            REPROIT_INGEST_URL=ingest_url,
            REPROIT_FLUSH_INTERVAL_MS="100",
            PORT=str(port),
            PRICING_URL=upstream.base,
        )
        app = Background(launch, tmp_path, shell)
        base = f"http://127.0.0.1:{port}"
        try:
            app.wait_http(base)
            fine = requests.post(f"{base}/orders", json={"cents": 250, "quantity": 2}, timeout=10)
            failing = requests.post(
                f"{base}/orders", json={"cents": 250, "quantity": 0}, timeout=10
            )
            assert (fine.status_code, fine.json()) == (200, {"per_item": 375, "total": 750})
            assert failing.status_code == 500
            listed = command_starting("README.md", "reproit-otel list")
            assert listed == "reproit-otel list --api-key dev-key"
            [row] = _wait_for_rows(listed, tmp_path, shell)
        finally:
            app.stop(signal.SIGINT)
        upstream.stop()
        occurrence = row[0]
        assert (row[1], row[2], row[-3], " ".join(row[-2:])) == ("1", "500", "yes", "POST /orders")

        # README: pull with the exported key.
        pull = command_starting("README.md", "reproit-otel pull").replace("OCC", occurrence)
        assert _sh(pull, tmp_path, shell).returncode == 0
        pulled = (tmp_path / "failure.json").read_bytes()

        # docs/quickstart.md and docs/ingest.md: the key on the command line, none exported.
        keyless = _env(REPROIT_INGEST_URL=ingest_url)
        for document in ("docs/quickstart.md", "docs/ingest.md"):
            for command in block_commands(document, "reproit-otel list"):
                done = _sh(command.replace("OCC", occurrence), tmp_path, keyless)
                assert done.returncode == 0, (command, done.stderr)
                if command.startswith("reproit-otel list"):
                    assert [r[0] for r in _rows(done.stdout)] == [occurrence], command
                if command.startswith("reproit-otel show"):
                    assert re.search(r"^operation\s+POST /orders$", done.stdout, flags=re.M)
        assert (tmp_path / "failure.json").read_bytes() == pulled
        assert (tmp_path / "capsule.json").read_bytes() == pulled

        # docs/replay.md: check pulls the occurrence itself, with the optional flags given.
        by_id = command_starting("docs/replay.md", "reproit-otel check occ_")
        assert by_id == 'reproit-otel check occ_... --exec "..." [--ingest URL] [--api-key KEY]'
        by_id = (
            by_id.replace("occ_...", occurrence)
            .replace('"..."', '"opentelemetry-instrument python app.py"')
            .replace("[--ingest URL]", f"--ingest {ingest_url}")
            .replace("[--api-key KEY]", "--api-key dev-key")
        )
        done = _sh(by_id, tmp_path, _env(**NO_TELEMETRY))
        assert (done.returncode, _verdict(done.stdout)) == (1, "REPRODUCED"), done.stderr
        saved = tmp_path / ".reproit" / "capsules" / f"{occurrence}.json"
        assert saved.read_bytes() == pulled
    finally:
        assert ingest.stop() == 0
    assert (tmp_path / "reproit-ingest.db").is_file()  # serve's default store, in the cwd

    # Replay with the ingest, the upstream and the app stopped: README/quickstart's check,
    # then docs/replay.md's on capsule.json; then the fix, and the same command again.
    check = block_commands("README.md", "OTEL_TRACES_EXPORTER=none")
    assert check == block_commands("docs/quickstart.md", "OTEL_TRACES_EXPORTER=none")
    done = _sh(check[0], tmp_path, shell)
    assert (done.returncode, _verdict(done.stdout)) == (1, "REPRODUCED"), done.stderr
    [replay] = block_commands("docs/replay.md", "OTEL_TRACES_EXPORTER=none")
    done = _sh(replay, tmp_path, shell)
    assert (done.returncode, _verdict(done.stdout)) == (1, "REPRODUCED"), done.stderr
    source = (tmp_path / "app.py").read_text(encoding="utf-8")
    (tmp_path / "app.py").write_text(source.replace(orders_app.BUG, orders_app.FIX), "utf-8")
    done = _sh(check[0], tmp_path, shell)
    assert (done.returncode, _verdict(done.stdout)) == (0, "FIXED"), done.stderr


@pytest.mark.parametrize(
    ("document", "first"),
    [("docs/quickstart.md", "export OTEL_TRACES_EXPORTER"), ("docs/capture.md", "pip install")],
)
def test_each_launch_block_uploads_the_failure(
    document: str, first: str, upstream: Upstream, tmp_path: Path
) -> None:
    shutil.copy(APP, tmp_path / "app.py")
    ingest, ingest_url = _serve(
        block_commands("docs/quickstart.md", "reproit-otel serve")[0], tmp_path, _env()
    )
    try:
        variables, launch = _launch_block(document, first, ingest_url)
        port = _free_port()
        shell = _env(
            **variables,
            REPROIT_INGEST_URL=ingest_url,
            REPROIT_FLUSH_INTERVAL_MS="100",
            PORT=str(port),
            PRICING_URL=upstream.base,
        )
        app = Background(launch, tmp_path, shell)
        try:
            app.wait_http(f"http://127.0.0.1:{port}")
            failing = requests.post(
                f"http://127.0.0.1:{port}/orders", json={"cents": 1, "quantity": 0}, timeout=10
            )
            assert failing.status_code == 500
            [row] = _wait_for_rows("reproit-otel list", tmp_path, shell)
        finally:
            app.stop(signal.SIGINT)
    finally:
        assert ingest.stop() == 0
    assert (row[1], row[2], row[-3], " ".join(row[-2:])) == ("1", "500", "yes", "POST /orders")


# --- docs/capture.md: the debug dump -------------------------------------------------------


def _json_documents(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    found, index = [], 0
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        value, index = decoder.raw_decode(text, index)
        found.append(value)
    return found


def test_the_debug_dump_shows_the_failing_operation(upstream: Upstream, tmp_path: Path) -> None:
    shutil.copy(APP, tmp_path / "app.py")
    dump = tmp_path / "reproit-dump"
    launch = command_starting("docs/capture.md", "REPROIT_DEBUG_DUMP=")
    port = _free_port()
    app = Background(
        launch.replace("/tmp/reproit-dump", str(dump)),
        tmp_path,
        _env(PORT=str(port), PRICING_URL=upstream.base),
    )
    try:
        app.wait_http(f"http://127.0.0.1:{port}")
        curl = command_starting("docs/capture.md", "curl ")
        answered = _sh(curl.replace("127.0.0.1:5000", f"127.0.0.1:{port}"), tmp_path, _env())
        assert answered.stdout.startswith("HTTP/1.1 500"), answered.stdout
        cat = command_starting("docs/capture.md", "cat ").replace("/tmp/reproit-dump", str(dump))
        deadline = time.monotonic() + 10
        while True:
            shown = _sh(cat, tmp_path, _env())
            operations = [events[0]["operation"] for events in _json_documents(shown.stdout)]
            if "GET /failing-route" in operations or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        app.stop(signal.SIGINT)
    [events] = [
        e for e in _json_documents(shown.stdout) if e[0]["operation"] == "GET /failing-route"
    ]
    summary = [
        (
            event["kind"],
            event.get("exchange", {}).get("request", {}).get("url"),
            event.get("status"),
        )
        for event in events
    ]
    assert summary == [
        ("start", None, None),
        ("effect", f"{upstream.base}/json", None),
        ("return", None, 500),
    ]
    assert events[-1]["effectsComplete"] is True


# --- docs/boundary.md: fixtures for tests, and reproit-otel doctor ---------------------------

_TOOLS = """\
import json
import os
import urllib.request

import reproit_otel


@reproit_otel.boundary("embedding", "embed", output=list)
def embed(text: str) -> list[float]:
    with urllib.request.urlopen(os.environ["UPSTREAM"] + "/json", timeout=5) as answer:
        return [json.loads(answer.read())["rate"], float(len(text))]
"""
_MAIL = """\
import json
import os
import urllib.request

import reproit_otel


class Mail:
    @reproit_otel.boundary("imap", "fetch")
    def fetch(self, folder: str, uid: int) -> dict:
        url = f"{os.environ['UPSTREAM']}/query?folder={folder}&uid={uid}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return {"subject": json.loads(answer.read())["query"]}
"""
_TESTS = """\
from myapp.mail import Mail
from myapp.tools import embed


def test_embed():
    assert embed("hello") == [1.5, 5.0]


def test_fetch():
    assert Mail().fetch("INBOX", 7) == {"subject": "folder=INBOX&uid=7"}
"""


def _doctor_forms(documented: str) -> list[str]:
    """``reproit-otel doctor ... [--fixtures DIR] [--json]``: without and with the options."""
    required = re.sub(r"\s*\[[^]]*\]", "", documented)
    optional = re.findall(r"\[([^]]*)\]", documented)
    return [required, " ".join([required, *optional]).replace(" DIR", " .reproit/fixtures")]


def test_fixture_modes_and_doctor_as_boundary_md_shows(upstream: Upstream, tmp_path: Path) -> None:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "tools.py").write_text(_TOOLS)
    (tmp_path / "myapp" / "mail.py").write_text(_MAIL)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_tools.py").write_text(_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    record, replay = block_commands("docs/boundary.md", "REPROIT_TOOLS=record")
    assert (record, replay) == ("REPROIT_TOOLS=record pytest", "REPROIT_TOOLS=replay pytest")

    recorded = _sh(record, tmp_path, _env(UPSTREAM=upstream.base))
    assert recorded.returncode == 0, recorded.stdout
    fixtures = sorted(path.name for path in (tmp_path / ".reproit" / "fixtures").iterdir())
    assert [name.rsplit(".", 2)[0] for name in fixtures] == [
        "module.embedding.embed",
        "module.imap.fetch",
    ]

    [doctor] = block_commands("docs/boundary.md", "reproit-otel doctor")
    plain, full = _doctor_forms(doctor)
    assert full == (
        "reproit-otel doctor --import myapp.tools --import myapp.mail "
        "--fixtures .reproit/fixtures --json"
    )
    checked = _sh(plain, tmp_path, _env())
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines()[-1] == "0 error(s), 0 warning(s)"
    findings = json.loads(_sh(full, tmp_path, _env()).stdout)
    assert {"level": "ok", "topic": "import", "message": "imported myapp.tools"} in findings
    assert [f for f in findings if f["level"] != "ok"] == []
    bare = _sh(command_starting("docs/quickstart.md", "reproit-otel doctor"), tmp_path, _env())
    assert bare.returncode == 0, bare.stdout

    upstream.stop()  # replay never calls it
    replayed = _sh(replay, tmp_path, _env())
    assert replayed.returncode == 0, replayed.stdout
    for path in (tmp_path / ".reproit" / "fixtures").glob("module.imap.*"):
        path.unlink()
    missed = _sh(replay, tmp_path, _env())
    assert missed.returncode == 1
    assert "MissingFixtureError" in missed.stdout
    doctored = _sh(plain, tmp_path, _env())
    assert doctored.returncode == 1
    assert doctored.stdout.splitlines()[-1].startswith("1 error(s)")


# --- docs/ci.md and examples/ci/README.md ----------------------------------------------------


def test_the_ci_guide_and_the_ci_example_commands(tmp_path: Path) -> None:
    folder = tmp_path / "ci"
    shutil.copytree(ROOT / "examples" / "ci", folder, ignore=shutil.ignore_patterns(".reproit"))
    spool = folder / ".reproit" / "ci-spool"
    operation = "test:test_shipping#test_cheapest_quote"

    # docs/ci.md's capture, in a shell where the flaky order is the failing one.
    [capture] = block_commands("docs/ci.md", "REPROIT_CI_CAPTURE=1")
    captured = _sh(capture, folder, _env(QUOTES_ORDER="reversed"))
    assert captured.returncode == 1, captured.stdout
    [spooled] = spool.glob("capsule-*.json")
    marker = json.dumps({"file": f".reproit/ci-spool/{spooled.name}", "operation": operation})
    assert f"REPROIT:CI-CAPSULE {marker.replace(', ', ',').replace(': ', ':')}" in captured.stderr

    # What `gh run download` leaves: the artifact's files under capsules/ (gh is not run).
    downloaded = "capsules/capsule-1f0c4e9a2b7d.json"
    (folder / "capsules").mkdir()
    shutil.move(spooled, folder / downloaded)
    download, check = block_commands("docs/ci.md", "gh run download")
    [by_hand] = block_commands("docs/ci.md", "REPROIT_REPLAY=")
    assert download.endswith("-D capsules") and downloaded in check and downloaded in by_hand
    done = _sh(check, folder, _env())
    assert (done.returncode, _verdict(done.stdout)) == (1, "REPRODUCED"), done.stderr
    # Under a debugger: pdb reads end of input here and quits; only the recorded test ran.
    done = _sh(by_hand, folder, _env())
    assert done.returncode == 2  # pytest's code for a run the debugger ended
    assert "entering PDB" in done.stdout and "1 failed, 2 skipped" in done.stdout, done.stdout
    tests = [line for line in done.stderr.splitlines() if line.startswith("REPROIT:CI-TEST ")]
    assert [json.loads(line.split(" ", 1)[1])["status"] for line in tests] == ["failed"]

    # examples/ci/README.md, steps 1 to 3.
    capture, check = (c.text for c in commands_of("examples/ci/README.md") if not c.inline)
    assert capture == "REPROIT_CI_CAPTURE=1 QUOTES_ORDER=reversed pytest"
    assert _sh(capture, folder, _env()).returncode == 1
    assert len(list(spool.glob("capsule-*.json"))) == 1
    done = _sh(check, folder, _env())
    assert (done.returncode, _verdict(done.stdout)) == (1, "REPRODUCED"), done.stderr
    source = folder / "shipping.py"
    buggy = "    return quotes(base_url, weight_kg)[0]\n"
    fixed = '    return min(quotes(base_url, weight_kg), key=lambda quote: quote["cents"])\n'
    source.write_text(source.read_text(encoding="utf-8").replace(buggy, fixed), "utf-8")
    done = _sh(check, folder, _env())
    assert (done.returncode, _verdict(done.stdout)) == (0, "FIXED"), done.stderr


# --- every documented `reproit-otel serve` command line -------------------------------------

_SERVE_COMMANDS = sorted(
    {
        c.text
        for path in documents()
        for c in commands_of(path)
        if not c.inline and c.text.startswith("reproit-otel serve")
    }
)


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of its own on the test PostgreSQL server, dropped afterwards."""
    import psycopg2

    dsn: str = request.getfixturevalue("postgres_dsn")
    name = f"reproit_docs_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name}")
    try:
        yield dsn.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


@pytest.mark.parametrize("documented", _SERVE_COMMANDS)
def test_every_documented_serve_command_starts_and_enforces_its_keys(
    documented: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    command = documented.replace(
        "sqlite:////tmp/reproit-demo/ingest.db", f"sqlite:///{tmp_path}/ingest.db"
    )
    if "postgresql://reproit@db:5432/reproit" in command:
        database = request.getfixturevalue("fresh_database")
        command = command.replace("postgresql://reproit@db:5432/reproit", database)
    keys = {"REPROIT_INGEST_KEY": "ingest-key", "REPROIT_READ_KEY": "read-key"}
    env = _env(**keys)
    words = [re.sub(r"\$(\w+)", lambda m: keys[m.group(1)], w) for w in shlex.split(command)]
    api_keys = [words[i + 1] for i, word in enumerate(words) if word == "--api-key"]
    read_keys = [words[i + 1] for i, word in enumerate(words) if word == "--read-key"]
    served, address = _serve(command, tmp_path, env)
    try:
        base = "http://127.0.0.1:" + address.rsplit(":", 1)[1]
        assert requests.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
        for key in api_keys + read_keys:
            answer = requests.get(
                f"{base}/v1/occurrences", headers={"authorization": f"Bearer {key}"}, timeout=5
            )
            assert answer.status_code == 200, (key, answer.text)
            page = requests.get(f"{base}/", headers={"authorization": f"Bearer {key}"}, timeout=5)
            assert page.status_code == 200
        wrong = requests.get(
            f"{base}/v1/occurrences", headers={"authorization": "Bearer wrong"}, timeout=5
        )
        assert wrong.status_code == 401
        for key in read_keys:
            sent = requests.post(
                f"{base}/v1/capture-batches",
                json={},
                headers={"authorization": f"Bearer {key}"},
                timeout=5,
            )
            assert sent.status_code in (401, 403), sent.text
    finally:
        assert served.stop() == 0


# --- docs/configuration.md: the regeneration commands ----------------------------------------


def test_the_configuration_reference_regenerates_to_itself(tmp_path: Path) -> None:
    document = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    settings = command_starting("docs/configuration.md", "python -c")
    printed = _sh(settings, ROOT, _env())
    assert printed.returncode == 0, printed.stderr
    assert f"<!-- settings:begin -->\n{printed.stdout}<!-- settings:end -->" in document

    regenerate = command_starting("docs/configuration.md", "python -m reproit_otel.cli.reference")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "configuration.md").write_text(document, encoding="utf-8")
    done = _sh(regenerate, tmp_path, _env())
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "docs" / "configuration.md").read_text(encoding="utf-8") == document
