"""``JSON.parse`` as the reference runtime applies it to recorded text.

Python's :func:`json.loads` is almost ``JSON.parse``. The differences that matter for bytes on
the wire, and how :func:`js_json_parse` closes each of them:

* ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON: ``JSON.parse`` rejects them, Python
  accepts them. They are rejected here.
* Every JSON number is an IEEE double in JavaScript. Integers that a double holds exactly
  (|n| ≤ 2**53) stay Python ``int``; longer integer literals become the double JavaScript
  reads (so ``12345678901234567890`` rounds and a 5000-digit literal is ``inf``, where Python
  would raise on its integer-digit limit). ``-0`` stays a negative zero.
* A leading byte order mark is not JSON white space: both reject it (Python with its own
  message), so nothing needs doing.
* ``JSON.parse`` accepts any nesting depth the text holds; Python's decoder stops at the
  interpreter recursion limit. When that happens the text is parsed again by a small
  iterative parser with the same grammar, so deep documents parse instead of failing.

Only the four JSON white space characters (space, tab, line feed, carriage return) are
skipped, control characters inside strings are rejected, and a repeated key keeps its first
position with the last value, as in both runtimes.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]  # not in typeshed
from typing import Any

__all__ = ["js_json_parse"]

_TWO_53 = 2**53


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _js_int(literal: str) -> int | float:
    if literal == "-0":
        return -0.0
    if len(literal) <= 17:  # a sign and 16 digits: Python's int is exact, check the range
        number = int(literal)
        if -_TWO_53 <= number <= _TWO_53:
            return number
    return float(literal)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_js_int)

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))((?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)")
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}


def js_json_parse(text: str) -> Any:
    """Parse ``text`` as ``JSON.parse`` would; raise :class:`ValueError` when it would throw."""
    try:
        return _DECODER.decode(text)
    except RecursionError:
        return _parse_iteratively(text)


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    assert match is not None  # the pattern matches the empty string
    return match.end()


def _key(text: str, pos: int) -> tuple[str, int]:
    """A member name and the position of its value (after ``:`` and white space)."""
    if not text.startswith('"', pos):
        raise ValueError(f"expected a member name at offset {pos}")
    key, pos = scanstring(text, pos + 1, True)
    pos = _skip(text, pos)
    if not text.startswith(":", pos):
        raise ValueError(f"expected ':' at offset {pos}")
    return key, _skip(text, pos + 1)


def _scalar(text: str, pos: int) -> tuple[Any, int]:
    char = text[pos]
    if char == '"':
        value, end = scanstring(text, pos + 1, True)
        return value, end
    for word, value in _LITERALS.items():
        if text.startswith(word, pos):
            return value, pos + len(word)
    match = _NUMBER.match(text, pos)
    if match is None:
        raise ValueError(f"unexpected character at offset {pos}")
    integer, rest = match.groups()
    return (float(integer + rest) if rest else _js_int(integer)), match.end()


def _parse_iteratively(text: str) -> Any:
    """The same grammar with an explicit stack (used only for very deep documents)."""
    length = len(text)
    # Each frame is [container, pending member name]; a list frame keeps the name None.
    stack: list[list[Any]] = []
    pos = _skip(text, 0)
    while True:
        if pos >= length:
            raise ValueError("unexpected end of JSON input")
        char = text[pos]
        value: Any
        if char in "[{":
            pos = _skip(text, pos + 1)
            closer = "]" if char == "[" else "}"
            if text.startswith(closer, pos):
                value = [] if char == "[" else {}
                pos += 1
            elif char == "[":
                stack.append([[], None])
                continue
            else:
                key, pos = _key(text, pos)
                stack.append([{}, key])
                continue
        else:
            value, pos = _scalar(text, pos)
        # A value is complete: hand it to its container, closing containers as they end.
        while True:
            pos = _skip(text, pos)
            if not stack:
                if pos != length:
                    raise ValueError(f"unexpected data after JSON at offset {pos}")
                return value
            frame = stack[-1]
            container = frame[0]
            if isinstance(container, list):
                container.append(value)
            else:
                container[frame[1]] = value
            if text.startswith(",", pos):
                pos = _skip(text, pos + 1)
                if isinstance(container, dict):
                    frame[1], pos = _key(text, pos)
                break
            if text.startswith("]" if isinstance(container, list) else "}", pos):
                stack.pop()
                value = container
                pos += 1
                continue
            raise ValueError(f"expected ',' or a closing bracket at offset {pos}")
