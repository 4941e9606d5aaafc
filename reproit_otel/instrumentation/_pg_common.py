"""What the psycopg2 recorder and the psycopg2 replay agree on: statement text and result shape.

Both sides must turn one application call into the same ``request`` (so a replay matches the
recording) and read the same ``response`` fields:

* ``statement_text``: the statement as the application passed it (``str``; ``bytes`` decoded
  as UTF-8; a :mod:`psycopg2.sql` composition rendered). The parameters are NOT merged into
  the text: they travel as ``values``, so matching compares them structurally and redaction
  can see them. (``cursor.query``, the merged text psycopg2 sent, is not recorded.)
* ``callproc_text``: ``callproc("f", [a, b])`` is recorded as the statement
  ``SELECT * FROM f(%s,%s)`` (named parameters: ``SELECT * FROM f(a:=%(a)s)``), the shape
  psycopg2 itself sends, with the parameters as ``values``.
* ``effect_kind``: ``read`` when the statement starts with ``SELECT`` or ``SHOW`` after leading
  whitespace (first 8 characters uppercased), else ``write`` (PROTOCOL 4.4).
* ``effect_key``: the statement cut to 256 UTF-16 units, as the reference cuts it.
* A ``columns`` entry per result column is ``[name, type_code, display_size, internal_size,
  precision, scale, null_ok, table_oid, table_column]`` (``cursor.description``); ``null`` when
  the statement returned no result set.
* ``command`` is the command word, as the reference records it (``command_word``: ``SELECT``,
  ``INSERT``, ``CREATE``), not psycopg2's whole status (``INSERT 0 1``, ``CREATE TABLE``);
  ``rowCount`` is psycopg2's ``rowcount`` when it knows one, else the number of rows (so a
  statement without a count, DDL or ``BEGIN``, records ``0``, as the reference does). Where
  psycopg2's status says more than the word and the count (``CREATE TABLE``, ``DECLARE
  CURSOR``) it is kept as ``status`` beside them. Replay shows that ``status``, else rebuilds
  ``statusmessage`` from the word and the count (``status_message``), and ``rowcount`` with
  ``driver_rowcount``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from reproit_otel.wire._js import js_trim

__all__ = [
    "LIBRARY",
    "RESOURCE",
    "TRUNCATED_MESSAGE",
    "callproc_text",
    "column_entry",
    "command_word",
    "driver_rowcount",
    "effect_key",
    "effect_kind",
    "statement_text",
    "status_message",
]

LIBRARY: Final = "psycopg2"
"""The library name exchanges are started with."""

RESOURCE: Final = "pg"
"""The effect ``resource`` of every SQL exchange (PROTOCOL 4.4)."""

TRUNCATED_MESSAGE: Final = (
    "reproit: the recorded pg result was truncated at capture (more than 64 rows), "
    "so replay fails closed instead of serving a partial result"
)
"""The :class:`~reproit_otel.errors.DivergedError` message of a truncated recorded result."""

_KEY_UNITS = 256

_COMMAND_WORD = re.compile(r"[A-Za-z]+")
# Command tags that end in a row count (PostgreSQL's CommandComplete); INSERT has an OID first.
_COUNTED: Final = frozenset(
    {"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "MOVE", "FETCH", "COPY"}
)


def command_word(status: Any) -> str | None:
    """The ``command`` the reference records for a status (``"INSERT 0 1"`` -> ``"INSERT"``):
    its leading ASCII letters, ``None`` when it has none."""
    if not isinstance(status, str):
        return None
    found = _COMMAND_WORD.match(status)
    return None if found is None else found.group()


def status_message(command: Any, row_count: Any) -> Any:
    """The ``statusmessage`` psycopg2 shows for a recorded ``command`` and ``rowCount``.

    A command of more than one word (a capsule recorded before the command word, or a
    documented default answer) is the status itself.
    """
    if not isinstance(command, str) or " " in command:
        return command
    word = command.upper()
    if word in _COUNTED and isinstance(row_count, int) and not isinstance(row_count, bool):
        return f"INSERT 0 {row_count}" if word == "INSERT" else f"{command} {row_count}"
    return command


def driver_rowcount(command: Any, row_count: Any, has_result: bool) -> int:
    """The ``rowcount`` psycopg2 shows: the rows of a result, the count of a counted command,
    else ``-1`` (DDL, ``BEGIN``, ``SET``: psycopg2 knows no count there)."""
    if not isinstance(row_count, int) or isinstance(row_count, bool):
        return -1
    if has_result or row_count < 0:
        return row_count
    word = command.split(" ", 1)[0].upper() if isinstance(command, str) else ""
    return row_count if word in _COUNTED else -1


def statement_text(query: Any, render: Any = None) -> str:
    """The text of a statement as the application passed it.

    ``render`` turns a :mod:`psycopg2.sql` ``Composable`` into text (``as_string`` with the
    live cursor when recording, an offline renderer in replay).
    """
    if isinstance(query, str):
        return query
    if isinstance(query, (bytes, bytearray, memoryview)):
        return bytes(query).decode("utf-8", "replace")
    if render is not None:
        return str(render(query))
    return str(query)


def callproc_text(procname: str, parameters: Any) -> str:
    """The statement a ``callproc`` call is recorded as (see the module docstring)."""
    if isinstance(parameters, Mapping):
        inner = ",".join(f"{name}:=%({name})s" for name in parameters)
    elif isinstance(parameters, Sequence) and not isinstance(parameters, (str, bytes)):
        inner = ",".join("%s" for _ in parameters)
    else:
        inner = ""
    return f"SELECT * FROM {procname}({inner})"


def effect_kind(text: str) -> str:
    """``read`` for ``SELECT``/``SHOW`` statements, else ``write`` (PROTOCOL 4.4)."""
    head = js_trim(text)[:8].upper()
    return "read" if head.startswith(("SELECT", "SHOW")) else "write"


def effect_key(text: str) -> str:
    """The statement cut to 256 UTF-16 code units (a split pair keeps its high surrogate)."""
    units = 0
    for index, char in enumerate(text):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > _KEY_UNITS:
            if width == 2 and units < _KEY_UNITS:
                high = 0xD800 + ((ord(char) - 0x10000) >> 10)
                return text[:index] + chr(high)
            return text[:index]
        units += width
    return text


def column_entry(column: Any) -> list[Any]:
    """The recorded form of one ``cursor.description`` column."""
    entry = list(column)
    entry.append(getattr(column, "table_oid", None))
    entry.append(getattr(column, "table_column", None))
    return entry
