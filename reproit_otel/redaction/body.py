"""Redaction of text bodies by the names inside them (decision D8, beyond section 3).

Structural redaction (:func:`reproit_otel.redaction.core.redact`) sees the keys of a JSON
value; a body recorded as text hides its names from it. :func:`redact_text_body` opens the
two kinds of text that carry names:

* an ``application/x-www-form-urlencoded`` body (an OAuth token request or response, a
  login form) has the value of every secret-named field replaced by ``$reproit``, as a
  query string is (:func:`~reproit_otel.redaction.core.redact_form`)::

      redact_text_body("grant_type=password&password=hunter2", "application/x-www-form-urlencoded")
      # "grant_type=password&password=$reproit"

* a text that parses as a JSON object or array, whatever its content type says
  (``text/plain``, none), is redacted like JSON when it holds a secret key: the body is then
  recorded as the redacted JSON value instead of the text. A JSON text with no secret key
  stays the text it was, byte for byte.

* a ``multipart/form-data`` body (an upload with a login, an API form) has the content of
  every part whose ``name`` is secret replaced by ``$reproit``; the part's headers, the
  boundaries and every other part stay byte for byte::

      --b\r\nContent-Disposition: form-data; name="password"\r\n\r\nhunter2\r\n--b--
      # --b\r\nContent-Disposition: form-data; name="password"\r\n\r\n$reproit\r\n--b--

* any other text (``text/plain``, HTML, XML, a JSON text with no secret key stays as it is)
  goes through the text rules of :func:`~reproit_otel.redaction.text.scrub_text`
  (``token: ...``, ``Bearer ...``, a DSN, ``password=...``), so a secret written in prose is
  redacted in a body as it is in a message.

Any other value (already parsed JSON, ``None``) comes back unchanged. The
recorders apply it to what they record and the replay side to each live probe, so a
redacted recording still matches the call that produced it.
"""

from __future__ import annotations

import re
from typing import Any, Final

from reproit_otel.redaction.core import TEXT_PLACEHOLDER, is_secret_key, redact, redact_form
from reproit_otel.redaction.text import scrub_text
from reproit_otel.wire._jsparse import js_json_parse

__all__ = [
    "FORM_TYPE",
    "MULTIPART_TYPE",
    "is_form",
    "is_multipart",
    "redact_multipart",
    "redact_text_body",
]

FORM_TYPE: Final = "application/x-www-form-urlencoded"
"""The content type whose body is redacted field by field."""


MULTIPART_TYPE: Final = "multipart/form-data"
"""The content type whose parts are redacted by their names."""

_BOUNDARY = re.compile(r"""boundary\s*=\s*(?:"([^"]+)"|([^;\s]+))""", re.I)
_PART_NAME = re.compile(r"""\bname\s*=\s*(?:"((?:\\.|[^"\\])*)"|([^;\s]+))""", re.I)


def redact_multipart(body: str, content_type: object) -> str:
    """A ``multipart/form-data`` text with the content of every secret-named part replaced.

    The boundary comes from ``content_type`` or, when it names none, from the body's first
    line. A part's name is read from its ``Content-Disposition`` header.
    """
    boundary = None
    if isinstance(content_type, str):
        found = _BOUNDARY.search(content_type)
        if found is not None:
            boundary = found.group(1) or found.group(2)
    if boundary is None and body.startswith("--"):
        boundary = body[2:].split("\r\n", 1)[0].split("\n", 1)[0].strip() or None
    if not boundary:
        return body
    delimiter = "--" + boundary
    pieces = body.split(delimiter)
    changed = False
    for index in range(1, len(pieces)):
        piece = pieces[index]
        newline = "\r\n\r\n" if "\r\n\r\n" in piece else "\n\n"
        head, gap, content = piece.partition(newline)
        if not gap:
            continue
        disposition = next(
            (line for line in head.splitlines() if line.lower().startswith("content-disposition")),
            None,
        )
        name = None if disposition is None else _PART_NAME.search(disposition)
        if name is None or not is_secret_key(name.group(1) or name.group(2) or ""):
            continue
        ending = "\r\n" if content.endswith("\r\n") else ("\n" if content.endswith("\n") else "")
        if content[: len(content) - len(ending)] == TEXT_PLACEHOLDER:
            continue
        pieces[index] = head + gap + TEXT_PLACEHOLDER + ending
        changed = True
    return delimiter.join(pieces) if changed else body


def is_multipart(content_type: object) -> bool:
    """True when ``content_type`` names ``multipart/form-data`` (case-insensitive)."""
    return isinstance(content_type, str) and MULTIPART_TYPE in content_type.lower()


def is_form(content_type: object) -> bool:
    """True when ``content_type`` names a URL-encoded form (case-insensitive)."""
    return isinstance(content_type, str) and FORM_TYPE in content_type.lower()


def redact_text_body(body: Any, content_type: object) -> Any:
    """``body`` with the secret-named values inside a form or JSON text redacted."""
    if not isinstance(body, str) or not body:
        return body
    if is_form(content_type):
        return redact_form(body)
    if is_multipart(content_type) or body.startswith("--"):
        return redact_multipart(body, content_type)
    start = body.lstrip()[:1]
    if start not in ("{", "["):
        return scrub_text(body)
    try:
        parsed = js_json_parse(body)
    except (ValueError, RecursionError):
        return scrub_text(body)
    redacted = redact(parsed)
    return body if redacted == parsed else redacted
