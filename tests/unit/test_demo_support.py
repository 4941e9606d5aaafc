"""The demo's building blocks: the step printer, child process groups, missing PostgreSQL."""

from __future__ import annotations

import io
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from reproit_otel.demo import support as demo_support
from reproit_otel.demo.run import DemoError, find_examples
from reproit_otel.demo.support import Progress, Supervisor, ThrowawayPostgres


def _timeless(text: str) -> str:
    return re.sub(r"\(\d+\.\d s\)", "(T s)", text)


def test_steps_print_a_start_and_an_end_line_outside_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(2, out)
    with progress.step("Start the thing") as step:
        step.note("one\ntwo")
        step.done("on port 1")
    with pytest.raises(DemoError), progress.step("Fail the thing") as step:
        step.done("never shown")
        raise DemoError("broken")
    progress.say("after")
    assert _timeless(out.getvalue()) == (
        "[1/2] Start the thing ...\n"
        "      one\n"
        "      two\n"
        "[1/2] ✓ Start the thing: on port 1 (T s)\n"
        "[2/2] Fail the thing ...\n"
        "[2/2] ✗ Fail the thing (T s)\n"
        "after\n"
    )


def test_stopping_a_child_stops_its_whole_process_group(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path / "logs", os.environ)
    # The child starts a grandchild that ignores SIGTERM, then waits.
    script = (
        "import signal, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        'print("ready", flush=True); time.sleep(60)\'])\n'
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    supervisor.start("family", [sys.executable, "-u", "-c", script])
    log = supervisor.log_path("family")
    [grandchild] = demo_support.wait_for_line(log, "", count=1)
    demo_support.wait_for_line(log, "ready")
    assert supervisor.stop("family", timeout=1.0) == -signal.SIGTERM
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(int(grandchild), 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the grandchild outlived its process group")
    assert supervisor.children == {}
    supervisor.stop_all()  # nothing left: a no-op


def test_missing_postgresql_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(demo_support, "_DEBIAN_POSTGRES", tmp_path / "none")
    with pytest.raises(DemoError) as raised:
        ThrowawayPostgres(os.environ)
    assert "apt-get install postgresql" in str(raised.value)


def test_the_examples_are_found_from_the_checkout_or_refused(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    assert find_examples() == root / "examples"
    with pytest.raises(DemoError) as raised:
        find_examples(tmp_path)
    assert "examples/shop/app.py was not found" in str(raised.value)
