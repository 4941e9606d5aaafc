"""Bounds on what one dependency exchange may hold (PROTOCOL sections 4.2, 4.3, 4.4, 4.5).

Bodies -- :func:`bounded_body`
==============================

A body is measured in encoded bytes (strings as UTF-8), never in characters:

* absent (``None`` or ``UNSET``) or zero bytes: ``{}`` (the exchange gets no body field);
* more than :data:`MAX_BODY_BYTES` (8192) bytes: only its identity,
  ``{"bodyBytes": n, "bodySha256": <hex SHA-256 of all n bytes>, "truncated": True}``;
* otherwise ``{"body": text}``, the bytes decoded as UTF-8 with every maximal invalid
  subsequence replaced by U+FFFD (Node's ``Buffer#toString``; a byte order mark is kept).
  When ``content_type`` is a string containing ``application/json`` (case-sensitive
  substring) and the text is JSON by ``JSON.parse`` rules, the parsed value is recorded
  instead: ``{"body": {"a": 1}}``, ``{"body": None}``, ``{"body": 1.5}``.

A body that arrives in chunks goes through :class:`BodyCollector`, which hashes every byte
but holds at most the budget, and hands :func:`bounded_body` either the bytes or the identity.

``bytes``, ``bytearray`` and ``memoryview`` are taken as raw bytes. Any other value is named
as JavaScript names it (``String(value)``), except a mapping whose ``truncated`` is ``True``:
that is an identity already and passes through unchanged. Bounding never redacts; redaction
happens when the exchange is attached to its operation.

Headers -- :func:`bounded_headers`
==================================

Names are lowercased as JavaScript's ``toLowerCase`` does and never trimmed; values become
strings (a list is joined with ``", "``, anything else is ``String(value)``). The entries are
sorted stably by name in UTF-16 order, the first :data:`MAX_HEADERS` (32) are kept, and a name
occurring twice keeps the later value (both count toward the 32). The result is
``{"headers": {...}}``, or ``{}`` when there is no header at all. Python additionally accepts
``bytes`` names and values (read as ISO-8859-1, as HTTP header bytes are).

Rows and streams
================

:func:`bounded_rows` keeps the first :data:`MAX_PG_ROWS` (64) result rows.
:class:`StreamBoundaries` collects the byte length of each response chunk, at most
:data:`MAX_STREAM_CHUNKS` (128); later chunks are only counted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypedDict

from reproit_otel.wire._js import UNSET, js_string, utf8_bytes, utf16_key
from reproit_otel.wire._jsparse import js_json_parse

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEADERS",
    "MAX_PG_ROWS",
    "MAX_STREAM_CHUNKS",
    "BodyCollector",
    "StreamBoundaries",
    "StreamFields",
    "bounded_body",
    "bounded_headers",
    "bounded_rows",
    "is_event_stream",
    "js_lower",
]

MAX_BODY_BYTES: Final = 8192
"""A body of more encoded bytes than this is recorded as its identity only."""

MAX_HEADERS: Final = 32
"""At most this many headers are recorded, chosen in name-sorted order."""

MAX_PG_ROWS: Final = 64
"""At most this many result rows are recorded; more rows mark the response truncated."""

MAX_STREAM_CHUNKS: Final = 128
"""At most this many chunk boundaries are recorded; more mark the stream truncated."""

_JSON_TYPE: Final = "application/json"
_EVENT_STREAM_TYPE: Final = "text/event-stream"


# ---------------------------------------------------------------------------- bodies


def _body_bytes(body: Any) -> bytes:
    if isinstance(body, str):
        return utf8_bytes(body)
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    return utf8_bytes(js_string(body))


def bounded_body(body: Any, content_type: Any = UNSET) -> dict[str, Any]:
    """The body fields of an exchange for ``body`` (section 4.2).

    Returns ``{}``, ``{"body": value}`` or ``{"bodyBytes", "bodySha256", "truncated"}``.
    """
    if body is None or body is UNSET:
        return {}
    if isinstance(body, Mapping) and body.get("truncated") is True:
        return body if isinstance(body, dict) else dict(body)
    data = _body_bytes(body)
    if not data:
        return {}
    if len(data) > MAX_BODY_BYTES:
        return {
            "bodyBytes": len(data),
            "bodySha256": hashlib.sha256(data).hexdigest(),
            "truncated": True,
        }
    text = data.decode("utf-8", "replace")
    if isinstance(content_type, str) and _JSON_TYPE in content_type:
        try:
            return {"body": js_json_parse(text)}
        except ValueError:
            pass
    return {"body": text}


class BodyCollector:
    """Collects a body that arrives in chunks without holding more than the budget.

    Every byte is hashed, so an over-budget body still gets its exact identity::

        collector = BodyCollector()
        for chunk in stream:
            collector.add(chunk)
        fields = bounded_body(collector.result(), content_type)
    """

    __slots__ = ("_chunks", "_hash", "_size")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._hash = hashlib.sha256()
        self._size = 0

    def add(self, chunk: bytes | bytearray | memoryview | str) -> None:
        """Add one chunk (text chunks count as their UTF-8 bytes)."""
        data = utf8_bytes(chunk) if isinstance(chunk, str) else bytes(chunk)
        self._size += len(data)
        self._hash.update(data)
        if self._size <= MAX_BODY_BYTES:
            self._chunks.append(data)

    @property
    def size(self) -> int:
        """How many bytes were added in total."""
        return self._size

    def result(self) -> bytes | dict[str, Any] | None:
        """``None`` when empty, the bytes within the budget, else the body's identity."""
        if self._size == 0:
            return None
        if self._size > MAX_BODY_BYTES:
            return {
                "bodyBytes": self._size,
                "bodySha256": self._hash.hexdigest(),
                "truncated": True,
            }
        return b"".join(self._chunks)


# ---------------------------------------------------------------------------- headers

# Lowercase mappings newer than the Unicode database of some supported Pythons (Unicode 14
# and 16 additions). JavaScript engines ship them; str.lower() learns them with the
# interpreter's Unicode version. Each row: first code point, last code point, offset.
_NEWER_LOWERCASE: Final = (
    (0x1C89, 0x1C89, 1),
    (0x2C2F, 0x2C2F, 0x30),
    (0xA7C0, 0xA7C0, 1),
    (0xA7CB, 0xA7CB, 0x0264 - 0xA7CB),
    (0xA7CC, 0xA7CC, 1),
    (0xA7CE, 0xA7CE, 1),
    (0xA7D0, 0xA7D0, 1),
    (0xA7D2, 0xA7D2, 1),
    (0xA7D4, 0xA7D4, 1),
    (0xA7D6, 0xA7D6, 1),
    (0xA7D8, 0xA7D8, 1),
    (0xA7DA, 0xA7DA, 1),
    (0xA7DC, 0xA7DC, 0x019B - 0xA7DC),
    (0x10570, 0x1057A, 0x27),
    (0x1057C, 0x1058A, 0x27),
    (0x1058C, 0x10592, 0x27),
    (0x10594, 0x10595, 0x27),
    (0x10D50, 0x10D65, 0x20),
    (0x16EA0, 0x16EB8, 0x1B),
)
_NEWER_TABLE: Final = {
    code: code + offset
    for first, last, offset in _NEWER_LOWERCASE
    for code in range(first, last + 1)
    if chr(code).lower() == chr(code)
}


def js_lower(text: str) -> str:
    """``String.prototype.toLowerCase`` (full Unicode mapping, final sigma, locale-free)."""
    lowered = text.lower()
    if lowered.isascii() or not _NEWER_TABLE:
        return lowered
    return lowered.translate(_NEWER_TABLE)


def _header_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return js_string(value)


def _header_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        # Array.prototype.join: null and undefined elements are empty strings.
        return ", ".join(
            "" if item is None or item is UNSET else _header_text(item) for item in value
        )
    return _header_text(value)


def bounded_headers(headers: Any) -> dict[str, Any]:
    """The ``headers`` field of an exchange (section 4.3): ``{"headers": {...}}`` or ``{}``.

    ``headers`` is a mapping, anything with an ``items()`` method, an iterable of
    ``(name, value)`` pairs, or ``None``/``UNSET`` (no headers).
    """
    if headers is None or headers is UNSET:
        return {}
    pairs: Iterable[Any] = headers.items() if hasattr(headers, "items") else headers
    entries = [(js_lower(_header_text(name)), _header_value(value)) for name, value in pairs]
    entries.sort(key=lambda entry: utf16_key(entry[0]))
    table: dict[str, str] = {}
    for name, value in entries[:MAX_HEADERS]:
        table[name] = value
    return {"headers": table} if table else {}


# ---------------------------------------------------------------------------- pg rows


def bounded_rows(rows: Sequence[Any]) -> tuple[list[Any], bool]:
    """The first :data:`MAX_PG_ROWS` rows and whether any were left out (section 4.4)."""
    kept = list(rows[:MAX_PG_ROWS])
    return kept, len(rows) > MAX_PG_ROWS


# ---------------------------------------------------------------------------- streams


class StreamFields(TypedDict, total=False):
    """The ``response.stream`` field: chunk byte lengths, ``truncated`` when some were left out."""

    chunks: list[int]
    truncated: bool


def is_event_stream(content_type: Any) -> bool:
    """True when ``content_type`` is a string containing ``text/event-stream``."""
    return isinstance(content_type, str) and _EVENT_STREAM_TYPE in content_type


class StreamBoundaries:
    """Collects the byte length of each response chunk, in arrival order (section 4.5).

    Call :meth:`add` once per chunk the application received; the first
    :data:`MAX_STREAM_CHUNKS` lengths are kept and later chunks are only counted.
    """

    __slots__ = ("_chunks", "_dropped")

    def __init__(self) -> None:
        self._chunks: list[int] = []
        self._dropped = 0

    def add(self, nbytes: int) -> None:
        """Record one chunk of ``nbytes`` bytes."""
        if len(self._chunks) < MAX_STREAM_CHUNKS:
            self._chunks.append(int(nbytes))
        else:
            self._dropped += 1

    @property
    def chunks(self) -> list[int]:
        """The recorded chunk lengths (a copy)."""
        return list(self._chunks)

    @property
    def dropped(self) -> int:
        """How many chunks arrived after the cap."""
        return self._dropped

    def result(self, is_event_stream: bool) -> StreamFields | None:
        """The ``stream`` field for the response, or ``None`` when it gets none.

        ``None`` without chunks, and for a response that is not an event stream with fewer
        than two chunks and none dropped; otherwise the chunk lengths, with
        ``truncated: True`` when chunks were dropped.
        """
        if not self._chunks:
            return None
        if not is_event_stream and len(self._chunks) < 2 and not self._dropped:
            return None
        if self._dropped:
            return {"chunks": list(self._chunks), "truncated": True}
        return {"chunks": list(self._chunks)}
