"""What a ``capture-batch-v1`` is built with besides the operation (PROTOCOL sections 5.1, 5.4).

Tokens
    The ingest protocol calls a string a *token* when it is 1 to 128 bytes of ASCII letters,
    digits, ``-``, ``_``, ``.`` and ``:`` (:func:`is_token`). Identifiers of the batch
    (``projectId``, ``deployment``, emitter fields) must be tokens. The correlation fields copied
    from raw trace events (``traceId``, ``spanId``, ``actor``) and the ``sessionId`` are turned
    into tokens instead (:func:`correlation_token`): a value that is not one is replaced by the
    lowercased field name, ``:`` and the first 32 hex digits of the SHA-256 of its UTF-8 bytes
    (``spanid:84c2...``). So a span id ``cap-1-1:createOrder`` travels as is,
    ``cap-1-1:GET /quote`` travels hashed.

Settings and environment
    :class:`CaptureSettings` says who the batch is from (project, build, commit, image digest);
    :class:`CaptureEnvironment` holds the clock reading, the batch counter and the host facts.
    :func:`host_environment` is the one function of the batch code that looks at the host
    (``TZ``, ``/etc/localtime``, the interpreter and platform); the builder in
    :mod:`reproit_otel.wire.batch` never does, so the same operation always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from zoneinfo import ZoneInfo

__all__ = [
    "CaptureEnvironment",
    "CaptureSettings",
    "correlation_token",
    "host_environment",
    "host_timezone",
    "is_token",
    "observed_at",
]

_TOKEN = re.compile(r"[A-Za-z0-9._:-]{1,128}", re.ASCII)


def is_token(value: object) -> bool:
    """True when ``value`` is a protocol token: a string of 1 to 128 ASCII letters, digits or
    ``-``, ``_``, ``.``, ``:`` (the ingest validator's rule, so also 1 to 128 bytes)."""
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


def correlation_token(name: str, value: str) -> str:
    """``value`` itself when it is a token, else ``<name lowercased>:<32 hex of SHA-256>``."""
    if is_token(value):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()
    return f"{name.lower()}:{digest[:32]}"


# --- settings and environment ---------------------------------------------------------------


@dataclass(frozen=True)
class CaptureSettings:
    """Who the batch is from: used exactly as given (the uploader validates its configuration).

    ``project_id`` becomes ``projectId`` (the configured app id), ``build`` and ``commit`` the
    ``deployment`` ``version`` and ``commit``, ``image_digest`` the envelope ``imageDigest``.
    ``None`` leaves a field out.
    """

    project_id: str
    build: str | None = None
    commit: str | None = None
    image_digest: str | None = None

    @classmethod
    def resolve(
        cls,
        project_id: str,
        *,
        build: str | None = None,
        commit: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CaptureSettings:
        """Settings with the commit and image digest resolved as section 5.1 says.

        ``commit`` is the first token among ``commit``, ``REPROIT_COMMIT`` and ``GITHUB_SHA``;
        ``image_digest`` is ``REPROIT_IMAGE_DIGEST`` when it is a token. ``environ`` defaults to
        ``os.environ``; nothing else is read and git is never run.
        """
        env = os.environ if environ is None else environ
        resolved = next(
            (
                candidate
                for candidate in (commit, env.get("REPROIT_COMMIT"), env.get("GITHUB_SHA"))
                if is_token(candidate)
            ),
            None,
        )
        digest = env.get("REPROIT_IMAGE_DIGEST")
        return cls(
            project_id=project_id,
            build=build,
            commit=resolved,
            image_digest=digest if is_token(digest) else None,
        )


@dataclass(frozen=True)
class CaptureEnvironment:
    """The clock reading, the batch counter value and the host facts one batch is built with.

    ``now_ms`` (epoch milliseconds) gives ``observedAt``, the batch id and the envelope's
    ``observedAtMs`` fallback; ``batch_number`` is the uploader's counter (from 1); ``runtime``
    is ``"python X.Y.Z"``; ``os``, ``arch`` and ``tz`` are left out of the envelope when ``None``.
    """

    now_ms: int
    batch_number: int
    runtime: str
    os: str | None = None
    arch: str | None = None
    tz: str | None = None


_ARCH_NAMES: Final[Mapping[str, str]] = {
    "x86_64": "x64",
    "amd64": "x64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i386": "ia32",
    "i686": "ia32",
    "x86": "ia32",
    "armv7l": "arm",
    "armv6l": "arm",
    "ppc64le": "ppc64",
    "s390x": "s390x",
}


def host_environment(batch_number: int, *, now_ms: int | None = None) -> CaptureEnvironment:
    """The :class:`CaptureEnvironment` of this process for batch ``batch_number``.

    ``os`` is ``sys.platform`` (``linux``, ``darwin``, ``win32``: the same words as Node's
    ``process.platform``); ``arch`` is the machine name in Node's vocabulary (``x64``,
    ``arm64``, ...; other machines lowercased); ``tz`` is :func:`host_timezone`.
    """
    version = sys.version_info
    machine = platform.machine().lower()
    return CaptureEnvironment(
        now_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        batch_number=batch_number,
        runtime=f"python {version.major}.{version.minor}.{version.micro}",
        os=sys.platform or None,
        arch=_ARCH_NAMES.get(machine, machine) or None,
        tz=host_timezone(),
    )


_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*", re.ASCII)


def _zone_from_path(path: str) -> str | None:
    marker = "zoneinfo/"
    index = path.rfind(marker)
    if index < 0:
        return None
    name = path[index + len(marker) :]
    for prefix in ("posix/", "right/"):
        name = name.removeprefix(prefix)
    return name if _ZONE_NAME.fullmatch(name) else None


def _known_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except Exception:
        return False
    return True


def host_timezone(environ: Mapping[str, str] | None = None) -> str | None:
    """The IANA time zone name of this process, or ``None`` when it cannot be known.

    ``TZ`` wins (``Europe/Berlin``, ``:Europe/Berlin`` or a path into a ``zoneinfo`` tree),
    then the target of the ``/etc/localtime`` link, then ``/etc/timezone``. A ``TZ`` that is
    not a zone name (a POSIX rule such as ``CET-1CEST``) makes the zone unknowable: ``None``.
    """
    env = os.environ if environ is None else environ
    tz = env.get("TZ")
    if tz is not None and tz.strip():
        name = tz.strip().removeprefix(":")
        if name.startswith("/"):
            return _zone_from_path(name)
        return name if _ZONE_NAME.fullmatch(name) and _known_zone(name) else None
    try:
        link = os.readlink("/etc/localtime")
    except OSError:
        link = ""
    zone = _zone_from_path(link) if link else None
    if zone:
        return zone
    try:
        with open("/etc/timezone", encoding="utf-8") as handle:
            name = handle.read().strip()
    except OSError:
        return None
    return name if _ZONE_NAME.fullmatch(name) else None


def observed_at(now_ms: int) -> str:
    """RFC 3339 UTC with milliseconds, as JavaScript's ``Date.prototype.toISOString``."""
    seconds, millis = divmod(now_ms, 1000)
    moment = time.gmtime(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{millis:03d}Z"
