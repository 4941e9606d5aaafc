"""The floor under any capture of the benchmark service: a minimal reference-keeping stand-in.

It hooks the three places reproit-otel hooks for the benchmark's request, and does the least
work a capture could do there:

* the WSGI call (``flask.Flask.__call__``, outermost): a fresh per-request list in a context
  variable, and the response status and headers appended to it; when the application has
  answered, the list is dropped if the status is below 500 and kept (in a bounded deque)
  otherwise;
* ``requests.adapters.HTTPAdapter.send`` (outermost): the prepared request and the response
  appended by reference;
* a psycopg2 cursor's ``execute`` and ``fetchone``/``fetchmany``/``fetchall``: the statement,
  its parameters and the rows appended by reference (through a small proxy that
  ``psycopg2.connect``, wrapped, hands out while the floor is on).

Nothing is copied, encoded, redacted or timed: it is what keeping a request's references
costs in pure Python, the bar ``benchmarks/capture_paired.py`` sets reproit-otel's healthy
capture against. :data:`state` ``.active`` switches it per request (off: each hook checks one
attribute and calls through). :func:`install` is idempotent and never uninstalls.
"""

from __future__ import annotations

import collections
import contextvars
from typing import Any

__all__ = ["install", "kept", "state"]


class _State:
    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


state = _State()
"""``state.active``: whether the hooks keep anything (switched between requests)."""

_refs: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar(
    "bench_floor_refs", default=None
)
kept: collections.deque[list[Any]] = collections.deque(maxlen=64)
"""The lists of the requests that answered 500 or more (the failures a capture would keep)."""
_installed = False


class _Cursor:
    """A psycopg2 cursor that appends what it runs and returns to the request's list."""

    __slots__ = ("_cursor", "_refs")

    def __init__(self, cursor: Any, refs: list[Any]) -> None:
        self._cursor = cursor
        self._refs = refs

    def execute(self, query: Any, vars: Any = None) -> Any:
        self._refs.append((query, vars))
        return self._cursor.execute(query, vars)

    def fetchone(self) -> Any:
        row = self._cursor.fetchone()
        self._refs.append(row)
        return row

    def fetchmany(self, size: Any = None) -> Any:
        rows = self._cursor.fetchmany() if size is None else self._cursor.fetchmany(size)
        self._refs.append(rows)
        return rows

    def fetchall(self) -> Any:
        rows = self._cursor.fetchall()
        self._refs.append(rows)
        return rows

    def __enter__(self) -> _Cursor:
        self._cursor.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> Any:
        return self._cursor.__exit__(*exc_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _Connection:
    """A psycopg2 connection whose ``cursor()`` hands out :class:`_Cursor` during a request."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Any) -> None:
        object.__setattr__(self, "_connection", connection)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        cursor = self._connection.cursor(*args, **kwargs)
        refs = _refs.get() if state.active else None
        return cursor if refs is None else _Cursor(cursor, refs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._connection, name, value)


def install() -> None:
    """Hook the WSGI call, ``HTTPAdapter.send`` and ``psycopg2.connect`` (outermost, after
    whatever else is installed). Call it before the service makes its first connection."""
    global _installed
    if _installed:
        return
    _installed = True
    import flask
    import psycopg2
    import requests.adapters

    original_call = flask.Flask.__call__

    def __call__(self: Any, environ: Any, start_response: Any) -> Any:
        if not state.active:
            return original_call(self, environ, start_response)
        refs: list[Any] = [environ]
        token = _refs.set(refs)
        status: list[str] = []

        def keeping_start_response(code: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(code)
            refs.append(headers)
            return start_response(code, headers, exc_info)

        try:
            body = original_call(self, environ, keeping_start_response)
        finally:
            _refs.reset(token)
        if status and status[-1][:3] >= "500":
            kept.append(refs)
        return body

    original_send = requests.adapters.HTTPAdapter.send

    def send(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        refs = _refs.get() if state.active else None
        if refs is None:
            return original_send(self, request, *args, **kwargs)
        refs.append(request)
        response = original_send(self, request, *args, **kwargs)
        refs.append(response)
        return response

    original_connect = psycopg2.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        return _Connection(original_connect(*args, **kwargs))

    flask.Flask.__call__ = __call__  # type: ignore[method-assign]
    requests.adapters.HTTPAdapter.send = send  # type: ignore[method-assign]
    psycopg2.connect = connect
