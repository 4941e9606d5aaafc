"""Helpers that shape what a trace's ``start`` event records (PROTOCOL 2.2 and 9.1).

``http_input`` builds the canonical decoded HTTP input of an operation from the parts a web
framework has already parsed; pass the result as ``input=`` to
:meth:`~reproit_otel.wire.trace.BackendTrace.begin`, which redacts it::

    http_input(body={"name": "demo"}, query={"tag": ["a", "b"]}, headers=request.headers)
    # {"body": {"name": "demo"}, "query": {"tag": ["a", "b"]}, "headers": {...lowercase names}}

``selection`` validates one GraphQL selection mapping produced by a parser (selections are never
inferred from responses) and returns it in wire form, or ``None`` when a path is invalid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict

from reproit_otel.wire._js import UNSET, js_string
from reproit_otel.wire.bounds import js_lower

__all__ = ["Selection", "http_input", "selection"]


class _SelectionPaths(TypedDict):
    schemaPath: str
    responsePath: str


class Selection(_SelectionPaths, total=False):
    """A selection mapping as it rides in the ``selections`` envelope field."""

    typeCondition: str


# JavaScript's `$` without the multiline flag does not accept a trailing newline: fullmatch.
_SEGMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _valid_path(path: object) -> bool:
    """Dot-separated names, each optionally suffixed by one ``[]``."""
    if not isinstance(path, str) or not path:
        return False
    for segment in path.split("."):
        name = segment[:-2] if segment.endswith("[]") else segment
        if _SEGMENT_NAME.fullmatch(name) is None:
            return False
    return True


def selection(
    schema_path: Any, response_path: Any, type_condition: Any = UNSET
) -> Selection | None:
    """A validated selection ``{schemaPath, responsePath, typeCondition?}``, else ``None``.

    Each path is ``.``-separated segments; a segment may end in ``[]`` and its name must match
    ``[A-Za-z_][A-Za-z0-9_]*``. A type condition (``None``/absent means none) must be a single
    such name, without ``.`` or ``[]``.
    """
    if not _valid_path(schema_path) or not _valid_path(response_path):
        return None
    value: Selection = {"schemaPath": schema_path, "responsePath": response_path}
    if type_condition is not UNSET and type_condition is not None:
        if not _valid_path(type_condition) or "." in type_condition or "[]" in type_condition:
            return None
        value["typeCondition"] = type_condition
    return value


def _entries(fields: object) -> list[tuple[str, Any]] | None:
    """The own entries of a JavaScript object: a mapping's items, a sequence's indexes."""
    if isinstance(fields, Mapping):
        return [(key if isinstance(key, str) else js_string(key), v) for key, v in fields.items()]
    if isinstance(fields, (list, tuple)):
        return [(str(index), item) for index, item in enumerate(fields)]
    return None


def http_input(
    body: Any = UNSET, path: Any = UNSET, query: Any = UNSET, headers: Any = UNSET
) -> dict[str, Any]:
    """The canonical decoded HTTP input (PROTOCOL 9.1), unredacted.

    ``body`` is kept unless it is ``None`` or absent. ``path`` (path parameters), ``query``
    (decoded; repeated parameters as lists) and ``headers`` are kept only when they are a
    mapping or a list with at least one entry (a list's indexes become keys, as in
    JavaScript); header names are lowercased (JavaScript ``toLowerCase``), and a later name
    that lowercases to an earlier one wins. Any other value (a string, a number) is left
    out; nothing here raises.
    """
    value: dict[str, Any] = {}
    if body is not UNSET and body is not None:
        value["body"] = body
    for name, fields in (("path", path), ("query", query), ("headers", headers)):
        entries = _entries(fields)
        if not entries:
            continue
        if name == "headers":
            value[name] = {js_lower(key): field for key, field in entries}
        else:
            value[name] = dict(entries)
    return value
