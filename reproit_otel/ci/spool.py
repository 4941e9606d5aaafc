"""The CI spool: failing tests' capsules as files a CI job uploads (PROTOCOL section 8.2).

A failing test's trace becomes a version-2 capsule::

    {"format": "reproit-backend-capture", "version": 2, "operation": "test:<suite>#<test>",
     "oracle": "backend-authored-invariant", "envelope": {...}, "events": [...]}

with the envelope ``{observedAtMs, tz, runtime, os, arch, replaySeed}``: ``observedAtMs`` is
the start event's ``at``, ``tz`` the IANA zone name (absent when it cannot be known),
``runtime`` ``"python X.Y.Z"`` (decision D6), ``os`` and ``arch`` in Node's vocabulary, and
``replaySeed`` 16 fresh hex digits that replay seeds :mod:`random` with.

:meth:`Spool.write` stores it as canonical JSON (UTF-8, no byte order mark, no trailing
newline) in ``<directory>/capsule-<first 12 hex of SHA-256 of the bytes>.json``, unless the
spool would then hold more than its cap: the sizes of every regular ``*.json`` file of the
directory (not recursive; symbolic links, folders and other entries do not count) plus the new
capsule must stay within the cap. A capsule that does not fit is dropped and
``<directory>/dropped.count`` (a decimal number and a newline) is incremented.

The spool never follows a symbolic link inside the directory: a file is written under a fresh
name and renamed into place, which replaces a link planted at its name instead of writing
through it, and a ``dropped.count`` that is a link counts as absent. (A link planted in a
shared checkout must not turn a test run into a write to any file the CI user can reach.)

The cap comes from ``REPROIT_CI_SPOOL_MAX`` (or ``--reproit-spool-max``): a whole number of
bytes clamped to 4096..67108864; absent or not a whole number means 16777216 (16 MiB).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from reproit_otel.ci.naming import CI_ORACLE
from reproit_otel.config import (
    SPOOL_MAX_CEILING,
    SPOOL_MAX_DEFAULT,
    SPOOL_MAX_FLOOR,
    parse_spool_max,
)
from reproit_otel.wire.batch import CaptureEnvironment, host_environment
from reproit_otel.wire.capsule import CAPTURE_FORMAT, capsule_bytes

__all__ = [
    "DEFAULT_SPOOL_DIR",
    "DROPPED_COUNT_FILE",
    "SPOOL_MAX_CEILING",
    "SPOOL_MAX_DEFAULT",
    "SPOOL_MAX_FLOOR",
    "Spool",
    "SpoolStats",
    "ci_capsule",
    "ci_envelope",
    "parse_spool_max",
]

_log = logging.getLogger("reproit_otel")

DEFAULT_SPOOL_DIR: Final = ".reproit/ci-spool"
"""Where capsules go when no spool directory is configured (relative to the working directory)."""
DROPPED_COUNT_FILE: Final = "dropped.count"


@dataclass
class SpoolStats:
    """What the spool did in this process."""

    spooled_capsules: int = 0
    dropped_capsules: int = 0
    failed_captures: int = 0
    dropped_effects: int = 0

    def to_json(self) -> dict[str, int]:
        """The reference's stats names (``spooledCapsules``, ...) plus ``droppedEffects``."""
        return {
            "spooledCapsules": self.spooled_capsules,
            "droppedCapsules": self.dropped_capsules,
            "failedCaptures": self.failed_captures,
            "droppedEffects": self.dropped_effects,
        }


def ci_envelope(
    events: Sequence[Mapping[str, Any]],
    *,
    environment: CaptureEnvironment | None = None,
    replay_seed: str | None = None,
) -> dict[str, Any]:
    """The capsule envelope of a CI trace; host facts and seed are injectable for tests."""
    env = environment if environment is not None else host_environment(0)
    at = events[0].get("at") if events else None
    observed = at if isinstance(at, int) and not isinstance(at, bool) else env.now_ms
    envelope: dict[str, Any] = {"observedAtMs": observed}
    for name, value in (
        ("tz", env.tz),
        ("runtime", env.runtime),
        ("os", env.os),
        ("arch", env.arch),
    ):
        if value is not None:
            envelope[name] = value
    envelope["replaySeed"] = replay_seed if replay_seed is not None else secrets.token_hex(8)
    return envelope


def ci_capsule(
    operation: str, events: Sequence[Mapping[str, Any]], envelope: Mapping[str, Any]
) -> dict[str, Any]:
    """The capsule of a CI trace: always version 2, oracle ``backend-authored-invariant``."""
    return {
        "format": CAPTURE_FORMAT,
        "version": 2,
        "operation": operation,
        "oracle": CI_ORACLE,
        "envelope": dict(envelope),
        "events": [dict(event) for event in events],
    }


def _used_bytes(directory: str) -> int:
    used = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.endswith(".json"):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    used += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return used


def _read_count(path: str) -> int:
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:  # absent, or a symbolic link
        return 0
    try:
        with os.fdopen(descriptor, encoding="utf-8") as handle:
            text = handle.read(64).strip()
    except (OSError, UnicodeDecodeError):
        return 0
    return int(text) if text.isascii() and text.isdigit() else 0


def _write_in_place(directory: str, name: str, data: bytes) -> str:
    """Write ``data`` to ``directory/name`` without following a link planted at that name."""
    path = os.path.normpath(os.path.join(directory, name))
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(temporary, flags, 0o644)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)  # renames over a link, never through it
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


class Spool:
    """A spool directory with its byte cap; :meth:`write` stores one capsule."""

    def __init__(self, directory: str, cap: int, stats: SpoolStats | None = None) -> None:
        self.directory = directory
        self.cap = cap
        self.stats = stats if stats is not None else SpoolStats()

    def write(self, capsule: Mapping[str, Any]) -> str | None:
        """Store ``capsule``; return its path, or None when it was dropped or failed.

        The path is the directory as configured joined with the file name (normalised), the
        spelling the ``REPROIT:CI-CAPSULE`` marker reports. Errors writing the spool are
        logged and counted (``failed_captures``), never raised.
        """
        body = capsule_bytes(capsule)
        try:
            os.makedirs(self.directory, exist_ok=True)
            if _used_bytes(self.directory) + len(body) > self.cap:
                self._count_drop()
                return None
            name = f"capsule-{hashlib.sha256(body).hexdigest()[:12]}.json"
            path = _write_in_place(self.directory, name, body)
        except OSError as error:
            self.stats.failed_captures += 1
            _log.error("reproit-otel could not write a CI capsule to %s: %s", self.directory, error)
            return None
        self.stats.spooled_capsules += 1
        return path

    def _count_drop(self) -> None:
        self.stats.dropped_capsules += 1
        path = os.path.join(self.directory, DROPPED_COUNT_FILE)
        count = _read_count(path) + 1
        _write_in_place(self.directory, DROPPED_COUNT_FILE, f"{count}\n".encode())
        _log.warning(
            "reproit-otel CI spool %s is full (cap %d bytes): capsule dropped (%d so far)",
            self.directory,
            self.cap,
            count,
        )
