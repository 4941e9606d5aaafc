"""Which SQL statements belong to the connection rather than to the request (replay rules).

A recorded operation's *data statements* (its own queries) replay strictly, in order. Around
them a database driver, a pool or an ORM runs statements that set up, probe or bracket the
connection, and whether they run at all depends on the pool's state and the process's age,
which differ between production and a replay. Those are *connection-scope* statements: replay
answers them whenever they are asked, any number of times, without consuming a recorded
exchange, and their presence or absence on either side is never a divergence.

:func:`statement_scope` classifies a statement (the table is in ``docs/replay.md``):

====================  ======================================================================
scope                 statements (case-insensitive, after leading white space; a trailing
                      ``;`` and runs of white space do not matter)
====================  ======================================================================
``transaction``       ``BEGIN``, ``START TRANSACTION``, ``COMMIT``, ``END``, ``ROLLBACK``,
                      ``ABORT`` (each with its optional modifiers)
``savepoint``         ``SAVEPOINT n``, ``RELEASE [SAVEPOINT] n``,
                      ``ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] n``
``setting``           ``SET ...``, ``RESET ...``, ``SHOW ...``, ``DISCARD ...``,
                      ``SELECT set_config(...)``, ``SELECT current_setting(...)``
``ping``              ``SELECT 1`` without parameters (pool pre-ping); the empty statement
                      (psycopg_pool's connection check)
``introspection``     ``SELECT version()``, ``SELECT pg_catalog.version()``,
                      ``SELECT current_schema()``, and a ``SELECT`` that reads only
                      ``pg_type`` (and ``pg_namespace``): type OID lookups
====================  ======================================================================

Everything else is a data statement (``None``).

The classification alone never decides how a *recorded* exchange replays: a recorded
exchange is connection scope only when capture marked it so (``"scope": "connection"`` on
the exchange, :data:`CONNECTION_SCOPE`; the psycopg2 recorder marks the statements of the
table above, see :func:`connection_scope_of`), or when it is one of the answers a warm
connection carried into the capture (``setup``). Every other recorded exchange is a data
exchange and replays strictly, as the reference replays it, whatever its text. The
classification of a *live* statement lets replay answer it when the recording holds no
unconsumed exchange with its text.

:func:`ambient_key` is what two connection-scope statements are compared by: the
classified text with savepoint names replaced by ``<name>``, so Django's
``SAVEPOINT "s140326874098560_x1"`` (named after a thread id) matches any other name.

:func:`default_response` is the documented answer when the recording holds none for a
connection-scope statement (or for a data statement asked before the recorded request):
command tags, one-row answers for ``SHOW``/``set_config``/``current_setting``/``version()``/
``current_schema()``/``SELECT 1``, no rows for ``pg_type`` lookups and other reads (with the
columns the statement names, :func:`~reproit_otel.wire.select_list.result_columns`). The
answers are in the recorded ``pg`` response shape (``command``, ``rowCount``, ``rows``,
``columns``), so replay serves them like a recording.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from reproit_otel.wire.select_list import result_columns

__all__ = [
    "CONNECTION_SCOPE",
    "DEFAULT_PARAMETERS",
    "SCOPE_FIELD",
    "SERVER_VERSION_TEXT",
    "ambient_key",
    "connection_scope_of",
    "default_response",
    "recorded_parameter",
    "setting_change",
    "statement_scope",
]

SCOPE_FIELD: Final = "scope"
"""The exchange member by which capture marks a recorded statement as connection scope."""

CONNECTION_SCOPE: Final = "connection"
"""The value of :data:`SCOPE_FIELD` on a connection-scope exchange."""

SERVER_VERSION_TEXT: Final = (
    "PostgreSQL 15.0 on x86_64-pc-linux-gnu, compiled by reproit-otel replay, 64-bit"
)
"""What ``SELECT version()`` answers when the recording holds no answer."""

DEFAULT_PARAMETERS: Final[Mapping[str, str]] = {
    "server_version": "15.0",
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "standard_conforming_strings": "on",
    "integer_datetimes": "on",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "is_superuser": "off",
    "application_name": "",
    "search_path": '"$user", public',
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "transaction_read_only": "off",
    "max_identifier_length": "63",
}
"""The server parameters a replayed connection reports (``SHOW``, ``parameter_status``)."""

_TEXT_OID: Final = 25
_INT4_OID: Final = 23

_SPACE = re.compile(r"\s+")
_TRANSACTION = re.compile(
    r"^(BEGIN|START TRANSACTION|COMMIT|END|ROLLBACK|ABORT)"
    r"( (WORK|TRANSACTION|ISOLATION LEVEL .*|READ .*|NOT DEFERRABLE|DEFERRABLE|AND (NO )?CHAIN))*$"
)
_SAVEPOINT = re.compile(
    r"^(SAVEPOINT|RELEASE( SAVEPOINT)?|ROLLBACK( WORK| TRANSACTION)? TO( SAVEPOINT)?) (\S+)$"
)
_SETTING_WORDS = ("SET ", "RESET ", "SHOW ", "DISCARD ")
_SETTING_CALL = re.compile(r"^SELECT (PG_CATALOG\.)?(SET_CONFIG|CURRENT_SETTING) ?\(.*\)$")
_PING = re.compile(r"^SELECT 1$")
_FUNCTION_PROBE = re.compile(r"^SELECT (PG_CATALOG\.)?(VERSION|CURRENT_SCHEMA) ?\( ?\)$")
_RELATION = re.compile(r"\b(?:FROM|JOIN) ((?:PG_CATALOG\.)?\"?\w+\"?)")
_TYPE_TABLES = frozenset({"PG_TYPE", "PG_NAMESPACE"})


def _normal(text: str) -> str:
    """Upper case, single spaces, no leading/trailing space or trailing semicolons."""
    squeezed = _SPACE.sub(" ", text).strip()
    while squeezed.endswith(";"):
        squeezed = squeezed[:-1].rstrip()
    return squeezed


def statement_scope(text: Any, values: Any = None) -> str | None:
    """The connection scope of a statement (see the module table), or ``None`` for data.

    ``values`` are the statement's parameters: ``SELECT 1`` is a pre-ping only without any.
    """
    if not isinstance(text, str):
        return None
    normal = _normal(text).upper()
    if not normal:
        return "ping"
    if _SAVEPOINT.match(normal):
        return "savepoint"
    if _TRANSACTION.match(normal):
        return "transaction"
    if normal.startswith(_SETTING_WORDS) or normal in ("SHOW ALL", "DISCARD ALL"):
        return "setting"
    if _SETTING_CALL.match(normal):
        return "setting"
    if _PING.match(normal):
        return None if values else "ping"
    if _FUNCTION_PROBE.match(normal):
        return "introspection"
    if normal.startswith("SELECT ") and "PG_TYPE" in normal:
        tables = {name.replace('"', "").split(".")[-1] for name in _RELATION.findall(normal)}
        if tables and tables <= _TYPE_TABLES and "PG_TYPE" in tables:
            return "introspection"
    return None


def connection_scope_of(exchange: Any, *, carried: bool = False) -> str | None:
    """The connection scope a recorded ``pg`` exchange replays under, or ``None`` (data).

    Only an exchange capture marked (``"scope": "connection"``) or one carried as ``setup``
    (``carried``) can be connection scope; its scope is then its statement's classification.
    """
    if not isinstance(exchange, Mapping) or exchange.get("protocol") != "pg":
        return None
    if not carried and exchange.get(SCOPE_FIELD) != CONNECTION_SCOPE:
        return None
    request = exchange.get("request")
    if not isinstance(request, Mapping):
        return None
    return statement_scope(request.get("text"), request.get("values"))


def ambient_key(text: str) -> str:
    """What connection-scope statements are compared by: normalised, savepoint names out."""
    normal = _normal(text)
    match = _SAVEPOINT.match(normal.upper())
    if match:
        return normal[: match.start(5)] + "<name>"
    return normal


def _column(name: str, type_code: int) -> list[Any]:
    return [name, type_code, None, None, None, None, None, None, None]


def _one(name: str, value: Any, type_code: int = _TEXT_OID) -> dict[str, Any]:
    return {
        "command": "SELECT 1",
        "rowCount": 1,
        "rows": [{name: value}],
        "columns": [_column(name, type_code)],
    }


def _no_result(command: str) -> dict[str, Any]:
    return {"command": command, "rowCount": -1, "rows": [], "columns": None}


_SHOW_NAMES = {
    "TRANSACTION ISOLATION LEVEL": "transaction_isolation",
    "TIME ZONE": "TimeZone",
    "SESSION AUTHORIZATION": "session_authorization",
}


def _parameter_name(raw: str, parameters: Mapping[str, str]) -> str:
    """The parameter a ``SHOW``/``SET`` names, spelled as the server reports it."""
    name = _SHOW_NAMES.get(raw.upper(), raw.strip('"'))
    for known in parameters:
        if known.lower() == name.lower():
            return known
    for known in DEFAULT_PARAMETERS:
        if known.lower() == name.lower():
            return known
    return name


_LITERAL = r"(?:'((?:[^']|'')*)'|(%s|%\(\w+\)s|\$\d+))"
_SET_CONFIG_ARGS = re.compile(r"\(\s*" + _LITERAL + r"\s*,\s*" + _LITERAL, re.IGNORECASE)
_CURRENT_SETTING_ARG = re.compile(r"\(\s*" + _LITERAL, re.IGNORECASE)
_SET_STATEMENT = re.compile(
    r"^SET (?:SESSION |LOCAL )?(TIME ZONE|[\w.\"]+)(?: TO | ?= ?| )(.+)$", re.IGNORECASE
)


def _placeholder_value(placeholder: str, values: Any, index: int) -> Any:
    if isinstance(values, Mapping):
        name = placeholder[2:-2] if placeholder.startswith("%(") else None
        return values.get(name) if name is not None else None
    if isinstance(values, (list, tuple)):
        return values[index] if index < len(values) else None
    return None


def _argument(match: re.Match[str], group: int, values: Any, index: int) -> Any:
    literal = match.group(group)
    if literal is not None:
        return literal.replace("''", "'")
    return _placeholder_value(match.group(group + 1), values, index)


def setting_change(text: str, values: Any = None) -> tuple[str, str] | None:
    """``(parameter, value)`` a ``SET``/``set_config`` statement gives the connection, if any.

    ``RESET``/``DISCARD`` and statements whose value cannot be read give ``None``.
    """
    normal = _normal(text)
    upper = normal.upper()
    if upper.startswith("SELECT") and "SET_CONFIG" in upper:
        found = _SET_CONFIG_ARGS.search(normal)
        if found is None:
            return None
        name = _argument(found, 1, values, 0)
        value = _argument(found, 3, values, 1 if found.group(1) is None else 0)
        if isinstance(name, str) and value is not None:
            return _parameter_name(name, {}), str(value)
        return None
    found_set = _SET_STATEMENT.match(normal)
    if found_set is None:
        return None
    name, raw = found_set.group(1), found_set.group(2).strip()
    if raw.upper() in ("DEFAULT", "LOCAL"):
        return None
    value = raw[1:-1].replace("''", "'") if raw.startswith("'") and raw.endswith("'") else raw
    return _parameter_name(name, {}), value


def default_response(
    text: str, values: Any = None, parameters: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The documented answer to a statement the recording cannot answer (module docstring).

    ``parameters`` are the connection's current server parameters (default
    :data:`DEFAULT_PARAMETERS`).
    """
    params = DEFAULT_PARAMETERS if parameters is None else parameters
    normal = _normal(text)
    upper = normal.upper()
    scope = statement_scope(text, values)
    if scope == "savepoint":
        head = upper.split(" ", 1)[0]
        return _no_result("SAVEPOINT" if head == "SAVEPOINT" else head)
    if scope == "transaction":
        head = upper.split(" ", 1)[0]
        tags = {"START": "BEGIN", "END": "COMMIT", "ABORT": "ROLLBACK"}
        return _no_result(tags.get(head, head))
    if scope == "ping":
        if not normal:  # the empty statement: no command, no result
            return {"command": None, "rowCount": 0, "rows": [], "columns": None}
        return _one("?column?", 1, _INT4_OID)
    if scope == "introspection":
        if "VERSION" in upper:
            return _one("version", SERVER_VERSION_TEXT)
        if "CURRENT_SCHEMA" in upper:
            return _one("current_schema", "public")
        return {"command": "SELECT 0", "rowCount": 0, "rows": [], "columns": [_column("oid", 26)]}
    if upper.startswith("SHOW "):
        raw = normal[5:].strip()
        if raw.upper() == "ALL":
            rows = [{"name": k, "setting": v, "description": ""} for k, v in params.items()]
            return {
                "command": "SHOW",
                "rowCount": len(rows),
                "rows": rows,
                "columns": [_column(n, _TEXT_OID) for n in ("name", "setting", "description")],
            }
        name = _parameter_name(raw, params)
        column = name.lower() if name != "TimeZone" else "TimeZone"
        return {**_one(column, params.get(name, "")), "command": "SHOW"}
    if upper.startswith("SELECT") and "SET_CONFIG" in upper:
        change = setting_change(text, values)
        return _one("set_config", change[1] if change else "")
    if upper.startswith("SELECT") and "CURRENT_SETTING" in upper:
        found = _CURRENT_SETTING_ARG.search(normal)
        asked = _argument(found, 1, values, 0) if found else None
        value = params.get(_parameter_name(asked, params), "") if isinstance(asked, str) else ""
        return _one("current_setting", value)
    if upper.startswith(("SET ", "RESET ", "DISCARD ")):
        return _no_result(upper.split(" ", 1)[0] if not upper.startswith("DISCARD") else upper)
    # A data statement asked before the recorded request: nothing to read, nothing changed.
    # The result still has its columns (named from the statement, as the server names them):
    # code that reads a result by position or name looks at them before it looks at the rows.
    verb = upper.split(" ", 1)[0] if upper else ""
    names = result_columns(text)
    columns = None if names is None else [_column(name, _TEXT_OID) for name in names]
    if verb in ("SELECT", "WITH", "VALUES", "TABLE"):
        return {"command": "SELECT 0", "rowCount": 0, "rows": [], "columns": columns or []}
    if verb == "INSERT":
        return _no_result("INSERT 0 0") | {"rowCount": 0, "columns": columns}
    if verb in ("UPDATE", "DELETE"):
        return _no_result(f"{verb} 0") | {"rowCount": 0, "columns": columns}
    return _no_result(verb or "EMPTY")


def recorded_parameter(text: Any, values: Any, response: Any) -> tuple[str, str] | None:
    """The server parameter a recorded ``SET``/``set_config``/``SHOW`` answer tells, if any."""
    if not isinstance(text, str):
        return None
    change = setting_change(text, values)
    if change is not None:
        return change
    normal = _normal(text)
    if not normal.upper().startswith("SHOW ") or normal.upper() == "SHOW ALL":
        return None
    rows = response.get("rows") if isinstance(response, Mapping) else None
    first = rows[0] if isinstance(rows, list) and rows else None
    value = next(iter(first.values()), None) if isinstance(first, Mapping) else None
    if not isinstance(value, str):
        return None
    return _parameter_name(normal[5:].strip(), {}), value
