"""The versions reproit-otel is tested with, at both ends, and what is installed outside them.

:data:`SUPPORTED` is the support matrix of ``docs/versions.md`` as data: for Python and each
library whose calls or requests reproit-otel records (or whose spans it reads), the range
``scripts/matrix`` tests at its lower and upper end. :func:`unsupported_problems` names every
installed one outside its range with the version and the command that brings it back in;
``reproit-otel doctor`` reports them and, under ``opentelemetry-instrument``, start-up writes
each once to stderr (:func:`reproit_otel.otel_setup.warn_at_startup`). Nothing here imports
the libraries: versions are read from the installed distributions' metadata.

A recorded call that goes through a library outside its range is not trusted to be recorded
faithfully: :func:`unsupported_recorders` maps each recorder (``requests``, ``httpx``,
``psycopg2``, ``psycopg``) whose calls pass through such a library to the reason, and the
span processor makes every operation that records a call of that recorder incomplete with it
(decision D4: it is counted and logged, never uploaded as a complete capture).
"""

from __future__ import annotations

import importlib.metadata
import platform
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from reproit_otel.otel_setup import Problem

__all__ = ["SUPPORTED", "Supported", "unsupported_problems", "unsupported_recorders"]


@dataclass(frozen=True)
class Supported:
    """One row of the support matrix."""

    distribution: str
    """The distribution whose installed version is checked (``python`` for the interpreter)."""
    label: str
    """Its name for people."""
    versions: str
    """The tested range, a PEP 440 specifier (lower end and the first release not tested)."""
    recorders: tuple[str, ...] = ()
    """The recorders (``start_exchange`` library names) whose calls go through it."""


SUPPORTED: tuple[Supported, ...] = (
    Supported("python", "Python", ">=3.10,<3.14"),
    Supported("opentelemetry-sdk", "the OpenTelemetry SDK", ">=1.36,<1.46"),
    Supported("opentelemetry-instrumentation", "OpenTelemetry instrumentation", ">=0.57b0,<0.67"),
    Supported("requests", "requests", ">=2.28,<3", ("requests",)),
    Supported("urllib3", "urllib3", ">=1.26,<3", ("requests",)),
    Supported("httpx", "httpx", ">=0.27,<1", ("httpx",)),
    Supported("psycopg2", "psycopg2", ">=2.9.1,<3", ("psycopg2",)),
    Supported("psycopg2-binary", "psycopg2", ">=2.9.1,<3", ("psycopg2",)),
    Supported("psycopg", "psycopg 3", ">=3.3.7,<4", ("psycopg",)),
    Supported("psycopg-pool", "psycopg_pool", ">=3.3,<4", ("psycopg",)),
    Supported("sqlalchemy", "SQLAlchemy", ">=2.0,<2.2"),
    Supported("django", "Django", ">=4.2,<6.2"),
    Supported("flask", "Flask", ">=2.3,<3.2"),
    Supported("fastapi", "FastAPI", ">=0.110.1,<1"),
    Supported("starlette", "Starlette", ">=0.37,<2"),
    Supported("gunicorn", "gunicorn", ">=22,<28"),
    Supported("uvicorn", "uvicorn", ">=0.29,<1"),
)
"""The support matrix; ``docs/versions.md`` says the same and a test keeps them in step."""


def _installed(distribution: str) -> str | None:
    if distribution == "python":
        return platform.python_version()
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _outside(row: Supported) -> tuple[str, str] | None:
    """``(installed version, "older than the oldest" | "newer than the newest")`` when the
    installed version of ``row`` is outside its range, else ``None``."""
    have = _installed(row.distribution)
    if have is None:
        return None
    try:
        version = Version(have)
    except InvalidVersion:
        return None
    wanted = SpecifierSet(row.versions)
    if wanted.contains(version, prereleases=True):
        return None
    lowest = min((Version(s.version) for s in wanted if s.operator == ">="), default=None)
    if lowest is not None and version < lowest:
        return have, "older than the oldest"
    return have, "newer than the newest"


def unsupported_problems() -> list[Problem]:
    """One problem per installed library (and the interpreter) outside :data:`SUPPORTED`."""
    problems: list[Problem] = []
    for row in SUPPORTED:
        outside = _outside(row)
        if outside is None:
            continue
        have, where = outside
        if row.distribution == "python":
            fix = "run the service on a Python the matrix names (docs/versions.md)"
        else:
            fix = f"pip install '{row.distribution}{row.versions}'"
        if row.recorders:
            effect = (
                f"every operation that makes a {' or '.join(row.recorders)} call is marked "
                "incomplete and not uploaded"
            )
        else:
            effect = "captures of what it does may be incomplete or missing"
        problems.append(
            Problem(
                "supported",
                f"{row.label} {have} is {where} release reproit-otel is tested with "
                f"({row.distribution}{row.versions}, docs/versions.md): {effect}",
                fix,
            )
        )
    return problems


def unsupported_recorders() -> dict[str, str]:
    """Each recorder whose calls go through an installed library outside :data:`SUPPORTED`,
    with the incompleteness reason its operations get (the first such library's)."""
    reasons: dict[str, str] = {}
    for row in SUPPORTED:
        if not row.recorders:
            continue
        outside = _outside(row)
        if outside is None:
            continue
        reason = (
            f"{row.label} {outside[0]} is outside the tested versions "
            f"({row.distribution}{row.versions}, docs/versions.md)"
        )
        for recorder in row.recorders:
            reasons.setdefault(recorder, reason)
    return reasons
