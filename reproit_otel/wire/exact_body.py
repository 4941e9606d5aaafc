"""Response bodies a replay serves byte for byte (the exact-body decision, docs/compatibility.md).

PROTOCOL 4.2 records a JSON body as its parsed value and every body as UTF-8 text; a replay
then serves ``JSON.stringify`` of the value, or the text. Both lose bytes: ``9.0`` comes back
as ``9`` (so ``json()`` hands the application an ``int``), keys come back in the capsule's
sorted order, whitespace and ``\\u`` escapes vanish, and a body that is not UTF-8 (a binary
file, a Latin-1 page) comes back with U+FFFD in place of its bytes.

:func:`exact_body` records a response body so that the bytes served are the bytes read, while
staying inside the reference shapes:

* a JSON body whose canonical JSON (what the batch and the capsule carry, keys sorted) is the
  very text read keeps its parsed value, as the reference records it;
* any other JSON body is recorded as its text, a string (the reference serves a string body as
  itself, so its replayers serve the exact bytes too);
* unless the parsed value holds a secret key: structural redaction (section 3) needs the
  parsed value, and a secret wins over byte-exactness;
* a body that is not valid UTF-8 keeps the reference's lossy text in ``body`` (for display,
  matching and other replayers) and carries its exact bytes in ``bodyBase64``, which
  reproit-otel's replay serves. :func:`scrub_exact_bytes` drops ``bodyBase64`` whenever a
  configured secret value is in those bytes (text scrubbing cannot reach into base64).

:func:`served_bytes` is the replay side: the exact bytes of a recorded response, computed
once per exchange when a capsule is loaded.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reproit_otel.redaction.core import redact
from reproit_otel.wire._js import UNSET, utf8_bytes
from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.bounds import MAX_BODY_BYTES, bounded_body
from reproit_otel.wire.canonical import canonical_json, ordered_json

__all__ = ["EXACT_BYTES_FIELD", "exact_body", "scrub_exact_bytes", "served_bytes"]

EXACT_BYTES_FIELD: Final = "bodyBase64"
"""Response field holding the exact bytes (standard base64) of a body that is not UTF-8."""

_JSON_TYPE: Final = "application/json"


def exact_body(data: bytes, content_type: Any = UNSET) -> dict[str, Any]:
    """The body fields of a response whose replay must serve exactly ``data``.

    Same shapes as :func:`~reproit_otel.wire.bounds.bounded_body` (``{}``, ``{"body"}`` or
    the identity of a body over the budget), plus ``bodyBase64`` for a body that is not UTF-8.
    """
    if not data or len(data) > MAX_BODY_BYTES:
        return bounded_body(data or None, content_type)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {
            "body": data.decode("utf-8", "replace"),
            EXACT_BYTES_FIELD: base64.b64encode(data).decode("ascii"),
        }
    if isinstance(content_type, str) and _JSON_TYPE in content_type:
        try:
            value = js_json_parse(text)
        except ValueError:
            return {"body": text}
        if not isinstance(value, str) and canonical_json(value) == text:
            return {"body": value}  # the reference's shape already serves these bytes
        if redact(value) != value:
            return {"body": value}  # a secret key: redaction needs the parsed value
    return {"body": text}


def scrub_exact_bytes(exchange: Any, secrets: Iterable[str]) -> Any:
    """``exchange`` without ``response.bodyBase64`` when a secret value is in those bytes.

    The text fields are scrubbed by :func:`~reproit_otel.redaction.core.scrub_value`; the
    exact bytes are base64 and cannot be, so they are dropped instead (the lossy ``body``,
    scrubbed, is what a replay then serves). Returns ``exchange`` itself when nothing changes.
    """
    if not isinstance(exchange, Mapping):
        return exchange
    response = exchange.get("response")
    if not isinstance(response, Mapping) or EXACT_BYTES_FIELD not in response:
        return exchange
    data = _decoded(response.get(EXACT_BYTES_FIELD))
    needles = [s for s in secrets if s]
    if data is not None and not any(_contains(data, secret) for secret in needles):
        return exchange
    trimmed = {k: v for k, v in response.items() if k != EXACT_BYTES_FIELD}
    return {**exchange, "response": trimmed}


def _contains(data: bytes, secret: str) -> bool:
    if utf8_bytes(secret) in data:
        return True
    try:
        return secret.encode("latin-1") in data
    except UnicodeEncodeError:
        return False


def _decoded(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def served_bytes(response: Mapping[str, Any]) -> tuple[bytes, str]:
    """The bytes a replay serves for a recorded ``response``, and the body as text.

    The text is the reference's ``bodyText`` (PROTOCOL 7.4 step 4): ``""`` for no body, a
    string as itself, anything else ``JSON.stringify``. The bytes are its UTF-8, except for a
    response carrying valid ``bodyBase64``: then they are those exact bytes.
    """
    body = response.get("body", UNSET)
    text = "" if body is UNSET else body if isinstance(body, str) else ordered_json(body)
    exact = _decoded(response.get(EXACT_BYTES_FIELD, UNSET))
    return (utf8_bytes(text) if exact is None else exact), text
