"""Invoke-boundary fixtures: one recorded outcome per ``(tool, op, input)``, for tests.

Settings (read from the environment at each boundary call, so a test can switch them)::

    REPROIT_TOOLS=record     run every boundary call and write its outcome to a fixture
    REPROIT_TOOLS=replay     never run the call: serve the fixture, or raise
                             MissingFixtureError (and write a REPROIT:DIVERGENCE line)
    REPROIT_TOOLS unset/off  call live (capture still records, replay of a capsule still serves)
    REPROIT_FIXTURES=DIR     where fixtures live (default .reproit/fixtures)

A fixture is the file ``DIR/module.<tool>.<op>.<key>.json``: ``<tool>`` and ``<op>`` with any
character outside ``A-Z a-z 0-9 _ -`` written as ``_`` (a part longer than
:data:`MAX_NAME_PART` characters keeps its first 80 and ends in ``-`` and 15 hex digits of
SHA-256 of the whole part, so every name stays within the 255-byte file-name limit of common
file systems and two long names sharing their start still differ), and ``<key>`` the 24 hex
digits of
:func:`reproit_otel.wire.invoke.fixture_key` over the input with configured secret values
(``REPROIT_SECRET_VALUES``) scrubbed and secret-named keys redacted, so a rotated secret still
finds its fixture. Its content::

    {"format": "reproit-invoke-fixture", "version": 1, "key": "<key>",
     "exchange": {"protocol": "invoke", "request": {...}, "response": {...}}}

The exchange is redacted like any recorded exchange (secret key names, configured secrets
and every secret read through :mod:`reproit_otel.secrets`, in keys and values) and written
with sorted keys, two-space indent, so a fixture can be read, reviewed and written by hand.
Two calls with the same input write one file; the last recording wins (files are replaced
atomically). Fixtures are never consumed: a replayed test may call the same input twice.

A file whose ``format`` is missing or whose ``version`` is older than
:data:`FIXTURE_VERSION` is in an older format: replay refuses it and ``reproit-otel doctor``
lists it with the command to re-record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from reproit_otel.config import (
    DEFAULT_FIXTURES_DIR,
    REPROIT_FIXTURES,
    REPROIT_TOOLS,
    ToolsMode,
    read_setting,
)
from reproit_otel.wire.canonical import canonical_json

__all__ = [
    "DEFAULT_FIXTURES_DIR",
    "FIXTURE_FORMAT",
    "FIXTURE_VERSION",
    "MAX_NAME_PART",
    "REPROIT_FIXTURES",
    "REPROIT_TOOLS",
    "FixtureFile",
    "FixtureSettings",
    "ToolsMode",
    "fixture_document",
    "fixture_name",
    "read_fixture",
    "scan_fixtures",
    "tools_settings",
    "write_fixture",
]

FIXTURE_FORMAT: Final = "reproit-invoke-fixture"
FIXTURE_VERSION: Final = 1
"""The fixture format this version writes; older versions must be re-recorded."""
_PREFIX: Final = "module."
MAX_NAME_PART: Final = 96
"""A tool or op part of a fixture name longer than this keeps its head and a hash of the rest;
two parts, the prefix, the key and the suffix then fit in 255 bytes."""
_KEPT_HEAD: Final = 80
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_NAME = re.compile(
    r"^module\.(?P<tool>[A-Za-z0-9_-]*)\.(?P<op>[A-Za-z0-9_-]*)\.(?P<key>[^.]+)\.json$"
)


@dataclass(frozen=True)
class FixtureSettings:
    """``REPROIT_TOOLS`` and ``REPROIT_FIXTURES`` as read."""

    mode: ToolsMode
    directory: Path


def tools_settings(environ: Mapping[str, str] | None = None) -> FixtureSettings:
    """Read the fixture settings; raises :class:`ConfigurationError` for an unknown mode."""
    mode: ToolsMode = read_setting(REPROIT_TOOLS, environ)
    directory: str = read_setting(REPROIT_FIXTURES, environ)
    return FixtureSettings(mode, Path(directory))


def _safe(part: str) -> str:
    safe = _UNSAFE.sub("_", part)
    if len(safe) <= MAX_NAME_PART:
        return safe
    digest = hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()[:15]
    return f"{safe[:_KEPT_HEAD]}-{digest}"


def fixture_name(tool: str, op: str, key: str) -> str:
    """``module.<tool>.<op>.<key>.json`` with unsafe characters written as ``_``."""
    return f"{_PREFIX}{_safe(tool)}.{_safe(op)}.{key}.json"


def fixture_document(key: str, exchange: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object written to a fixture file."""
    return {
        "format": FIXTURE_FORMAT,
        "version": FIXTURE_VERSION,
        "key": key,
        "exchange": dict(exchange),
    }


def write_fixture(directory: Path, name: str, document: Mapping[str, Any]) -> Path:
    """Write ``document`` atomically as ``directory/name`` (the last write wins)."""
    directory.mkdir(parents=True, exist_ok=True)
    # Sorted keys and the canonical values: what is read back is what a capture would hold.
    text = json.dumps(json.loads(canonical_json(document)), indent=2, ensure_ascii=False)
    handle, temporary = tempfile.mkstemp(prefix=".fixture-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text + "\n")
        os.replace(temporary, directory / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return directory / name


@dataclass(frozen=True)
class FixtureFile:
    """One file of a fixtures directory, as read."""

    path: Path
    tool: str | None
    op: str | None
    key: str | None
    exchange: Mapping[str, Any] | None
    problem: str | None
    """Why the file cannot be served (unreadable, not JSON, older format...), or None."""
    older_format: bool = False


def _problem(path: Path, problem: str, *, older: bool = False) -> FixtureFile:
    return FixtureFile(path, None, None, None, None, problem, older)


def read_fixture(path: Path) -> FixtureFile:
    """Read and check one fixture file (never raises for a bad file: see ``problem``)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        return _problem(path, f"cannot be read: {error}")
    except ValueError as error:
        return _problem(path, f"is not JSON: {error}")
    if not isinstance(document, dict):
        return _problem(path, "does not hold a JSON object")
    version = document.get("version")
    if document.get("format") != FIXTURE_FORMAT or not isinstance(version, int):
        return _problem(path, "is in an older fixture format (no format/version)", older=True)
    if version < FIXTURE_VERSION:
        return _problem(path, f"is in fixture format version {version}", older=True)
    if version > FIXTURE_VERSION:
        return _problem(
            path,
            f"is in fixture format version {version}, newer than this reproit-otel reads "
            f"({FIXTURE_VERSION}); upgrade reproit-otel",
        )
    exchange = document.get("exchange")
    request = exchange.get("request") if isinstance(exchange, dict) else None
    if not isinstance(exchange, dict) or not isinstance(request, dict):
        return _problem(path, "has no exchange request")
    tool, op = request.get("tool"), request.get("op")
    if not isinstance(tool, str) or not isinstance(op, str):
        return _problem(path, "has no tool and op in its request")
    key = document.get("key")
    matched = _NAME.match(path.name)
    if not isinstance(key, str) or matched is None or matched.group("key") != key:
        return _problem(path, "is named for another key than it holds", older=True)
    return FixtureFile(path, tool, op, key, exchange, None)


def scan_fixtures(directory: Path) -> Iterator[FixtureFile]:
    """Every ``module.*.json`` fixture of ``directory``, in name order (none if missing)."""
    if not directory.is_dir():
        return
    for path in sorted(directory.glob(f"{_PREFIX}*.json")):
        yield read_fixture(path)
