"""The column names PostgreSQL gives a statement's result, read from the statement's text.

Replay answers a read the recording does not hold (one asked while the application boots,
before the recorded request) with no rows. A result with no rows still has columns, and code
that reads a result by position or by name looks at them before it looks at the rows:
SQLAlchemy's ``connection.scalars(...)`` picks the first column of the description (its
inspector's ``get_table_names`` does, at boot, in Flask-AppBuilder), an ORM maps the
columns of ``select(Model)`` by name. :func:`result_columns` names them as the server would:

* ``expr AS name`` (and ``expr name`` after a closing parenthesis or a quoted name): ``name``;
* a column reference ``t.col`` or ``schema.t.col``: ``col``;
* a function call ``f(...)``, ``schema.f(...)``: ``f``; ``CASE ... END``: ``case``;
* ``expr::type``: the name of ``expr`` when it has one, else the type's name;
* anything else (a literal, an operator expression): ``?column?``.

Unquoted names are folded to lower case, quoted ones keep their case. The list is read from the
top-level select list of a ``SELECT`` (after ``DISTINCT``/``DISTINCT ON (...)``/``ALL``), of
the final ``SELECT`` after a ``WITH`` clause, and from the ``RETURNING`` clause of an
``INSERT``/``UPDATE``/``DELETE``. A ``*`` (whose columns only the catalogue knows) or a text
that cannot be read gives ``None``: the caller keeps its own answer.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["result_columns"]

_UNKNOWN: Final = "?column?"
_IDENTIFIER = r'(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)'
_PATH = re.compile(rf"^{_IDENTIFIER}(?:\s*\.\s*{_IDENTIFIER})*$")
_PART = re.compile(_IDENTIFIER)
_FLAGS: Final = re.IGNORECASE | re.DOTALL
_ALIAS = re.compile(rf"^(?P<expr>.*?)\s+(?:AS\s+)?(?P<name>{_IDENTIFIER})$", _FLAGS)
_EXPLICIT_ALIAS = re.compile(rf"^(?P<expr>.*\S)\s+AS\s+(?P<name>{_IDENTIFIER})$", _FLAGS)
_CALL = re.compile(rf"^(?P<name>{_IDENTIFIER}(?:\s*\.\s*{_IDENTIFIER})*)\s*\(", re.DOTALL)
_LIST_ENDS: Final = frozenset(
    {
        "FROM", "INTO", "WHERE", "GROUP", "HAVING", "WINDOW", "ORDER", "LIMIT", "OFFSET",
        "FETCH", "FOR", "UNION", "INTERSECT", "EXCEPT",
    }
)  # fmt: skip
_MAIN_VERBS: Final = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE"})
_RETURNING_ENDS: Final[frozenset[str]] = frozenset()


def _tokens_at_top(text: str) -> list[tuple[int, str]]:
    """``(offset, word)`` of every bare word outside parentheses and quotes."""
    words: list[tuple[int, str]] = []
    depth = 0
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char in "'\"":
            end = index + 1
            while end < length:
                if text[end] == char:
                    if end + 1 < length and text[end + 1] == char:
                        end += 2
                        continue
                    break
                end += 1
            index = end + 1
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and (char.isalpha() or char == "_"):
            end = index
            while end < length and (text[end].isalnum() or text[end] in "_$"):
                end += 1
            words.append((index, text[index:end].upper()))
            index = end
            continue
        index += 1
    return words


def _without_comments(text: str) -> str:
    """``text`` with its ``--`` and ``/* */`` comments replaced by a space (quotes kept)."""
    kept: list[str] = []
    index = 0
    length = len(text)
    while index < length:
        char = text[index]
        if char in "'\"":
            end = text.find(char, index + 1)
            end = length if end < 0 else end + 1
            kept.append(text[index:end])
            index = end
        elif text.startswith("--", index):
            newline = text.find("\n", index)
            index = length if newline < 0 else newline
            kept.append(" ")
        elif text.startswith("/*", index):
            close = text.find("*/", index + 2)
            index = length if close < 0 else close + 2
            kept.append(" ")
        else:
            kept.append(char)
            index += 1
    return "".join(kept)


def _split_at_top(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses and quotes."""
    parts: list[str] = []
    depth = 0
    start = 0
    quote = ""
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _identifier(raw: str) -> str:
    if raw.startswith('"'):
        return raw[1:-1].replace('""', '"')
    return raw.lower()


def _last_part(path: str) -> str:
    return _identifier(_PART.findall(path)[-1])


def _name_of(expression: str) -> str:
    """The column name PostgreSQL gives one select-list item (module docstring)."""
    alias = _EXPLICIT_ALIAS.match(expression)
    if alias is not None:
        return _identifier(alias.group("name"))
    implicit = _ALIAS.match(expression)
    if implicit is not None and implicit.group("expr").rstrip().endswith((")", '"')):
        return _identifier(implicit.group("name"))
    cast = expression.rfind("::")
    if cast > 0 and expression.count("(", cast) == expression.count(")", cast):
        inner = _name_of(expression[:cast].strip())
        if inner != _UNKNOWN:
            return inner
        type_name = expression[cast + 2 :].strip()
        return _last_part(type_name) if _PATH.match(type_name) else _UNKNOWN
    if _PATH.match(expression):
        return _last_part(expression)
    call = _CALL.match(expression)
    if call is not None and expression.endswith(")"):
        return _last_part(call.group("name"))
    if expression.upper().startswith("CASE ") and expression.upper().endswith(" END"):
        return "case"
    return _UNKNOWN


def _items(text: str, start: int, ends: frozenset[str]) -> list[str] | None:
    words = [(offset, word) for offset, word in _tokens_at_top(text) if offset >= start]
    stop = next((offset for offset, word in words if word in ends), len(text))
    body = text[start:stop].strip()
    head = body.upper()
    if head.startswith("DISTINCT ON"):
        opening = body.find("(")
        close = _matching_paren(body, opening) if opening >= 0 else None
        if close is None:
            return None
        body = body[close + 1 :].strip()
    elif head.startswith(("DISTINCT ", "ALL ")):
        body = body.split(None, 1)[1]
    items = _split_at_top(body)
    if not body or any(item == "*" or item.endswith(".*") or not item for item in items):
        return None
    return items


def _matching_paren(text: str, opening: int) -> int | None:
    depth = 0
    for index in range(opening, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return None


def result_columns(text: str) -> list[str] | None:
    """The names of the columns ``text``'s result has, or ``None`` when they cannot be read."""
    text = _without_comments(text)
    words = _tokens_at_top(text)
    if not words:
        return None
    verb = words[0][1]
    if verb == "WITH":
        main = next((w for w in words[1:] if w[1] in _MAIN_VERBS), None)
        if main is None:
            return None
        words = [w for w in words if w[0] >= main[0]]
        verb = main[1]
    items: list[str] | None
    if verb == "SELECT":
        items = _items(text, words[0][0] + len("SELECT"), _LIST_ENDS)
    elif verb in ("INSERT", "UPDATE", "DELETE"):
        returning = next((offset for offset, word in words if word == "RETURNING"), None)
        if returning is None:
            return None
        items = _items(text, returning + len("RETURNING"), _RETURNING_ENDS)
    else:
        return None
    if items is None:
        return None
    return [_name_of(item) for item in items]
