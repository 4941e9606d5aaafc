"""Where a request's exception goes: onto its capture, or (under replay) into a marker line.

The framework error hooks (``instrumentation/errors.py``), the WSGI/ASGI middleware and the
span processor call :func:`note_exception` with the exception a request raised, before the
framework turns it into an error page:

* while capturing, the exception is built (``wire/exception.py``: type, message, frames,
  causes; bounded; configured secret values and secret ``name=value`` pairs scrubbed) and kept
  on the request's operation, whose ``return`` event then carries it as
  ``output: {"error": ...}`` when the operation fails;
* while replaying (``REPROIT_REPLAY``), the process writes one line to its real standard
  error, next to its ``REPROIT:REPLAY`` line::

      REPROIT:EXCEPTION {"operation":"GET /coupon","exception":{"type":"builtins.KeyError",...}}

  (keys in this order), which ``reproit-otel check`` compares with the recorded exception.

Nothing here changes what the application sees: the exception object is only read (its class,
``str()``, its traceback's code locations; never a frame's locals), and every step runs inside
the guard.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
import threading
from typing import Any

from reproit_otel._guard import guarded
from reproit_otel.capture import recording
from reproit_otel.wire.canonical import ordered_json
from reproit_otel.wire.exception import FrameRoots, exception_record

__all__ = [
    "EXCEPTION_MARKER",
    "exception_marker_line",
    "frame_roots",
    "note_exception",
    "record_exception",
    "set_application_root",
]

EXCEPTION_MARKER = "REPROIT:EXCEPTION "
"""The prefix of the line a replaying process writes for its request's exception."""

_root: str | None = None
_reported = threading.local()


def set_application_root(path: str) -> None:
    """Name frames relative to ``path`` (default: the working directory at first use)."""
    global _root
    _root = path
    frame_roots.cache_clear()


@functools.lru_cache(maxsize=1)
def frame_roots() -> FrameRoots:
    """The application root and the library folders of this interpreter."""
    libraries: list[str] = []
    paths = sysconfig.get_paths()
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(name):
            libraries.append(paths[name])
    try:
        libraries.extend(site.getsitepackages())
        libraries.append(site.getusersitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    # reproit-otel's own frames are library frames wherever it is installed from.
    libraries.append(os.path.dirname(os.path.abspath(__file__)))
    libraries.append(os.path.dirname(os.path.abspath(os.__file__)))
    return FrameRoots(_root if _root is not None else os.getcwd(), libraries)


def record_exception(error: BaseException, secrets: tuple[str, ...]) -> dict[str, Any]:
    """The JSON value of ``error`` (``wire.exception.exception_record``) for this process.

    Its messages are scrubbed of ``secrets`` and of the values redaction hid from the calls
    that raised it or its causes (:func:`~reproit_otel.capture.recording.echoed_values`).
    """
    echoed = recording.echoed_values(error)
    return exception_record(error, frame_roots(), (*secrets, *echoed) if echoed else secrets)


def exception_marker_line(operation: str, error: dict[str, Any]) -> str:
    """``REPROIT:EXCEPTION {"operation":...,"exception":{...}}`` (no trailing newline)."""
    return EXCEPTION_MARKER + ordered_json({"operation": operation, "exception": error})


def _replaying() -> bool:
    session = sys.modules.get("reproit_otel.replay.session")
    return session is not None and session.active_session() is not None


def note_exception(error: BaseException | None, operation: str | None) -> None:
    """The current request raised ``error`` (``operation`` is its ``METHOD /path``).

    Capturing: kept on the request's operation. Replaying: reported once in a
    ``REPROIT:EXCEPTION`` line. Otherwise nothing. Never raises.
    """
    if error is None:
        return
    with guarded("failures.note"):
        if _replaying():
            _report_replayed(error, operation or "")
            return
        pipeline = recording.current_pipeline()
        note = getattr(pipeline, "note_exception", None)
        if callable(note):
            note(error)


def _report_replayed(error: BaseException, operation: str) -> None:
    # Two hooks may see the same exception (the framework's, then the middleware's as it
    # propagates): the last one reported on this thread is not reported again.
    if getattr(_reported, "error", None) is error:
        return
    _reported.error = error
    from reproit_otel.replay.session import live_secret_values, write_stderr_line

    record = record_exception(error, live_secret_values())
    write_stderr_line(exception_marker_line(operation, record))
