"""Redaction of ``multipart/form-data`` bodies by the names of their fields (decision D8).

A form posted with a file upload is ``multipart/form-data``: each field is a part with a
``Content-Disposition: form-data; name="..."`` header. :func:`redact_multipart` replaces the
content of every part whose field name is secret and that is not a file (no ``filename``) by a
text placeholder (:func:`~reproit_otel.wire.standins.text_placeholder`, with the identity of
the value while a capture key is set), and leaves every other byte as it was: the boundary,
the part headers, the other fields and the files::

    --b\\r\\nContent-Disposition: form-data; name="password"\\r\\n\\r\\nhunter2\\r\\n--b--
    # --b\\r\\nContent-Disposition: form-data; name="password"\\r\\n\\r\\n$reproit...\\r\\n--b--

A body it cannot split (no boundary in the content type) comes back unchanged.
"""

from __future__ import annotations

import re

from reproit_otel.redaction.core import is_secret_key
from reproit_otel.wire.standins import text_placeholder

__all__ = ["boundary_of", "is_multipart", "redact_multipart"]

_BOUNDARY = re.compile(r"""boundary=(?:"([^"]+)"|([^;\s]+))""", re.IGNORECASE)
_NAME = re.compile(rb"""[;\s]name="([^"]*)\"""", re.IGNORECASE)
_FILENAME = re.compile(rb"""[;\s]filename\*?=""", re.IGNORECASE)


def is_multipart(content_type: object) -> bool:
    """True when ``content_type`` names ``multipart/form-data`` (case-insensitive)."""
    return isinstance(content_type, str) and "multipart/form-data" in content_type.lower()


def boundary_of(content_type: str) -> str | None:
    """The ``boundary`` parameter of a multipart content type, or None."""
    match = _BOUNDARY.search(content_type)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def _redact_part(part: bytes) -> bytes:
    head_end = part.find(b"\r\n\r\n")
    if head_end < 0:
        return part
    head = part[:head_end]
    name = _NAME.search(head)
    if name is None or _FILENAME.search(head) is not None:
        return part
    if not is_secret_key(name.group(1).decode("utf-8", "replace")):
        return part
    content = part[head_end + 4 :]
    ending = b"\r\n" if content.endswith(b"\r\n") else b""
    value = content[: len(content) - len(ending)]
    if not value:
        return part
    replaced = text_placeholder(value.decode("utf-8", "replace")).encode("ascii")
    return part[: head_end + 4] + replaced + ending


def redact_multipart(data: bytes, content_type: str) -> bytes:
    """``data`` with the content of every secret-named, non-file field replaced (see module)."""
    boundary = boundary_of(content_type)
    if not boundary:
        return data
    delimiter = b"--" + boundary.encode("latin-1", "replace")
    pieces = data.split(delimiter)
    if len(pieces) < 3:
        return data
    # pieces[0] is the preamble, the last one starts with "--" (the close delimiter).
    changed = [pieces[0]] + [_redact_part(piece) for piece in pieces[1:-1]] + [pieces[-1]]
    return delimiter.join(changed)
