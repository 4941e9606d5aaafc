"""The replay session of this process.

With ``REPROIT_REPLAY`` naming a capsule (``reproit-backend-capture``) or a stored
``capture-batch-v1``, the bootstrap loads it once into a :class:`~reproit_otel.ReplaySession`
and every replay instrumentor serves calls from it. A call the recording does not hold is a
divergence: its ``REPROIT:DIVERGENCE`` line goes to the process's real standard error (file
descriptor 2, never through ``logging`` or a captured ``sys.stderr``) so ``reproit-otel check``
and the CI runner can read it.

Traffic the replay refuses without a divergence (calls made under OpenTelemetry's
``suppress_instrumentation``: exporters) is counted by :func:`note_quiet_refusal`.

Redaction (decision D8): the session :func:`load_replay_file` builds redacts every live probe
the way the capture redacted the recorded request before it is matched and before a
DIVERGENCE line prints it (:func:`reproit_otel.wire.replay.live_redactor`): secret query
parameter values, secret-named keys of HTTP bodies and of named SQL parameters, and the
values of :func:`live_secret_values` (``REPROIT_SECRET_VALUES`` as the environment says when
the call is made, and every value read through :mod:`reproit_otel.secrets`) wherever they
occur. A secret never reaches standard error through a DIVERGENCE line.

Locks. ``_lock`` guards the active session and the two counters: under it only a global is
set or an integer added; the DIVERGENCE line is written (``os.write``, never ``logging``)
after it is released. The session's own lock is described in ``wire/replay.py``. No
finalizer, signal handler or logging handler of reproit-otel takes either.
"""

from __future__ import annotations

import os
import re
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from reproit_otel.capture.recording import registered_secret_values
from reproit_otel.config import REPROIT_SECRET_VALUES, read_setting
from reproit_otel.errors import CapsuleError, ConfigurationError
from reproit_otel.wire._js import has_lone_surrogate
from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.capsule import capsule_from_batch, validate_capsule
from reproit_otel.wire.replay import ReplaySession, live_redactor
from reproit_otel.wire.request_record import recorded_server

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")

__all__ = [
    "activate",
    "active_session",
    "deactivate",
    "divergence_count",
    "live_secret_values",
    "load_replay_file",
    "note_quiet_refusal",
    "quiet_refusal_count",
    "read_capsule_file",
    "recorded_server_address",
    "report_divergence",
    "write_stderr_line",
]

_lock = threading.Lock()
_session: ReplaySession | None = None
_divergences = 0
_quiet_refusals = 0


def read_capsule_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a capsule, or a capture batch projected to its capsule, as a JSON object.

    The file is parsed with ``JSON.parse`` rules (no ``NaN``, any nesting depth). Raises
    :class:`~reproit_otel.errors.CapsuleError` when the file is missing, is not UTF-8 JSON,
    holds a lone surrogate escape, holds neither a capsule nor a batch that projects to one, or
    fails :func:`~reproit_otel.wire.capsule.validate_capsule` with ``strict=False`` (format,
    version, events, and an envelope replay can pin). Stricter checks are the caller's.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise CapsuleError(f"cannot read {file}: {error}") from error
    except UnicodeDecodeError as error:
        raise CapsuleError(f"{file} is not UTF-8 text: {error}") from error
    try:
        document: Any = js_json_parse(text)
    except ValueError as error:
        raise CapsuleError(
            f"{file} is not JSON ({error}); expected a reproit-backend-capture capsule or a "
            "capture-batch-v1"
        ) from error
    # Strictly decoded UTF-8 holds no surrogate: only a \uD800-\uDFFF escape can make one,
    # so the walk over the whole document is needed only when the text has such an escape.
    if _SURROGATE_ESCAPE.search(text) is not None and has_lone_surrogate(document):
        raise CapsuleError(f"{file} holds a lone UTF-16 surrogate escape; text must be Unicode")
    if isinstance(document, dict) and "batchId" in document and "format" not in document:
        capsule = capsule_from_batch(document)
        if capsule is None:
            raise CapsuleError(
                f"{file} is a capture batch without an operation start, a trigger or a failure "
                "observation, so it cannot be replayed"
            )
        document = capsule
    if not isinstance(document, dict):
        raise CapsuleError(f"{file} does not hold a JSON object")
    try:
        validate_capsule(document, strict=False)  # the envelope replay pins, among others
    except CapsuleError as error:
        raise CapsuleError(f"{file}: {error}") from None
    return document


def load_replay_file(path: str | os.PathLike[str]) -> ReplaySession:
    """Load a capsule, or a capture batch projected to its capsule, into a replay session.

    Raises :class:`~reproit_otel.errors.CapsuleError` as :func:`read_capsule_file` does, and
    for a capsule whose format or version replay does not accept.
    """
    return ReplaySession(read_capsule_file(path), live_redactor=live_redactor(live_secret_values))


@lru_cache(maxsize=8)
def _configured(raw: str) -> tuple[str, ...]:
    try:
        values: tuple[str, ...] = read_setting(REPROIT_SECRET_VALUES, {REPROIT_SECRET_VALUES: raw})
    except ConfigurationError:
        return ()  # the configuration already reported it; replay still runs
    return values


@lru_cache(maxsize=8)
def _combined(raw: str | None, registered: tuple[str, ...]) -> tuple[str, ...]:
    configured = () if raw is None else _configured(raw)
    return tuple(dict.fromkeys((*configured, *registered)))


def live_secret_values() -> tuple[str, ...]:
    """The secret values scrubbed from live calls in replay (D8), as they are now.

    ``REPROIT_SECRET_VALUES`` read from the environment at each call (a test may change it),
    then every value registered through :func:`reproit_otel.secrets.get`.
    """
    return _combined(os.environ.get(REPROIT_SECRET_VALUES), registered_secret_values())


def activate(session: ReplaySession) -> None:
    """Make ``session`` the one every replay instrumentor serves from."""
    global _session
    with _lock:
        _session = session


def deactivate() -> None:
    """Forget the active session (used by ``uninstrument`` and tests)."""
    global _session, _divergences, _quiet_refusals
    with _lock:
        _session = None
        _divergences = 0
        _quiet_refusals = 0


def active_session() -> ReplaySession | None:
    """The session being replayed in this process, or ``None`` outside replay."""
    return _session


def recorded_server_address() -> tuple[str, int] | None:
    """The server address the active session's request was received on in production
    (``input.request.server``: the replayed application listens on ``check``'s port), read
    once per session; ``None`` outside replay or when the capture holds none."""
    session = _session
    if session is None:
        return None
    known = _recorded_server
    if known[0] is not session:
        known[:] = [session, recorded_server(session.capsule)]
    address: tuple[str, int] | None = known[1]
    return address


_recorded_server: list[Any] = [None, None]


def report_divergence(line: str) -> None:
    """Write one ``REPROIT:DIVERGENCE`` line to file descriptor 2, unbuffered."""
    global _divergences
    with _lock:
        _divergences += 1
    write_stderr_line(line)


def write_stderr_line(line: str) -> None:
    """Write ``line`` + newline to file descriptor 2, unbuffered; never raises."""
    data = (line.rstrip("\n") + "\n").encode("utf-8", "surrogatepass")
    try:
        while data:
            written = os.write(2, data)
            data = data[written:]
    except OSError:
        pass


def note_quiet_refusal() -> None:
    """Count one call refused without a divergence (telemetry traffic during a replay)."""
    global _quiet_refusals
    with _lock:
        _quiet_refusals += 1


def quiet_refusal_count() -> int:
    """How many calls this replay refused quietly (see :func:`note_quiet_refusal`)."""
    return _quiet_refusals


def divergence_count() -> int:
    """How many divergence lines this process has reported."""
    return _divergences
