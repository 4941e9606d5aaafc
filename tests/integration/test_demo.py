"""``reproit-otel demo`` end to end, through ``scripts/demo`` (the README's first command).

``scripts/demo`` runs ``scripts/bootstrap`` first, which reinstalls the project when
``pyproject.toml`` or ``constraints.txt`` changed since ``.venv`` was set up. The tests run
``scripts/demo`` itself when that step has nothing to do (the tests run in the repository's
``.venv`` and its install stamp is current, as in ``.ci/run`` right after
``scripts/bootstrap``); otherwise they run what it runs next, ``reproit-otel demo``, so the
suite never installs anything.

After the Flask demo, the ingest it left behind is served as ``docs/ingest-web.md`` shows,
and the replay lines of the occurrence's page are run as they read.

Needs PostgreSQL's ``initdb``/``pg_ctl`` (the demo starts its own cluster; as root it runs them
through ``runuser -u postgres``). Every process the demo starts carries
``REPROIT_DEMO_RUN=<work folder>`` in its environment; the tests look for any such process
once the demo has exited.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import requests

from reproit_otel.demo.run import RUN_MARKER
from reproit_otel.wire.capsule import load_capsule
from tests.docs_commands import block_commands
from tests.integration.served_ingest import ServedIngest

ROOT = Path(__file__).resolve().parents[2]


def _postgres_installed() -> bool:
    found = shutil.which("initdb") or list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return bool(found)


def _zero_code_ready() -> bool:
    names = {entry.name for entry in entry_points(group="opentelemetry_traces_exporter")}
    return "reproit" in names


pytestmark = [
    pytest.mark.skipif(not _postgres_installed(), reason="apt-get install postgresql"),
    pytest.mark.skipif(
        not _zero_code_ready(),
        reason="the `reproit` opentelemetry_traces_exporter entry point is not installed "
        "(reinstall the package: pip install -e .)",
    ),
]


def _bootstrap_is_a_no_op() -> bool:
    """True when ``scripts/bootstrap`` would install nothing (its stamp is current)."""
    venv = ROOT / ".venv"
    if Path(sys.prefix).resolve() != venv.resolve():
        return False
    stamp = venv / ".reproit-installed"
    wanted = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + (ROOT / "constraints.txt").read_bytes()
    ).hexdigest()
    return stamp.is_file() and stamp.read_text().strip() == wanted


def _demo(workdir: Path, *args: str) -> list[str]:
    if _bootstrap_is_a_no_op():
        return [str(ROOT / "scripts" / "demo"), *args, "--workdir", str(workdir)]
    return [sys.executable, "-m", "reproit_otel", "demo", *args, "--workdir", str(workdir)]


def _processes_of(workdir: Path) -> list[str]:
    """Command lines of live processes whose environment marks them as this demo's."""
    marker = f"{RUN_MARKER}={workdir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            if marker not in environ:
                continue
            found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def _no_process_left(workdir: Path) -> list[str]:
    deadline = time.monotonic() + 10
    while (left := _processes_of(workdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _verdict(path: Path) -> dict[str, Any]:
    result = json.loads(path.read_text(encoding="utf-8"))
    return {key: result[key] for key in ("capture", "verdict", "exit", "reason", "divergences")}


@pytest.mark.parametrize("app", ["flask", "fastapi", "fastapi-async"])
def test_the_demo_reproduces_the_failure_then_sees_it_fixed(tmp_path: Path, app: str) -> None:
    workdir = tmp_path / "demo"
    done = subprocess.run(
        _demo(workdir) if app == "flask" else _demo(workdir, "--app", app),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verdict: REPRODUCED with the shop as it is, FIXED with the fix." in done.stdout
    for number in range(1, 11):
        assert f"[{number}/10] ✓ " in done.stdout
    assert _no_process_left(workdir) == []

    capsule = load_capsule((workdir / "capsule.json").read_text(encoding="utf-8"))
    protocols = [
        (event["exchange"]["protocol"], event["exchange"]["request"].get("method"))
        for event in capsule["events"]
        if event["kind"] == "effect" and "exchange" in event
    ]
    assert (capsule["operation"], protocols) == (
        "POST /orders",
        [
            ("pg", None),
            ("http", "GET"),
            ("invoke", None),
            ("http", "POST"),
            ("pg", None),
            ("pg", None),
        ],
    )
    capture = {"mode": "production-hermetic", "operation": "POST /orders"}
    assert _verdict(workdir / "verdict.json") == {
        "capture": capture,
        "verdict": "reproduced",
        "exit": 1,
        "reason": (
            "the replayed request raised the recorded exception again (same type, same "
            "innermost application frame)"
        ),
        "divergences": [],
    }
    assert _verdict(workdir / "verdict-fixed.json") == {
        "capture": capture,
        "verdict": "fixed",
        "exit": 0,
        "reason": (
            "the recorded request now answers HTTP 200, after using all 6 recorded data "
            "exchanges in order"
        ),
        "divergences": [],
    }
    listed = sorted(str(path.relative_to(workdir)) for path in workdir.rglob("*") if path.is_file())
    for name in ("capsule.json", "verdict.json", "verdict-fixed.json", "ingest.db"):
        assert name in listed
        assert f"  {workdir / name}\n" in done.stdout
    if app == "flask":
        _serve_the_demo_ingest(workdir, tmp_path / "page")


def _serve_the_demo_ingest(workdir: Path, folder: Path) -> None:
    """docs/ingest-web.md: serve the demo's database, then run the page's replay lines."""
    [demo, serve] = block_commands("docs/ingest-web.md", "reproit-otel demo")
    assert demo == "reproit-otel demo --workdir /tmp/reproit-demo"
    command = serve.replace("/tmp/reproit-demo", str(workdir))
    flag, database, *rest = shlex.split(command)[2:]
    assert flag == "--db"
    served = ServedIngest(database, *rest)  # the same flags after --port 0
    try:
        headers = {"authorization": "Bearer demo-key"}
        listed = requests.get(f"{served.base_url}/v1/occurrences", headers=headers, timeout=10)
        [occurrence] = [row["id"] for row in listed.json()["occurrences"] if row["batches"]]
        page = requests.get(
            f"{served.base_url}/occurrences/{occurrence}", headers=headers, timeout=10
        )
        assert page.status_code == 200
        shown = html.unescape(page.text)
        [pull] = re.findall(r"reproit-otel pull [^\n<]+", shown)
        [replay] = re.findall(r"reproit-otel check [^\n<]+", shown)
        assert replay.endswith("--exec 'opentelemetry-instrument python examples/shop/app.py'")
        folder.mkdir()
        (folder / "examples").symlink_to(ROOT / "examples")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "REPROIT_"))},
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "REPROIT_API_KEY": "demo-key",  # pull reads the key from the environment
            "REPROIT_STRICT_INTERNAL": "1",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
        }
        pulled = subprocess.run(pull, shell=True, cwd=folder, env=env, check=False, timeout=60)
        assert pulled.returncode == 0
    finally:
        assert served.stop() == 0
    assert (folder / f"{occurrence}.capsule.json").read_bytes() == (
        workdir / "capsule.json"
    ).read_bytes()
    checked = subprocess.run(
        replay,
        shell=True,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    # The verdict line, then the replayed application's own stderr (its traceback).
    verdicts = [
        line.split()[:2] for line in checked.stdout.splitlines() if line.startswith("verdict:")
    ]
    assert (checked.returncode, verdicts) == (1, [["verdict:", "REPRODUCED"]]), checked.stderr
    assert "REPRODUCED  TypeError: " in checked.stdout


def test_ctrl_c_stops_everything_the_demo_started(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    demo = subprocess.Popen(
        _demo(workdir),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert demo.stdout is not None
    seen = []
    for line in demo.stdout:  # the shop, its upstreams, PostgreSQL and the ingest all run
        seen.append(line)
        if line.startswith("[4/10] ✓"):
            break
    assert _processes_of(workdir), "".join(seen)
    demo.send_signal(signal.SIGINT)
    _, stderr = demo.communicate(timeout=120)
    assert demo.returncode == 130
    assert "interrupted; stopping everything it started" in stderr
    assert _no_process_left(workdir) == []
