"""SQLAlchemy 2.0 beside the 2.1 of the test environment, for the stacks that must run on both.

The environment pins SQLAlchemy 2.1; OpenTelemetry's SQLAlchemy instrumentation declares
support up to 2.0 only, so ``opentelemetry-instrument`` leaves it out on 2.1 and puts it in on
2.0. :func:`sqlalchemy_20_path` installs SQLAlchemy 2.0 (no dependencies: it needs nothing the
environment lacks) into ``<environment>/overlays/sqlalchemy-2.0`` once, and reuses it on later
runs; a subprocess with that folder first on ``PYTHONPATH`` imports 2.0, and
``importlib.metadata`` (which the instrumentation's dependency check reads) reports 2.0 too.
The install goes through pip and its cache or configured index, bounded by
:data:`INSTALL_TIMEOUT_S`; it is built in a temporary folder and renamed into place, so an
interrupted install is never reused.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REQUIREMENT = "sqlalchemy>=2.0,<2.1"
INSTALL_TIMEOUT_S = 300
OVERLAY = Path(sys.prefix) / "overlays" / "sqlalchemy-2.0"


def sqlalchemy_20_path() -> Path:
    """The folder holding SQLAlchemy 2.0 (installed on first use)."""
    if (OVERLAY / "sqlalchemy").is_dir():
        return OVERLAY
    OVERLAY.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="sqlalchemy-2.0-", dir=OVERLAY.parent))
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                str(building),
                REQUIREMENT,
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip could not install {REQUIREMENT!r}:\n{done.stderr}")
        try:
            building.rename(OVERLAY)
        except OSError:
            if not (OVERLAY / "sqlalchemy").is_dir():  # else another run finished first
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return OVERLAY
