"""Packages beside the test environment's own, for the stacks that need another release or an
extra driver: SQLAlchemy 2.0 (the environment pins 2.1) and pg8000 (a PostgreSQL driver
reproit-otel does not record).

OpenTelemetry's SQLAlchemy instrumentation declares support up to 2.0 only, so
``opentelemetry-instrument`` leaves it out on 2.1 and puts it in on 2.0. Each overlay is a
folder ``<environment>/overlays/<name>`` installed with pip once (``--no-deps``: the
requirements name everything the environment lacks) and reused on later runs; a subprocess
with the folder first on ``PYTHONPATH`` imports what it holds, and ``importlib.metadata``
(which the instrumentation's dependency check reads) reports those versions too. The install
goes through pip and its cache or configured index, bounded by :data:`INSTALL_TIMEOUT_S`; it
is built in a temporary folder and renamed into place, so an interrupted install is never
reused.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

INSTALL_TIMEOUT_S = 300
OVERLAYS = Path(sys.prefix) / "overlays"


def overlay(name: str, module: str, *requirements: str) -> Path:
    """The folder ``name`` holding ``requirements`` (installed on first use; ``module`` is the
    top-level package whose presence says the folder is complete)."""
    folder = OVERLAYS / name
    if (folder / module).is_dir():
        return folder
    OVERLAYS.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=OVERLAYS))
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
                *requirements,
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip could not install {requirements}:\n{done.stderr}")
        try:
            building.rename(folder)
        except OSError:
            if not (folder / module).is_dir():  # else another run finished first
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder


def sqlalchemy_20_path() -> Path:
    """The folder holding SQLAlchemy 2.0."""
    return overlay("sqlalchemy-2.0", "sqlalchemy", "sqlalchemy>=2.0,<2.1")


def pg8000_path() -> Path:
    """The folder holding the pg8000 driver and the two packages it needs beyond ours."""
    return overlay("pg8000", "pg8000", "pg8000", "scramp", "asn1crypto")
