"""Canonical JSON and insertion-order JSON, byte for byte as the reference writes them.

``canonical_json`` (PROTOCOL 1.1) is what goes on the wire: the ``x-reproit-events`` header,
the capture-batch POST body and the capsule files. Object keys are sorted by UTF-16 code unit,
keys holding :data:`UNSET` are left out, numbers are printed as ECMAScript prints them and
strings are escaped as ``JSON.stringify`` escapes them (raw UTF-8 for everything else).

``ordered_json`` (PROTOCOL 1.2) is the same text without the key sort, for marker lines,
served bodies and ``body_delta`` offsets.

Both walk the value with an explicit stack, so a deeply nested value (thousands of levels)
neither overflows the interpreter stack nor recurses without bound. Most values are small and
shallow (a served body, an event): those are first written by a plain recursive walk over
``dict``, ``list`` and ``tuple`` that stops at :data:`_FAST_DEPTH` levels (or at any other
container type) and leaves the value to the stack walk, which writes the same text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from reproit_otel.wire._js import UNSET, js_number_to_string, js_string, utf16_key, well_formed

__all__ = ["canonical_json", "canonical_json_bytes", "js_items", "json_string", "ordered_json"]

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def json_string(text: str) -> str:
    """A string literal as ``JSON.stringify`` writes it (lone surrogates as ``\\udxxx``)."""
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, well_formed(text)) + '"'


def _scalar(value: Any) -> str:
    if value is None or value is UNSET:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, (int, float)):
        text = js_number_to_string(value)
        return "null" if text in ("NaN", "Infinity", "-Infinity") else text
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


_MAX_ARRAY_INDEX = 2**32 - 2
_DIGITS = frozenset("0123456789")


def _is_array_index(key: str) -> bool:
    if not key or not key.isascii() or not key.isdigit():
        return False
    return (key == "0" or key[0] != "0") and int(key) <= _MAX_ARRAY_INDEX


def js_items(mapping: Mapping[Any, Any]) -> list[tuple[str, Any]]:
    """The items of ``mapping`` in JavaScript property order, keys as strings.

    A JavaScript object enumerates its array-index keys (``"0"`` … ``"4294967294"``) first,
    in ascending numeric order, then every other key in insertion order.
    """
    items = list(mapping.items())
    for key, _ in items:
        if key.__class__ is not str or key[:1] in _DIGITS:
            break
    else:
        return items  # string keys, none of which can be an array index: as they are
    items = [(key if isinstance(key, str) else js_string(key), child) for key, child in items]
    indexes = [item for item in items if _is_array_index(item[0])]
    if not indexes:
        return items
    names = [item for item in items if not _is_array_index(item[0])]
    return sorted(indexes, key=lambda item: int(item[0])) + names


def _members(value: Mapping[Any, Any], sort: bool) -> list[tuple[str, Any]]:
    items = [(key, child) for key, child in js_items(value) if child is not UNSET]
    if sort:
        items.sort(key=lambda item: utf16_key(item[0]))
    return items


_FAST_DEPTH = 48
"""Levels the recursive walk goes down before it leaves a value to the stack walk."""


class _Unfit(Exception):
    """The recursive walk met a container too deep, or of a type it leaves to the stack walk."""


def _fast(value: Any, sort: bool, depth: int) -> str:
    """The text of ``value`` by plain recursion; raises :class:`_Unfit` where it would not do."""
    kind = type(value)
    if kind is str:
        return json_string(value)
    if kind is dict:
        if depth >= _FAST_DEPTH:
            raise _Unfit
        inner = depth + 1
        pairs = [
            json_string(key) + ":" + _fast(child, sort, inner)
            for key, child in _members(value, sort)
        ]
        return "{" + ",".join(pairs) + "}"
    if kind is list or kind is tuple:
        if depth >= _FAST_DEPTH:
            raise _Unfit
        inner = depth + 1
        return "[" + ",".join([_fast(child, sort, inner) for child in value]) + "]"
    if isinstance(value, (Mapping, list, tuple)):
        raise _Unfit  # another mapping or sequence type: the stack walk knows them all
    return _scalar(value)


def _encode(value: Any, sort: bool) -> str:
    try:
        return _fast(value, sort, 0)
    except _Unfit:
        return _encode_stack(value, sort)


def _encode_stack(value: Any, sort: bool) -> str:
    out: list[str] = []
    # Each frame: (iterator over remaining children, closing bracket, is_object, first flag).
    stack: list[tuple[Iterator[Any], str, bool, list[bool]]] = []

    def open_container(container: Any) -> None:
        if isinstance(container, Mapping):
            out.append("{")
            stack.append((iter(_members(container, sort)), "}", True, [True]))
        else:
            out.append("[")
            stack.append((iter(container), "]", False, [True]))

    def emit(child: Any) -> None:
        if isinstance(child, (Mapping, list, tuple)):
            open_container(child)
        else:
            out.append(_scalar(child))

    emit(value)
    while stack:
        iterator, closing, is_object, first = stack[-1]
        try:
            item = next(iterator)
        except StopIteration:
            stack.pop()
            out.append(closing)
            continue
        if not first[0]:
            out.append(",")
        first[0] = False
        if is_object:
            key, child = item
            out.append(json_string(key))
            out.append(":")
            emit(child)
        else:
            emit(item)
    return "".join(out)


def canonical_json(value: Any) -> str:
    """Canonical JSON text of ``value`` (PROTOCOL 1.1): compact, keys sorted by UTF-16 unit."""
    return _encode(value, sort=True)


def canonical_json_bytes(value: Any) -> bytes:
    """The UTF-8 bytes of :func:`canonical_json` (lone surrogates never reach the bytes)."""
    return canonical_json(value).encode("utf-8")


def ordered_json(value: Any) -> str:
    """``JSON.stringify`` text of ``value`` (PROTOCOL 1.2): compact, keys in insertion order.

    As in JavaScript, array-index keys (``"0"``, ``"17"``) come first in numeric order.
    """
    return _encode(value, sort=False)
