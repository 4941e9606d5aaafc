"""Redaction of SQL parameters by the column they bind to (decision D8, beyond section 3).

Named parameters (``%(password)s``) travel as an object and are redacted by their key like
any JSON value. Positional parameters travel as an array, where no key names them, so
:func:`redact_sql_values` reads the statement to learn which column each placeholder binds
to and replaces the value of every placeholder bound to a secret-named column::

    redact_sql_values("UPDATE users SET token = %s WHERE id = %s", ["tok_123456", 7])
    # [{"$reproit": {"redacted": True, "type": "string", "length": 10}}, 7]

What the statement says, and so what is understood:

* ``INSERT INTO t (email, password_hash) VALUES (%s, %s), (%s, %s)``: each item of every
  ``VALUES`` row binds to the column at its position (``crypt(%s, ...)`` included);
* ``column <op> %s`` and ``%s <op> column`` for ``=``, ``<>``, ``!=``, ``<``, ``>``, ``<=``,
  ``>=``, ``LIKE``, ``ILIKE`` (``UPDATE ... SET token = %s``, ``WHERE api_key = %s``), and
  ``column IN (%s, %s)`` / ``column = ANY(%s)``; a qualified name (``u.password``) is judged
  by its last part, a quoted one without its quotes;
* a named placeholder bound to a secret column (``WHERE password = %(p1)s``) has its key's
  value redacted as well.

String literals, quoted identifiers, comments and dollar-quoted bodies are skipped, ``%%`` is
a literal percent sign. What the parser does not understand is left as it is (key-name and
secret-value redaction still apply).

A database error can echo a value the exchange redacted (``DETAIL: Key (email)=(a@b.c)
already exists.``, ``Failing row contains (...)``): :func:`scrub_echoes` replaces each such
value in an error text (given the *original* values, :func:`redacted_originals` of the
values before redaction; the items of a tuple or list parameter count one by one), and applies
the text rules of :mod:`reproit_otel.redaction.text` (the value inside ``Key (col)=(...)``
when a column is secret among them).
The recorder and the replay side apply the same rules, so a redacted recording still matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from reproit_otel.redaction.core import (
    MIN_SECRET_LENGTH,
    PLACEHOLDER_KEY,
    is_secret_key,
    placeholder,
)
from reproit_otel.redaction.text import scrub_text

__all__ = ["SecretBindings", "redact_sql_values", "redacted_originals", "scrub_echoes"]

_COMPARISONS = frozenset({"=", "<>", "!=", "<", ">", "<=", ">=", "like", "ilike"})


class SecretBindings(NamedTuple):
    """Which placeholders of a statement bind to a secret-named column."""

    positions: frozenset[int]
    """Indexes of positional ``%s`` placeholders (counted from 0)."""
    names: frozenset[str]
    """Names of ``%(name)s`` placeholders."""
    rows: tuple[tuple[int, frozenset[int]], ...] = ()
    """For a placeholder standing for a whole row (``INSERT INTO t (a, b) VALUES %s`` with a
    tuple): its positional index and the indexes of the row's items bound to secret columns."""


class _Token(NamedTuple):
    kind: str  # "word", "ident" (quoted), "param", "op", "(", ")", ","
    text: str
    position: int = -1  # for "param": positional index, or -1 for a named one


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")
_NAMED = re.compile(r"%\(([^)]*)\)s")
_OPERATOR = re.compile(r"[<>=!]+")


def _skip_quoted(text: str, start: int, quote: str, backslash: bool) -> int:
    """The index after the literal opened at ``start`` (a doubled quote stays inside)."""
    index = start + 1
    while index < len(text):
        char = text[index]
        if backslash and char == "\\":
            index += 2
            continue
        if char == quote:
            if index + 1 < len(text) and text[index + 1] == quote:
                index += 2
                continue
            return index + 1
        index += 1
    return index


def _params_in(segment: str) -> int:
    """How many positional ``%s`` psycopg2 fills in ``segment`` (it does not read SQL: a
    placeholder inside a literal or a comment is filled too, so it still counts)."""
    count = 0
    index = segment.find("%")
    while 0 <= index < len(segment) - 1:
        following = segment[index + 1]
        if following == "s":
            count += 1
        index = segment.find("%", index + 2)
    return count


def _skipped_end(text: str, index: int) -> int | None:
    """The end of the literal, quoted name, comment or dollar body at ``index``, if any."""
    char = text[index]
    if char == "-" and text.startswith("--", index):
        end = text.find("\n", index)
        return len(text) if end < 0 else end + 1
    if char == "/" and text.startswith("/*", index):
        end = text.find("*/", index + 2)
        return len(text) if end < 0 else end + 2
    if char == "'":
        return _skip_quoted(text, index, "'", index > 0 and text[index - 1] in "eE")
    if char == "$" and (tag := _DOLLAR_TAG.match(text, index)) is not None:
        end = text.find(tag.group(0), tag.end())
        return len(text) if end < 0 else end + len(tag.group(0))
    return None


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    positional = 0
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char.isspace():
            index += 1
        elif (end := _skipped_end(text, index)) is not None:
            positional += _params_in(text[index:end])
            index = end
        elif char == '"':
            end = _skip_quoted(text, index, '"', False)
            name = text[index + 1 : end - 1]
            positional += _params_in(name)
            tokens.append(_Token("ident", name.replace('""', '"')))
            index = end
        elif char == "%":
            if text.startswith("%%", index):
                index += 2
            elif text.startswith("%s", index):
                tokens.append(_Token("param", "", positional))
                positional += 1
                index += 2
            elif (named := _NAMED.match(text, index)) is not None:
                tokens.append(_Token("param", named.group(1)))
                index = named.end()
            else:
                index += 1
        elif (word := _WORD.match(text, index)) is not None:
            tokens.append(_Token("word", word.group(0)))
            index = word.end()
        elif char in "(),.":
            tokens.append(_Token(char, char))
            index += 1
        elif (operator := _OPERATOR.match(text, index)) is not None:
            tokens.append(_Token("op", operator.group(0)))
            index = operator.end()
        else:
            index += 1
    return tokens


def _column_before(tokens: list[_Token], at: int) -> str | None:
    """The column named right before ``tokens[at]`` (last part of a qualified name)."""
    if at < 0 or tokens[at].kind not in ("word", "ident"):
        return None
    return tokens[at].text


def _is_comparison(token: _Token) -> bool:
    return token.kind in {"op", "word"} and token.text.lower() in _COMPARISONS


def _compared_column(tokens: list[_Token], at: int) -> str | None:
    """The column a placeholder at ``at`` is compared with or assigned to, if any."""
    back = at - 1
    # Inside IN (...) or ANY(...): walk back over the list to its parenthesis.
    while back >= 0 and tokens[back].kind in ("param", ","):
        back -= 1
    if back >= 0 and tokens[back].kind == "(" and back < at:
        keyword = tokens[back - 1] if back >= 1 else None
        if keyword is not None and keyword.kind == "word":
            word = keyword.text.lower()
            if word == "in":
                return _column_before(tokens, back - 2)
            if word in ("any", "all") and back >= 2 and _is_comparison(tokens[back - 2]):
                return _column_before(tokens, back - 3)
    if at >= 2 and _is_comparison(tokens[at - 1]):
        return _column_before(tokens, at - 2)
    if at + 2 < len(tokens) and _is_comparison(tokens[at + 1]):
        after = tokens[at + 2]
        if after.kind in ("word", "ident"):
            name = after.text
            step = at + 3
            while step + 1 < len(tokens) and tokens[step].kind == ".":
                name = tokens[step + 1].text
                step += 2
            return name
    return None


def _insert_columns(tokens: list[_Token]) -> dict[int, str | list[str]]:
    """For ``INSERT INTO t (cols) VALUES (...)``: token index of each placeholder -> column,
    or -> every column for a placeholder that stands for a whole row (``VALUES %s``)."""
    bound: dict[int, str | list[str]] = {}
    lowered = [t.text.lower() if t.kind == "word" else None for t in tokens]
    if "insert" not in lowered or "values" not in lowered:
        return bound
    values_at = lowered.index("values")
    close = values_at - 1
    if close < 0 or tokens[close].kind != ")":
        return bound
    open_at = close - 1
    while open_at >= 0 and tokens[open_at].kind != "(":
        open_at -= 1
    columns = [t.text for t in tokens[open_at + 1 : close] if t.kind in ("word", "ident")]
    depth = 0
    item = 0
    for index in range(values_at + 1, len(tokens)):
        token = tokens[index]
        if token.kind == "(":
            depth += 1
            if depth == 1:
                item = 0
        elif token.kind == ")":
            depth -= 1
            if depth < 0:
                break
        elif token.kind == "," and depth == 1:
            item += 1
        elif token.kind == "word" and depth == 0 and token.text.lower() != "values":
            break  # RETURNING, ON CONFLICT: the rows are over
        elif token.kind == "param" and depth >= 1 and item < len(columns):
            bound[index] = columns[item]
        elif token.kind == "param" and depth == 0:
            bound[index] = columns  # a row tuple: its items bind to the columns in order
    return bound


@lru_cache(maxsize=1024)
def secret_bindings(text: str) -> SecretBindings:
    """Which placeholders of ``text`` bind to a secret-named column."""
    tokens = _tokens(text)
    inserted = _insert_columns(tokens)
    positions: set[int] = set()
    names: set[str] = set()
    rows: list[tuple[int, frozenset[int]]] = []
    for at, token in enumerate(tokens):
        if token.kind != "param":
            continue
        row = inserted.get(at)
        if isinstance(row, list):
            items = frozenset(i for i, name in enumerate(row) if is_secret_key(name))
            if items and token.position >= 0:
                rows.append((token.position, items))
            continue
        column = row or _compared_column(tokens, at)
        if column is None or not is_secret_key(column):
            continue
        if token.position >= 0:
            positions.add(token.position)
        else:
            names.add(token.text)
    return SecretBindings(frozenset(positions), frozenset(names), tuple(rows))


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value.get(PLACEHOLDER_KEY))


def redact_sql_values(text: str, values: Any) -> Any:
    """``values`` of the statement ``text`` with secret-bound parameters as placeholders.

    ``values`` is the recorded form: a list for positional parameters, an object for named
    ones; anything else (``None``) comes back unchanged, as does a value already redacted.
    """
    if not isinstance(text, str) or not isinstance(values, (list, dict)) or not values:
        return values
    bindings = secret_bindings(text)
    if isinstance(values, list):
        if not bindings.positions and not bindings.rows:
            return values
        redacted = [
            placeholder(value)
            if index in bindings.positions and not _is_placeholder(value)
            else value
            for index, value in enumerate(values)
        ]
        for index, items in bindings.rows:
            if index < len(redacted):
                redacted[index] = _redacted_row(redacted[index], items)
        return redacted
    if not bindings.names:
        return values
    return {
        key: placeholder(value) if key in bindings.names and not _is_placeholder(value) else value
        for key, value in values.items()
    }


def _row_items(value: Any) -> list[Any] | None:
    """The items of a row parameter: a list, or the recorded ``{"$pg": "tuple", "v": [...]}``."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping) and isinstance(value.get("v"), list) and "$pg" in value:
        return list(value["v"])
    return None


def _redacted_row(value: Any, items: frozenset[int]) -> Any:
    row = _row_items(value)
    if row is None:
        return value if _is_placeholder(value) else placeholder(value)
    redacted = [
        placeholder(item) if index in items and not _is_placeholder(item) else item
        for index, item in enumerate(row)
    ]
    if isinstance(value, Mapping):
        return {**value, "v": redacted}
    return redacted


def redacted_originals(text: str, values: Any) -> list[str]:
    """The text of every parameter :func:`redact_sql_values` or key-name redaction hides.

    These are the values an error message may echo; only those of at least
    :data:`~reproit_otel.redaction.core.MIN_SECRET_LENGTH` characters are returned.
    """
    found: list[str] = []
    if not isinstance(values, (list, dict)) or not values:
        return found
    bindings = (
        secret_bindings(text) if isinstance(text, str) else SecretBindings(frozenset(), frozenset())
    )
    if isinstance(values, list):
        chosen: list[Any] = [v for i, v in enumerate(values) if i in bindings.positions]
        for index, items in bindings.rows:
            row = _row_items(values[index]) if index < len(values) else None
            if row is None:
                chosen.append(values[index] if index < len(values) else None)
            else:
                chosen.extend(item for i, item in enumerate(row) if i in items)
    else:
        chosen = [v for k, v in values.items() if k in bindings.names or is_secret_key(k)]
    pending = list(chosen)
    while pending:  # a tuple or list parameter (``IN %s``, a row) holds its values inside
        value = pending.pop(0)
        inner = _row_items(value)
        if inner is not None:
            pending[:0] = inner
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            shown = value if isinstance(value, str) else str(value)
            if len(shown) >= MIN_SECRET_LENGTH:
                found.append(shown)
    return found


def scrub_echoes(message: Any, originals: Iterable[str]) -> Any:
    """An error text with every echoed redacted value replaced by ``$reproit``.

    ``originals`` are the values the exchange redacted (:func:`redacted_originals`, read
    from the values *before* redaction); every rule of
    :func:`~reproit_otel.redaction.text.scrub_text` applies as well (the value of a
    ``Key (col)=(...)`` detail naming a secret column, ``password=...``). A non-string
    ``message`` comes back unchanged.
    """
    if not isinstance(message, str):
        return message
    return scrub_text(message, originals)
