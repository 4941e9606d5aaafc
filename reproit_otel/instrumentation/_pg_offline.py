"""psycopg2's client-side SQL rendering, without a server connection (used in replay).

``cursor.mogrify`` and ``psycopg2.sql`` need a live connection to quote strings and bytes.
Replay has none, yet ``psycopg2.extras.execute_values``/``execute_batch`` build their
statement with ``cursor.mogrify``, so the replayed text must be byte-identical to the one
recorded. These functions reproduce what psycopg2 sends to a server with
``standard_conforming_strings`` on and UTF-8 client encoding (every supported PostgreSQL
default): strings quoted with doubled single quotes, ``bytes`` in hex form
(``'\\x..'::bytea``), lists as ``ARRAY[...]``, tuples as ``(a, b)``, everything else through
psycopg2's own adapters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg2 import extensions as _ext
from psycopg2 import sql as _sql

__all__ = ["mogrify", "quote", "quote_ident", "render"]


def quote(value: Any) -> bytes:
    """The SQL literal psycopg2 writes for ``value``."""
    if value is None:
        return b"NULL"
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, str):
        return b"'" + value.replace("'", "''").encode("utf-8") + b"'"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"'\\x" + bytes(value).hex().encode("ascii") + b"'::bytea"
    if isinstance(value, list):
        if not value:
            return b"'{}'"
        return b"ARRAY[" + b",".join(quote(item) for item in value) + b"]"
    if isinstance(value, tuple):
        return b"(" + b", ".join(quote(item) for item in value) + b")"
    quoted = _ext.adapt(value).getquoted()
    return quoted if isinstance(quoted, bytes) else str(quoted).encode("utf-8")


def quote_ident(name: str) -> str:
    """A quoted identifier (what ``PQescapeIdentifier`` returns)."""
    return '"' + name.replace('"', '""') + '"'


def render(composable: Any) -> str:
    """The text of a :mod:`psycopg2.sql` object, rendered without a connection."""
    if isinstance(composable, _sql.Composed):
        return "".join(render(part) for part in composable.seq)
    if isinstance(composable, _sql.SQL):
        return str(composable.string)
    if isinstance(composable, _sql.Identifier):
        return ".".join(quote_ident(part) for part in composable.strings)
    if isinstance(composable, _sql.Literal):
        return quote(composable.wrapped).decode("utf-8")
    if isinstance(composable, _sql.Placeholder):
        name = composable.name
        return "%s" if name is None else f"%({name})s"
    raise TypeError(f"cannot render {type(composable).__name__} without a connection")


def mogrify(query: Any, params: Any = None) -> bytes:
    """What ``cursor.mogrify(query, params)`` returns on a live connection."""
    if isinstance(query, _sql.Composable):
        query = render(query)
    text = query.encode("utf-8") if isinstance(query, str) else bytes(query)
    if params is None:
        return text
    if isinstance(params, Mapping):
        # bytes formatting looks %(name)s up with bytes keys
        return text % {
            (key.encode("utf-8") if isinstance(key, str) else key): quote(value)
            for key, value in params.items()
        }
    return text % tuple(quote(value) for value in params)
