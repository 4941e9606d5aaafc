"""``reproit-otel demo`` end to end, in a subprocess, exactly as ``scripts/demo`` runs it.

Needs PostgreSQL's ``initdb``/``pg_ctl`` (the demo starts its own cluster; as root it runs them
through ``runuser -u postgres``). Every process the demo starts carries
``REPROIT_DEMO_RUN=<work folder>`` in its environment; the tests look for any such process
once the demo has exited.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from reproit_otel.demo import RUN_MARKER
from reproit_otel.wire.capsule import load_capsule

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


def _demo(workdir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "reproit_otel", "demo", "--workdir", str(workdir), *args]


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


@pytest.mark.parametrize("app", ["flask", "fastapi"])
def test_the_demo_reproduces_the_failure_then_sees_it_fixed(tmp_path: Path, app: str) -> None:
    workdir = tmp_path / "demo"
    done = subprocess.run(
        _demo(workdir, "--app", app),
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
        "reason": "the recorded request answered HTTP 500 again",
        "divergences": [],
    }
    assert _verdict(workdir / "verdict-fixed.json") == {
        "capture": capture,
        "verdict": "fixed",
        "exit": 0,
        "reason": "the recorded request now answers HTTP 200",
        "divergences": [],
    }
    listed = sorted(str(path.relative_to(workdir)) for path in workdir.rglob("*") if path.is_file())
    for name in ("capsule.json", "verdict.json", "verdict-fixed.json", "ingest.db"):
        assert name in listed
        assert f"  {workdir / name}\n" in done.stdout


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
