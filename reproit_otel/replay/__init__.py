"""Hermetic replay: serve a recorded operation's calls instead of making them.

Set ``REPROIT_REPLAY`` to a capsule (or a stored capture batch) and start the application the
usual way (under ``opentelemetry-instrument``, or with :func:`reproit_otel.install`). The
bootstrap then calls :func:`install_replay`, which

1. loads the file into the process's :class:`~reproit_otel.ReplaySession`,
2. pins the capsule's determinism envelope (time zone, clock, :mod:`random`),
3. installs :class:`ReproitReplayInstrumentor`, which patches ``requests``, ``httpx``,
   ``psycopg2`` and psycopg 3 (``psycopg``, ``psycopg_pool`` through it) at the same seams the
   recorders use, so a served call still produces its
   OpenTelemetry span, and patches the credential checks (``instrumentation/credentials.py``)
   so that a signed session, CSRF token or JWT is answered with the outcome production's
   check recorded,
4. installs the network tripwire (:mod:`reproit_otel.replay.tripwire`): any other client's
   connection, datagram or name lookup beyond loopback is refused and reported, and the
   process guard (:mod:`reproit_otel.replay.child_process`): a child process that would not
   arm the same replay is refused and reported,
5. for a production capsule, opens the request window
   (:mod:`reproit_otel.replay.request_window`): calls made before the recorded request
   arrives are answered without consuming the recording, and
6. writes one line to the process's real standard error (file descriptor 2) saying that the
   replay is active::

       REPROIT:REPLAY {"capsule":"/abs/path/capsule.json","exchanges":6}

   (``capsule`` is the path as given, ``exchanges`` the number of recorded exchanges; keys in
   this order). ``reproit-otel check`` requires this line from a production replay: without it
   the application never loaded the capsule (``opentelemetry-instrument`` failed to set up,
   ``REPROIT_REPLAY`` did not reach the process, reproit-otel is not installed there) and
   ran live, so its answer says nothing about the recording. A CI capsule (operation
   ``test:...``) gets no such line: its ``REPROIT:CI-TEST`` line already proves the replay, and
   a CI run's marker lines stay exactly the reference's (PROTOCOL 8.3).

From then on no recorded library opens a socket: a call the recording holds is served from it,
and any other call is a ``REPROIT:DIVERGENCE`` (HTTP 599, or ``DivergedError`` for SQL).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from reproit_otel.replay.child_process import install_process_guard, uninstall_process_guard
from reproit_otel.replay.envelope import PinnedEnvelope, pin_envelope
from reproit_otel.replay.request_window import RequestWindow, open_request_window
from reproit_otel.replay.session import (
    activate,
    active_session,
    deactivate,
    load_replay_file,
    write_stderr_line,
)
from reproit_otel.replay.tripwire import install_tripwire, uninstall_tripwire
from reproit_otel.wire.canonical import ordered_json
from reproit_otel.wire.replay import ReplaySession

__all__ = [
    "REPLAY_MARKER",
    "ReproitReplayInstrumentor",
    "install_replay",
    "replay_marker_line",
    "uninstall_replay",
]

REPLAY_MARKER = "REPROIT:REPLAY "
"""The prefix of the line :func:`install_replay` writes once the replay is active."""

_log = logging.getLogger("reproit_otel")

# Each recorded library's replay instrumentor, by module and class name.
_LIBRARY_INSTRUMENTORS = (
    ("reproit_otel.instrumentation.requests", "RequestsReplayInstrumentor", "requests"),
    ("reproit_otel.instrumentation.httpx", "HttpxReplayInstrumentor", "httpx"),
    ("reproit_otel.instrumentation.psycopg2", "Psycopg2ReplayInstrumentor", "psycopg2"),
    ("reproit_otel.instrumentation.psycopg", "PsycopgReplayInstrumentor", "psycopg"),
)

_CI_OPERATION_PREFIX = "test:"

_pinned: PinnedEnvelope | None = None
_window: RequestWindow | None = None


def _library_instrumentors() -> list[BaseInstrumentor]:
    found: list[BaseInstrumentor] = []
    for module_name, class_name, library in _LIBRARY_INSTRUMENTORS:
        try:
            importlib.import_module(library)
        except ImportError:
            continue  # the application does not use this library; nothing to serve
        module = importlib.import_module(module_name)
        found.append(getattr(module, class_name)())
    return found


class ReproitReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Installs the replay side of every recorded library that is importable."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        for instrumentor in _library_instrumentors():
            instrumentor.instrument(skip_dep_check=True)

    def _uninstrument(self, **kwargs: Any) -> None:
        for instrumentor in _library_instrumentors():
            instrumentor.uninstrument()


def replay_marker_line(capsule: str, exchanges: int) -> str:
    """``REPROIT:REPLAY {"capsule":...,"exchanges":N}`` (no trailing newline)."""
    return REPLAY_MARKER + ordered_json({"capsule": capsule, "exchanges": exchanges})


def install_replay(path: str | os.PathLike[str] | None = None) -> ReplaySession:
    """Load ``path`` (default ``$REPROIT_REPLAY``), pin its envelope and serve its calls.

    Also installs the network tripwire and, for a production capsule, writes the
    ``REPROIT:REPLAY`` line to file descriptor 2. Calling it again while a session is active
    returns that session.
    """
    global _pinned
    current = active_session()
    if current is not None:
        return current
    target = path if path is not None else os.environ.get("REPROIT_REPLAY", "")
    if not target:
        raise ValueError("install_replay needs a capsule path or REPROIT_REPLAY")
    session = load_replay_file(target)
    try:
        activate(session)
        _pinned = pin_envelope(getattr(session, "envelope", None))
        for reason in _pinned.skipped:
            _log.warning("reproit replay: envelope not fully pinned: %s", reason)
        ReproitReplayInstrumentor().instrument()
        _install_credential_checks()
        _install_cache_lookups()
        _install_inbound()
        install_tripwire()
        install_process_guard()
        operation = session.capsule.get("operation")
        if isinstance(operation, str) and not operation.startswith(_CI_OPERATION_PREFIX):
            _open_window(session, operation)
    except BaseException:
        uninstall_replay()  # all or nothing: a half-armed replay must not serve
        raise
    if not (isinstance(operation, str) and operation.startswith(_CI_OPERATION_PREFIX)):
        write_stderr_line(replay_marker_line(os.fspath(target), session.total))
    return session


def _install_credential_checks() -> None:
    """Serve recorded signature and token checks (``instrumentation/credentials.py``)."""
    try:
        credentials = importlib.import_module("reproit_otel.instrumentation.credentials")
        credentials.install_credentials()
    except Exception:
        _log.exception("reproit replay: could not install the credential checks")


def _install_inbound() -> None:
    """Wrap the frameworks' entry points as capture does: each request then sees the server
    address production's was received on (``instrumentation/wsgi.py``); nothing is captured.

    Not when a capture pipeline is installed in this process: its wrappers are in place and
    stay its own (:func:`_uninstall_inbound` leaves them)."""
    from reproit_otel.capture.recording import current_pipeline
    from reproit_otel.instrumentation import asgi, django, wsgi

    if current_pipeline() is not None:
        return
    _inbound_wrapped[0] = True
    for install in (wsgi.install_flask, asgi.install_starlette, django.install_django):
        try:
            install()
        except Exception:
            _log.exception("reproit replay: could not wrap %s", install.__name__)


_inbound_wrapped = [False]


def _uninstall_inbound() -> None:
    from reproit_otel.instrumentation import asgi, django, wsgi

    if not _inbound_wrapped[0]:
        return
    _inbound_wrapped[0] = False
    for uninstall in (wsgi.uninstall_flask, asgi.uninstall_starlette, django.uninstall_django):
        try:
            uninstall()
        except Exception:
            _log.exception("reproit replay: could not unwrap %s", uninstall.__name__)


def _install_cache_lookups() -> None:
    """Serve the lookups production's content type cache answered
    (``instrumentation/django_contenttypes.py``)."""
    try:
        contenttypes = importlib.import_module("reproit_otel.instrumentation.django_contenttypes")
        contenttypes.install_contenttypes()
    except Exception:
        _log.exception("reproit replay: could not install the content type lookups")


def _open_window(session: ReplaySession, operation: str) -> None:
    global _window
    pinned = _pinned

    def on_begin() -> None:
        if pinned is not None:
            pinned.restart_clock()

    _window = open_request_window(session, operation, on_begin, write_stderr_line)


def uninstall_replay() -> None:
    """Restore every patched library, the sockets, the clock, the time zone and :mod:`random`."""
    global _pinned, _window
    if _window is not None:
        _window.shutdown()
        _window = None
    uninstall_process_guard()
    uninstall_tripwire()
    _uninstall_inbound()
    importlib.import_module("reproit_otel.instrumentation.credentials").uninstall_credentials()
    importlib.import_module(
        "reproit_otel.instrumentation.django_contenttypes"
    ).uninstall_contenttypes()
    ReproitReplayInstrumentor().uninstrument()
    if _pinned is not None:
        _pinned.restore()
        _pinned = None
    deactivate()
