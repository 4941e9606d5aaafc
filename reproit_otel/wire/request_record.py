"""The inbound request as it came in: every header and the body bytes (decision "exact request").

PROTOCOL 9.2's canonical input decodes the request (lowercased headers, a JSON or form body as
a value); a replay built from it is a different request (header order and names, ``9.0`` sent
as ``9``, keys re-sorted, multipart and binary bodies missing). The capture therefore also keeps
the request as it came in, under ``input.request`` of the ``start`` event::

    {"headers": [["Host", "shop.example"], ["Accept-Language", "fr"],
                 ["Cookie", "theme=dark; sessionid=$reproit.alnum.32.5d0c..."]],
     "body": "{\\"b\\": 9.0, \\"a\\": 1}"}

* ``headers``: ``[name, value]`` pairs in the order the server handed them over (ASGI gives
  lowercase names; WSGI gives neither case nor order beyond its environ, so names are written
  in the usual capitalised form), at most :data:`~reproit_otel.wire.bounds.MAX_HEADERS` of
  them, each value cut to :data:`MAX_HEADER_VALUE` code points. Secret parts are redacted as
  text keeping the syntax (:func:`~reproit_otel.redaction.headers.redact_header`).
* the body in the exact-bytes representation outbound bodies use
  (:mod:`~reproit_otel.wire.exact_body`): ``body`` is the text when the bytes are UTF-8, else
  the lossy text plus ``bodyBase64`` (the exact bytes); over
  :data:`~reproit_otel.wire.bounds.MAX_BODY_BYTES` only ``bodyBytes`` (and ``bodySha256`` when
  the bytes were read) and ``truncated: true``. Secret fields are redacted by name first: a form
  and a multipart form as text (the rest byte for byte), a JSON text holding a secret key is
  recorded as its redacted JSON value instead (a secret wins over byte-exactness).
* ``chunked: true`` when the request came with ``Transfer-Encoding: chunked``.
* ``server``: ``[host, port]``, the address the server said it received the request on
  (WSGI's ``SERVER_NAME`` and ``SERVER_PORT``, ASGI's ``scope["server"]``), when it said.
  Frameworks read it as the request's own (Django's ``request.get_port()``, so Wagtail's site
  lookup); replay hands every request the recorded one (:func:`recorded_server`), since the
  replayed application listens on another port.

:func:`scrub_request_bytes` drops ``bodyBase64`` when a configured secret value is in those
bytes (text scrubbing cannot reach into base64).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from reproit_otel.redaction.body import is_form, redact_text_body
from reproit_otel.redaction.core import redact_form
from reproit_otel.redaction.headers import redact_header
from reproit_otel.redaction.multipart import is_multipart, redact_multipart
from reproit_otel.wire._js import code_point_cut, utf8_bytes
from reproit_otel.wire.bounds import MAX_BODY_BYTES, MAX_HEADERS
from reproit_otel.wire.exact_body import EXACT_BYTES_FIELD

__all__ = [
    "MAX_HEADER_VALUE",
    "REQUEST_FIELD",
    "recorded_request",
    "recorded_server",
    "scrub_request_bytes",
    "title_case",
]

REQUEST_FIELD: Final = "request"
"""The key of the exact request inside the ``start`` event's input."""

MAX_HEADER_VALUE: Final = 8192
"""A header value is kept up to this many code points."""


def title_case(name: str) -> str:
    """``accept-language`` -> ``Accept-Language`` (how clients usually spell header names)."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


def _body_fields(data: bytes, content_type: str | None) -> dict[str, Any]:
    if len(data) > MAX_BODY_BYTES:
        return {
            "bodyBytes": len(data),
            "bodySha256": hashlib.sha256(data).hexdigest(),
            "truncated": True,
        }
    if content_type is not None and is_multipart(content_type):
        data = redact_multipart(data, content_type)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {
            "body": data.decode("utf-8", "replace"),
            EXACT_BYTES_FIELD: base64.b64encode(data).decode("ascii"),
        }
    if is_form(content_type):
        return {"body": redact_form(text)}
    return {"body": redact_text_body(text, content_type)}


def recorded_request(
    headers: Iterable[tuple[str, str]],
    body: bytes | None,
    content_type: str | None,
    *,
    size: int | None = None,
    chunked: bool = False,
    server: Any = None,
) -> dict[str, Any]:
    """The ``input.request`` value of one inbound request (see the module).

    ``headers`` are ``(name, value)`` pairs as the server gave them; ``body`` the request body
    bytes when they were read (None: not read), ``size`` its length when it was not read but
    is known (``Content-Length``); ``server`` the ``(host, port)`` the server received it on
    (kept when the host is text and the port a number, or digits).
    """
    pairs: list[list[str]] = []
    for name, text in headers:
        if len(pairs) >= MAX_HEADERS:
            break
        pairs.append([name, code_point_cut(redact_header(name, text), MAX_HEADER_VALUE)])
    value: dict[str, Any] = {"headers": pairs}
    if body is not None and (body or size):
        value.update(_body_fields(body, content_type))
    elif body is None and size:
        value.update({"bodyBytes": size, "truncated": True})
    if chunked:
        value["chunked"] = True
    address = _address(server)
    if address is not None:
        value["server"] = list(address)
    return value


def _address(server: Any) -> tuple[str, int] | None:
    if not isinstance(server, (list, tuple)) or len(server) != 2:
        return None
    host, port = server
    if isinstance(port, str) and port.isascii() and port.isdigit():
        port = int(port)
    if not isinstance(host, str) or isinstance(port, bool) or not isinstance(port, int):
        return None
    return (code_point_cut(host, MAX_HEADER_VALUE), port) if 0 <= port <= 65535 else None


def recorded_server(capsule: Mapping[str, Any]) -> tuple[str, int] | None:
    """The ``server`` address the capsule's inbound request was received on, or None."""
    events = capsule.get("events")
    for event in events if isinstance(events, list) else ():
        if isinstance(event, Mapping) and event.get("kind") == "start":
            value = event.get("input")
            request = value.get(REQUEST_FIELD) if isinstance(value, Mapping) else None
            return _address(request.get("server")) if isinstance(request, Mapping) else None
    return None


def _contains(data: bytes, secret: str) -> bool:
    if utf8_bytes(secret) in data:
        return True
    try:
        return secret.encode("latin-1") in data
    except UnicodeEncodeError:
        return False


def scrub_request_bytes(value: Any, secrets: Iterable[str]) -> Any:
    """An input without ``request.bodyBase64`` when a configured secret value is in it.

    Returns ``value`` itself when nothing changes.
    """
    if not isinstance(value, Mapping):
        return value
    request = value.get(REQUEST_FIELD)
    if not isinstance(request, Mapping) or EXACT_BYTES_FIELD not in request:
        return value
    needles = [s for s in secrets if s]
    encoded = request.get(EXACT_BYTES_FIELD)
    try:
        data = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
    except ValueError:
        data = None
    if data is not None and not any(_contains(data, secret) for secret in needles):
        return value
    trimmed = {k: v for k, v in request.items() if k != EXACT_BYTES_FIELD}
    return {**value, REQUEST_FIELD: trimmed}
