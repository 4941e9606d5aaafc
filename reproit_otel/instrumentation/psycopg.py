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

Replay of psycopg 3 is a separate instrumentor.
"""

from __future__ import annotations

import sys

__all__ = ["install_recorder", "uninstall_recorder"]


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
