"""psycopg 3: record every SQL statement of a captured operation, like psycopg2.

psycopg 3 (``psycopg``, with ``psycopg_pool``) is recorded with the very exchange the psycopg2
recorder writes (``protocol: "pg"``, PROTOCOL 4.4, decision D11), so a capsule does not tell
which driver produced it: statements, parameters, rows, ``rowcount``, the command, columns in
psycopg2's ``description`` form, and errors with their ``sqlstate`` as ``code``.

:func:`install_recorder` (the bootstrap calls it when psycopg is importable; idempotent)
patches psycopg's cursor base classes, sync and async, which every connection uses however it
was opened (``psycopg.connect``, ``Connection.connect``, ``AsyncConnection.connect``, a
``psycopg_pool.ConnectionPool`` or ``AsyncConnectionPool``). Client-side cursors of every
kind, ``Connection.execute``, ``executemany``, server-side cursors and every row factory are
covered; ``copy()``, ``stream()`` and pipeline mode are not (the operation is marked
incomplete, so it is not uploaded as complete). What is recorded and when is in
:mod:`reproit_otel.instrumentation._pg3_record`.

:class:`PsycopgReplayInstrumentor` replays it: every connection is a stub served from the
active replay session (:mod:`reproit_otel.instrumentation._pg3_replay`).
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from reproit_otel.config import given_secret_values

__all__ = ["PsycopgReplayInstrumentor", "install_recorder", "uninstall_recorder"]


def install_recorder() -> bool:
    """Record psycopg 3 statements from now on. Returns False when psycopg is not installed.

    Idempotent: a second call does nothing.
    """
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    from reproit_otel.instrumentation import _pg3_record

    _pg3_record.install()
    return True


def uninstall_recorder() -> None:
    """Stop recording and restore psycopg's classes."""
    if "psycopg" not in sys.modules:
        return
    module = sys.modules.get("reproit_otel.instrumentation._pg3_record")
    if module is not None:
        module.uninstall()


class PsycopgReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Serve every psycopg 3 connection from the active replay session.

    ``instrument()`` patches ``psycopg.connect``, ``Connection.connect``,
    ``AsyncConnection.connect``, ``TypeInfo.fetch`` and the ``psycopg.sql`` renderers
    (:func:`~reproit_otel.instrumentation._pg3_replay.replay_patches`); ``uninstrument()``
    restores every original exactly. The first ``instrument()`` also gives psycopg's cursor
    classes a ``__new__`` that stays (it does nothing for a connection that is not a stub).
    ``instrument(secret_values=(...))`` names the values to scrub from live statements before
    matching (default: the configured ``REPROIT_SECRET_VALUES``).
    """

    _patches: list[tuple[Any, str, Any, Any]]

    def instrumentation_dependencies(self) -> Collection[str]:
        # psycopg ships with "psycopg-binary" or "psycopg-c"; the import is the real check.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        from reproit_otel.instrumentation._pg3_replay import replay_patches
        from reproit_otel.instrumentation._pg_serve import set_secret_values

        self._patches = []
        set_secret_values(given_secret_values(kwargs.get("secret_values")))
        for owner, name, replacement in replay_patches():
            self._patch(owner, name, replacement)

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        current = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        if _is_wrapper(current):
            # OpenTelemetry's psycopg instrumentation wrapped it first: serve beneath its
            # wrapper, so its connection handling (the traced cursor factory) still runs.
            original = current.__wrapped__
            current.__wrapped__ = replacement
            self._patches.append((owner, name, original, current))
            return
        self._patches.append((owner, name, current, None))
        setattr(owner, name, replacement)

    def _uninstrument(self, **kwargs: Any) -> None:
        for owner, name, original, wrapper in reversed(getattr(self, "_patches", [])):
            if wrapper is not None:
                wrapper.__wrapped__ = original
            present = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
            if wrapper is None or present is not wrapper:
                # Ours, or the wrapper was removed first and left ours (or ours bound) there.
                setattr(owner, name, original)
        self._patches = []


def _is_wrapper(value: Any) -> bool:
    """A ``wrapt`` function wrapper (what OpenTelemetry instrumentations install)."""
    try:
        import wrapt
    except ImportError:
        return False
    return isinstance(value, wrapt.FunctionWrapper)
