"""``scripts/bootstrap`` says what it installs while it installs, and why it failed if it did.

pip cannot reach a package registry here, so the script runs for real on a copy of the
repository's layout whose ``.venv/bin/python`` is a stand-in that answers ``-m pip install``
the way pip does (its ``Collecting``/``Installing`` lines, or its error); everything else
(the stamp, the filtering, the log, the exit status) is the script's own.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PIP_OK = """\
Obtaining file:///repo
Collecting opentelemetry-sdk==1.45.1 (from reproit-otel==0.1.0)
  Using cached opentelemetry_sdk-1.45.1-py3-none-any.whl
Requirement already satisfied: packaging in ./.venv/lib
Collecting flask>=3 (from reproit-otel==0.1.0)
WARNING: Location '/mirror/simple/flask/' is ignored: it is neither a file nor a directory.
Installing collected packages: opentelemetry-sdk, flask, reproit-otel
Successfully installed flask-3.1.0 opentelemetry-sdk-1.45.1 reproit-otel-0.1.0
"""
_MISSING = "opentelemetry-instrumentation-flask==0.66b2"
_PIP_FAILS = (
    f"Collecting {_MISSING}\n"
    f"ERROR: Could not find a version that satisfies the requirement {_MISSING}\n"
    f"ERROR: No matching distribution found for {_MISSING}\n"
)


def _layout(tmp_path: Path, pip_output: str, status: int) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "bootstrap", repo / "scripts" / "bootstrap")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy2(ROOT / "constraints.txt", repo / "constraints.txt")
    python = repo / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    (repo / "pip-output.txt").write_text(pip_output, encoding="utf-8")
    python.write_text(
        "#!/bin/sh\n"
        'case "$*" in *"--upgrade pip"*) exit 0 ;; esac\n'
        f'cat "{repo / "pip-output.txt"}"\n'
        f"exit {status}\n",
        encoding="utf-8",
    )
    python.chmod(0o755)
    return repo


def _bootstrap(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(repo / "scripts" / "bootstrap")],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_install_says_what_it_does_then_nothing_on_the_next_run(tmp_path: Path) -> None:
    repo = _layout(tmp_path, _PIP_OK, 0)
    done = _bootstrap(repo)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        "scripts/bootstrap: installing reproit-otel, its test tools and OpenTelemetry 1.45.1 "
        "into .venv (the first time: about 150 packages, a minute or two)",
        "  collecting opentelemetry-sdk==1.45.1",
        "  collecting flask>=3",
        "  installing the collected packages",
        "scripts/bootstrap: done: .venv is ready",
    ]
    assert (repo / ".venv" / "bootstrap.log").read_text(encoding="utf-8") == _PIP_OK
    again = _bootstrap(repo)
    assert (again.returncode, again.stdout) == (0, "")


def test_a_failed_install_shows_the_end_of_pips_output(tmp_path: Path) -> None:
    repo = _layout(tmp_path, _PIP_FAILS, 1)
    done = _bootstrap(repo)
    error = "ERROR: No matching distribution found for opentelemetry-instrumentation-flask==0.66b2"
    missing = (
        "ERROR: Could not find a version that satisfies the requirement "
        "opentelemetry-instrumentation-flask==0.66b2"
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "scripts/bootstrap: installing reproit-otel, its test tools and OpenTelemetry 1.45.1 "
        "into .venv (the first time: about 150 packages, a minute or two)",
        "  collecting opentelemetry-instrumentation-flask==0.66b2",
        missing,
        error,
        "scripts/bootstrap: the install failed; the end of pip's output (all of it is in "
        ".venv/bootstrap.log):",
        "Collecting opentelemetry-instrumentation-flask==0.66b2",
        missing,
        error,
    ]
    assert not (repo / ".venv" / ".reproit-installed").exists()
