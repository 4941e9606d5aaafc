"""The request a production check fires: the recorded one, rebuilt from the capsule.

:func:`recorded_request` turns the capsule's operation (``METHOD /path``) and its start
event's recorded input into the request line and body to send again: the path
percent-encoded as a server received it, the recorded query (a redacted value sent as the
plain ``$reproit`` marker: the secret is not in the capsule), and the body as JSON, or as a
URL-encoded form when the recorded ``content-type`` says so (:func:`recorded_content_type`).
A method or path no HTTP request line can carry is refused with
:class:`~reproit_otel.errors.CapsuleError` before anything boots. :func:`fire_request` sends
it to the application on loopback; :func:`observed_body` is what ``observedResult`` keeps of
the answer.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from reproit_otel.errors import CapsuleError
from reproit_otel.wire.redaction import PLACEHOLDER_KEY, TEXT_PLACEHOLDER

__all__ = [
    "OBSERVED_BODY_BYTES",
    "REQUEST_TIMEOUT_S",
    "fire_request",
    "observed_body",
    "recorded_content_type",
    "recorded_request",
]

OBSERVED_BODY_BYTES: Final = 8192
"""How much of the replayed response body ``observedResult.body`` keeps."""
REQUEST_TIMEOUT_S: Final = 15.0
"""How long the fired request may take to be answered."""

_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_PATH_SAFE = "/:@!$&'()*+,;=-._~%"


def _check_request_line(method: str, path: str) -> None:
    """Refuse a recorded method or path that no HTTP request line can carry."""
    if _METHOD.fullmatch(method) is None:
        raise CapsuleError(
            f"the capsule's operation method {method!r} is not an HTTP method (a token of "
            "letters, digits and !#$%&'*+.^_`|~-); fix the capsule's \"operation\" field"
        )
    bad = _CONTROL.search(path)
    if bad is not None:
        raise CapsuleError(
            f"the capsule's operation path holds the control character {bad.group(0)!r} at "
            f"offset {bad.start()}; an HTTP request cannot carry it, fix the capsule's "
            '"operation" field'
        )


def _query_text(value: Any) -> str:
    """A recorded query value as the text to send; a redacted one as ``$reproit``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and PLACEHOLDER_KEY in value:
        return TEXT_PLACEHOLDER  # the secret is not in the capsule; send the plain marker
    return json.dumps(value, ensure_ascii=False)


_FORM_TYPE = "application/x-www-form-urlencoded"


def recorded_content_type(capsule: Mapping[str, Any]) -> str:
    """The content type the recorded body is sent with: a URL-encoded form when the request
    carried one (its recorded ``content-type`` header says so), else JSON."""
    start: Any = next((e for e in capsule["events"] if e.get("kind") == "start"), {})
    request_input = start.get("input") if isinstance(start, dict) else None
    headers = request_input.get("headers") if isinstance(request_input, dict) else None
    sent = headers.get("content-type") if isinstance(headers, dict) else None
    if isinstance(sent, str) and _FORM_TYPE in sent.lower():
        return _FORM_TYPE
    return "application/json"


def _form_pairs(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for name, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            pairs.append((name, _query_text(item)))
    return pairs


def recorded_request(capsule: Mapping[str, Any]) -> tuple[str, str, bytes | None]:
    """Method, path with query, and body of the request that started the operation (JSON, or
    a URL-encoded form when :func:`recorded_content_type` says so)."""
    operation = str(capsule["operation"])
    method, _, path = operation.partition(" ")
    _check_request_line(method or "GET", path)
    start: Any = next((e for e in capsule["events"] if e.get("kind") == "start"), {})
    request_input = start.get("input") if isinstance(start, dict) else None
    query: list[tuple[str, str]] = []
    body: bytes | None = None
    if isinstance(request_input, dict):
        raw_query = request_input.get("query")
        if isinstance(raw_query, dict):
            for name, value in raw_query.items():
                values = value if isinstance(value, list) else [value]
                for item in values:
                    query.append((name, _query_text(item)))
        recorded_body = request_input.get("body")
        if isinstance(recorded_body, dict) and recorded_content_type(capsule) == _FORM_TYPE:
            body = urllib.parse.urlencode(_form_pairs(recorded_body)).encode("utf-8")
        elif recorded_body is not None:
            body = json.dumps(recorded_body, ensure_ascii=False).encode("utf-8")
    # A recorded path is percent-decoded (ASGI, WSGI): spaces and non-ASCII go back encoded.
    target = urllib.parse.quote(path, safe=_PATH_SAFE) or "/"
    if query:
        target += "?" + urllib.parse.urlencode(query)
    return method or "GET", target, body


def fire_request(
    port: int,
    method: str,
    target: str,
    body: bytes | None,
    content_type: str = "application/json",
    *,
    answer_headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """Send the request; its status and body. ``answer_headers``, when given, receives the
    response's headers (names lower-cased; the verdict reads a redirect's ``location``)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        headers = {"content-type": content_type} if body is not None else {}
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        if answer_headers is not None:
            answer_headers.update((name.lower(), value) for name, value in response.getheaders())
        return response.status, response.read()
    finally:
        connection.close()


def observed_body(data: bytes) -> dict[str, Any]:
    """``body`` (the first :data:`OBSERVED_BODY_BYTES` as UTF-8 text) and ``bodyBytes``."""
    return {
        "body": data[:OBSERVED_BODY_BYTES].decode("utf-8", "replace"),
        "bodyBytes": len(data),
    }
