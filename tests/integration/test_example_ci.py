"""``examples/ci``: the flaky test is captured in CI mode, replays as reproduced, then fixed.

Runs the README's commands on a copy of the example folder, in real pytest subprocesses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPERATION = "test:test_shipping#test_cheapest_quote"
PYTEST = f"{sys.executable} -m pytest"


def _env(**extra: str) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("REPROIT_", "QUOTES_")) and name != "PYTEST_ADDOPTS"
    }
    env.update(REPROIT_STRICT_INTERNAL="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


def _run(folder: Path, command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        shell=True,
        cwd=folder,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture
def example(tmp_path: Path) -> Path:
    folder = tmp_path / "ci"
    shutil.copytree(ROOT / "examples" / "ci", folder, ignore=shutil.ignore_patterns(".reproit"))
    return folder


def _check(folder: Path, capsule: Path) -> subprocess.CompletedProcess[str]:
    check = f"{sys.executable} -m reproit_otel check {capsule} --exec '{PYTEST}' --json"
    return _run(folder, check)


def test_the_flaky_test_passes_or_fails_with_the_upstream_order(example: Path) -> None:
    assert _run(example, PYTEST, QUOTES_ORDER="sorted").returncode == 0
    assert _run(example, PYTEST, QUOTES_ORDER="reversed").returncode == 1


def test_the_captured_failure_replays_as_reproduced_then_fixed(example: Path) -> None:
    captured = _run(example, PYTEST, REPROIT_CI_CAPTURE="1", QUOTES_ORDER="reversed")
    assert captured.returncode == 1, captured.stdout
    [spooled] = sorted((example / ".reproit" / "ci-spool").glob("capsule-*.json"))
    markers = [line for line in captured.stderr.splitlines() if line.startswith("REPROIT:")]
    file = str(Path(".reproit/ci-spool") / spooled.name)
    assert markers == [
        "REPROIT:CI-CAPSULE "
        + json.dumps({"file": file, "operation": OPERATION}, separators=(",", ":"))
    ]

    replayed = _check(example, spooled)
    result = json.loads(replayed.stdout)
    assert (replayed.returncode, result["verdict"], result["reason"]) == (
        1,
        "reproduced",
        "the test fails again with the recorded failure",
    )

    source = example / "shipping.py"
    buggy = "    return quotes(base_url, weight_kg)[0]\n"
    fixed = '    return min(quotes(base_url, weight_kg), key=lambda quote: quote["cents"])\n'
    assert buggy in source.read_text(encoding="utf-8")
    source.write_text(source.read_text(encoding="utf-8").replace(buggy, fixed), encoding="utf-8")
    replayed = _check(example, spooled)
    result = json.loads(replayed.stdout)
    assert (replayed.returncode, result["verdict"], result["reason"]) == (
        0,
        "fixed",
        "the test passes with the recorded exchanges",
    )
