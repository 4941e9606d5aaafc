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

Any other value (already parsed JSON, ``None``, a non-JSON text) comes back unchanged. The
recorders apply it to what they record and the replay side to each live probe, so a
redacted recording still matches the call that produced it.
"""

from __future__ import annotations

from typing import Any, Final

from reproit_otel.redaction.core import redact, redact_form
from reproit_otel.wire._jsparse import js_json_parse

__all__ = ["FORM_TYPE", "is_form", "redact_text_body"]

FORM_TYPE: Final = "application/x-www-form-urlencoded"
"""The content type whose body is redacted field by field."""


def is_form(content_type: object) -> bool:
    """True when ``content_type`` names a URL-encoded form (case-insensitive)."""
    return isinstance(content_type, str) and FORM_TYPE in content_type.lower()


def redact_text_body(body: Any, content_type: object) -> Any:
    """``body`` with the secret-named values inside a form or JSON text redacted."""
    if not isinstance(body, str) or not body:
        return body
    if is_form(content_type):
        return redact_form(body)
    start = body.lstrip()[:1]
    if start not in ("{", "["):
        return body
    try:
        parsed = js_json_parse(body)
    except (ValueError, RecursionError):
        return body
    redacted = redact(parsed)
    return body if redacted == parsed else redacted
