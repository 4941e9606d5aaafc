"""The install line README.md and docs/quickstart.md give is one that works today.

The package is not published, so the guides install from a clone with ``constraints.txt``,
or from a wheel built there. Each line is read out of the documents and given to the real pip
with ``--dry-run``: pip resolves it in full (``--ignore-installed``, as in a fresh
environment), from whatever index the machine is configured with, and says what it would
install. Nothing is installed.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from reproit_otel._version import __version__
from tests.docs_commands import ROOT, command_starting

EXTRAS = "[otel,requests,psycopg2,replay,serve]"
FROM_A_CLONE = f"pip install -c constraints.txt '.{EXTRAS}'"
BUILD_A_WHEEL = "pip wheel --no-deps -w dist ."


def _pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name] = version
    return pins


def _pip(words: list[str], *extra: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert words[0] == "pip"
    return subprocess.run(
        [sys.executable, "-m", "pip", *words[1:2], *extra, *words[2:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _dry_run(words: list[str], tmp_path: Path, cwd: Path = ROOT) -> dict[str, str]:
    """What pip would install for the ``pip install`` line ``words``: name -> version."""
    report = tmp_path / "report.json"
    done = _pip(words, "--dry-run", "--ignore-installed", "--report", str(report), cwd=cwd)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in parsed["install"]}


def test_both_guides_give_the_line_that_installs_from_a_clone() -> None:
    for path in ("README.md", "docs/quickstart.md"):
        assert command_starting(path, "pip install -c") == FROM_A_CLONE
        assert command_starting(path, "pip wheel") == BUILD_A_WHEEL
        published = command_starting(path, "pip install 'reproit-otel")
        assert published == f"pip install 'reproit-otel{EXTRAS}'"
        text = " ".join((ROOT / path).read_text(encoding="utf-8").split())
        assert "not on PyPI yet" in text


def test_the_line_from_a_clone_resolves_to_the_tested_set(tmp_path: Path) -> None:
    would = _dry_run(shlex.split(FROM_A_CLONE), tmp_path)
    assert would["reproit-otel"] == __version__
    pinned = _pinned()
    assert {name: would[name] for name in pinned if name in would} == {
        name: pinned[name] for name in pinned if name in would
    }
    wanted = {"opentelemetry-sdk", "opentelemetry-distro", "requests", "psycopg2-binary"}
    wanted |= {"time-machine", "starlette", "uvicorn", "opentelemetry-instrumentation-flask"}
    assert sorted(wanted - set(would)) == []


def test_the_built_wheel_installs_with_the_same_line(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _pip(["pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT)])
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = sorted(dist.glob("*.whl"))
    assert wheel.name == f"reproit_otel-{__version__}-py3-none-any.whl"
    words = shlex.split(FROM_A_CLONE.replace("'.", f"'{wheel}"))
    would = _dry_run(words, tmp_path)
    assert would["reproit-otel"] == __version__
    assert would["opentelemetry-sdk"] == _pinned()["opentelemetry-sdk"]
