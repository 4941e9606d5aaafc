"""SQLAlchemy: keep ``effectsComplete`` honest for engines, with no code change.

SQLAlchemy talks to PostgreSQL through a DB-API driver; reproit-otel records the driver
(psycopg2, ``instrumentation/psycopg2.py``; psycopg 3, ``instrumentation/psycopg.py``), so
every statement an engine runs, the pool's pre-ping and the dialect's first-connect
introspection included, is a recorded ``pg`` exchange. What this module adds is the link
between SQLAlchemy and that recording, for SQLAlchemy 2.0 and 2.1, with or without
``opentelemetry-instrumentation-sqlalchemy``:

* a pool ``checkout`` listener (class-level on ``sqlalchemy.pool.Pool``, so every engine has
  it, made before or after :func:`install_recorder`): a connection the psycopg2 or psycopg 3
  recorder records covers the instrumentation's ``connect`` span (a checkout from a warm pool
  does no I/O, so there is nothing else to record); a connection of any other driver (pg8000,
  asyncpg, mysqlclient...) makes the operation incomplete, with the driver named
  in the reason, instead of letting its unrecorded statements pass for a complete capture;
* the instrumentation's statement spans are covered by the driver's exchange that runs beside
  them (``operation.py``: those spans are never made current, so the driver call is their
  sibling, not their child); with another driver they stay uncovered.

:func:`install_recorder` is called by ``reproit_otel.install()`` when SQLAlchemy is
importable; :func:`uninstall_recorder` removes the listener.
"""

from __future__ import annotations

import sys
from typing import Any

from reproit_otel._guard import guarded
from reproit_otel.capture import recording

__all__ = ["install_recorder", "uninstall_recorder"]

_installed = False


def _recorded(dbapi_connection: Any) -> bool:
    """Whether the psycopg2 or the psycopg 3 recorder records ``dbapi_connection``."""
    for name in _RECORDERS:
        module = sys.modules.get(name)
        if module is not None and module.is_recording_connection(dbapi_connection):
            return True
    return False


_RECORDERS = (
    "reproit_otel.instrumentation._pg_record",
    "reproit_otel.instrumentation._pg3_record",
)


def _driver(dbapi_connection: Any) -> str:
    module = type(dbapi_connection).__module__ or "unknown"
    return module.partition(".")[0]


def _checkout(dbapi_connection: Any, connection_record: Any, connection_proxy: Any) -> None:
    if not recording.recording_enabled():
        return
    with guarded("sqlalchemy.checkout"):
        if _recorded(dbapi_connection):
            recording.cover_current_span()
        else:
            recording.mark_incomplete(
                f"sqlalchemy: a {_driver(dbapi_connection)} connection (reproit-otel records "
                "the psycopg2 and psycopg drivers only)"
            )


def install_recorder() -> bool:
    """Listen to every SQLAlchemy pool's checkouts. False when SQLAlchemy is not installed.

    Idempotent.
    """
    global _installed
    try:
        from sqlalchemy import event
        from sqlalchemy.pool import Pool
    except ImportError:
        return False
    if not _installed:
        event.listen(Pool, "checkout", _checkout)
        _installed = True
    return True


def uninstall_recorder() -> None:
    """Remove the listener."""
    global _installed
    if not _installed:
        return
    from sqlalchemy import event
    from sqlalchemy.pool import Pool

    event.remove(Pool, "checkout", _checkout)
    _installed = False
