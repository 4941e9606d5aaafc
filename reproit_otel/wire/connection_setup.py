"""The rule for the ``setup`` answers a recorded ``pg`` exchange carries.

A warm connection's first statement in a capture carries what the connection learned before
(``instrumentation/_pg_setup.py``)::

    exchange = {"protocol": "pg", "request": ..., "response": ...,
                "setup": [{"protocol": "pg", "request": {"text": ..., "values"?: ...},
                           "response": {"command": ..., "rowCount": ..., "rows": [...]}}, ...]}

Replay answers connection-scope statements from them and reports the server parameters they
tell (``TimeZone``, ``DateStyle``, the server version) on every stub connection. An answer
replay would misread must therefore never reach it: :func:`setup_problem` is the one rule,
applied where a capsule is loaded (:func:`reproit_otel.wire.capsule.validate_capsule`, and a
:class:`~reproit_otel.wire.replay.ReplaySession` made from a parsed capsule) and where the
ingest accepts a batch (:mod:`reproit_otel.wire.validate`, rule ``connection-setup``). A
capsule that breaks it is refused whole; nothing of it is served.

What it demands, in the shape capture writes:

* ``setup`` only on a ``pg`` exchange, an array of 1 to :data:`MAX_SETUP_ANSWERS` answers;
* each answer exactly ``{"protocol": "pg", "request", "response"}``; the request a non-empty
  ``text`` with optional ``values`` (an array or an object), the text a connection-scope
  ``setting`` or ``introspection`` statement (:func:`~reproit_otel.wire.statements.
  statement_scope`: ``SET``/``SHOW``/``set_config``/``current_setting``, ``version()``,
  ``current_schema()``, ``pg_type`` lookups), and no two answers to the same statement
  (capture keeps the latest answer per statement);
* the response a successful one (an error is never carried): ``rowCount`` an integer of at
  least 0, ``rows`` an array of at most :data:`MAX_SETUP_ROWS` objects and no more than
  ``rowCount``, ``truncated: true`` exactly when rows were cut, ``command`` and ``status``
  text or null, ``columns`` an array or null, nothing else;
* a statement that answers one value (``SHOW name``, ``set_config``, ``current_setting``,
  ``version()``, ``current_schema()``) answers at most one row of one column, holding text,
  null or a redaction placeholder; and every server parameter value an answer tells
  (:func:`~reproit_otel.wire.statements.recorded_parameter`) is text of at most
  :data:`MAX_PARAMETER_CHARS` characters with no control character (a ``TimeZone`` holding
  a NUL must never reach a stub connection).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .matching import PLACEHOLDER_KEY
from .statements import ambient_key, recorded_parameter, statement_scope

__all__ = [
    "MAX_PARAMETER_CHARS",
    "MAX_SETUP_ANSWERS",
    "MAX_SETUP_ROWS",
    "SETUP_FIELD",
    "setup_problem",
]

SETUP_FIELD: Final = "setup"
"""The ``pg`` exchange member that carries a warm connection's earlier answers."""

MAX_SETUP_ANSWERS: Final = 8
"""Answers one exchange carries at most (a connection remembers this many)."""

MAX_SETUP_ROWS: Final = 4
"""Rows one carried answer keeps at most (more are cut, with ``truncated: true``)."""

MAX_PARAMETER_CHARS: Final = 4096
"""The longest server parameter value an answer may tell."""

_SCOPES: Final = frozenset({"setting", "introspection"})
_ITEM_FIELDS: Final = frozenset({"protocol", "request", "response"})
_RESPONSE_FIELDS: Final = frozenset(
    {"command", "rowCount", "rows", "truncated", "columns", "status"}
)
_ONE_VALUE = re.compile(
    r"^\s*(?:SHOW\s+(?!ALL\s*;?\s*$)|SELECT\s+(?:PG_CATALOG\s*\.\s*)?"
    r"(?:SET_CONFIG|CURRENT_SETTING|VERSION|CURRENT_SCHEMA)\s*\()",
    re.IGNORECASE,
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _request_problem(request: object) -> tuple[str, str] | None:
    if not isinstance(request, Mapping):
        return "request", "must be an object {text, values?}"
    extra = sorted(str(name) for name in request if name not in ("text", "values"))
    if extra:
        return "request", f"has field(s) {', '.join(extra)}; a setup request is {{text, values?}}"
    text = request.get("text")
    if not isinstance(text, str) or not text.strip():
        return "request.text", "must be a non-empty statement text"
    values = request.get("values")
    if "values" in request and not isinstance(values, (list, Mapping)):
        return "request.values", "must be an array or an object when present"
    if statement_scope(text, values) not in _SCOPES:
        return (
            "request.text",
            "is not a connection-scope setting or introspection statement (SET, SHOW, "
            "set_config, current_setting, version(), current_schema(), a pg_type lookup); "
            "a connection never carries the answer of any other statement",
        )
    return None


def _single(value: object) -> bool:
    """Text, null or a redaction placeholder: what a one-value answer may hold."""
    if value is None:
        return True
    if isinstance(value, str):
        return len(value) <= MAX_PARAMETER_CHARS and _CONTROL.search(value) is None
    return isinstance(value, Mapping) and PLACEHOLDER_KEY in value


def _response_problem(response: object, text: str) -> tuple[str, str] | None:
    if not isinstance(response, Mapping):
        return "response", "must be an object"
    if "error" in response:
        return "response.error", "a setup answer is a successful one; an error is never carried"
    extra = sorted(str(name) for name in response if name not in _RESPONSE_FIELDS)
    if extra:
        return "response", f"has field(s) {', '.join(extra)} a pg answer cannot carry"
    count = response.get("rowCount")
    if not isinstance(count, int) or not _count(count):
        return "response.rowCount", "must be an integer of at least 0"
    rows = response.get("rows")
    if not isinstance(rows, list) or not all(isinstance(row, Mapping) for row in rows):
        return "response.rows", "must be an array of row objects"
    if len(rows) > MAX_SETUP_ROWS:
        return "response.rows", f"holds {len(rows)} rows; a setup answer keeps {MAX_SETUP_ROWS}"
    truncated = response.get("truncated", False)
    if truncated is not True and "truncated" in response:
        return "response.truncated", "must be true when present"
    if len(rows) > count or truncated != (len(rows) < count):
        return (
            "response.rows",
            f"holds {len(rows)} of rowCount {count} rows"
            + (" but says truncated" if truncated else " without truncated: true"),
        )
    for name in ("command", "status"):
        if response.get(name) is not None and not isinstance(response[name], str):
            return f"response.{name}", "must be text or null"
    if response.get("columns") is not None and not isinstance(response["columns"], list):
        return "response.columns", "must be an array or null"
    if _ONE_VALUE.match(text):
        if len(rows) > 1 or any(len(row) != 1 for row in rows):
            return "response.rows", "a one-value statement answers at most one row of one column"
        if rows and not _single(next(iter(rows[0].values()))):
            return (
                "response.rows[0]",
                f"must hold text of at most {MAX_PARAMETER_CHARS} characters without control "
                "characters, null or a redaction placeholder",
            )
    return None


def _parameter_problem(request: Mapping[str, Any], response: Mapping[str, Any]) -> str | None:
    told = recorded_parameter(request.get("text"), request.get("values"), response)
    if told is None:
        return None
    name, value = told
    for part in (name, value):
        if len(part) > MAX_PARAMETER_CHARS or _CONTROL.search(part) is not None:
            return (
                f"tells the server parameter {name[:64]!r} a value replay cannot report (text "
                f"of at most {MAX_PARAMETER_CHARS} characters without control characters)"
            )
    return None


def setup_problem(exchange: Mapping[str, Any]) -> tuple[str, str] | None:
    """What keeps an exchange's ``setup`` from being served, or ``None`` (also without one).

    Returns ``(field, message)``: the field relative to the exchange (``setup[2].request.text``)
    and what is wrong with it (see the module docstring for the rule).
    """
    if SETUP_FIELD not in exchange:
        return None
    setup = exchange[SETUP_FIELD]
    if exchange.get("protocol") != "pg":
        return SETUP_FIELD, "only a pg exchange carries connection setup answers"
    if not isinstance(setup, list) or not 1 <= len(setup) <= MAX_SETUP_ANSWERS:
        return SETUP_FIELD, f"must be an array of 1 to {MAX_SETUP_ANSWERS} answers"
    seen: dict[str, int] = {}
    for index, item in enumerate(setup):
        where = f"{SETUP_FIELD}[{index}]"
        if not isinstance(item, Mapping):
            return where, "must be an object {protocol, request, response}"
        extra = sorted(str(name) for name in item if name not in _ITEM_FIELDS)
        if extra or "request" not in item or "response" not in item:
            return where, "must be exactly {protocol: 'pg', request, response}"
        if item.get("protocol") != "pg":
            return f"{where}.protocol", "must be 'pg'"
        problem = _request_problem(item["request"])
        if problem is None:
            text: str = item["request"]["text"]
            problem = _response_problem(item["response"], text)
            key = ambient_key(text)
            if problem is None and key in seen:
                first = f"{SETUP_FIELD}[{seen[key]}]"
                problem = "request.text", f"answers the same statement as {first}"
            seen.setdefault(key, index)
            if problem is None:
                told = _parameter_problem(item["request"], item["response"])
                problem = None if told is None else ("response", told)
        if problem is not None:
            return f"{where}.{problem[0]}", problem[1]
    return None
