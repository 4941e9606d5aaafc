"""The request a production check fires: the recorded one, rebuilt from the capsule.

:func:`replay_request` gives the whole request to send again (:class:`ReplayRequest`):

* the request line: the capsule's operation (``METHOD /path``), the path percent-encoded as a
  server received it, and the recorded query;
* the headers: a capture that kept the request as it came in (``input.request``,
  :mod:`reproit_otel.wire.request_record`) gives every header line, in its order, with its
  name and value; ``Content-Length`` is written for the body actually sent, at the place of
  the recorded ``Content-Length`` or ``Transfer-Encoding`` (a chunked body is sent with a
  length), ``Expect`` is left out, ``Host`` is sent as recorded. An older capsule gives its
  decoded headers (lowercase names) and the content type;
* the body: the recorded bytes (``bodyBase64``, or the text), else the recorded JSON value
  (compact), else the decoded input re-encoded as JSON or as a URL-encoded form (older
  capsules, and bodies over the capture's bound).

Wherever production had a secret, the capsule has a placeholder, and the request carries its
stand-in (:func:`reproit_otel.wire.standins.materialize`): a cookie or a bearer token keeps
its syntax, a password field gets a string of its length, one secret gets one stand-in
everywhere. ``check --header 'Name: value'`` and ``--cookie 'name=value'``
(:class:`RequestOverrides`) replace or add what is sent, for a credential minted by hand.

:func:`recorded_request` is the request line and body alone. A method or path no HTTP request
line can carry is refused with :class:`~reproit_otel.errors.CapsuleError` before anything
boots. :func:`fire_request` sends a request to the application on loopback;
:func:`observed_body` is what ``observedResult`` keeps of the answer.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import re
import urllib.parse
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from reproit_otel.errors import CapsuleError
from reproit_otel.wire.exact_body import EXACT_BYTES_FIELD
from reproit_otel.wire.request_record import REQUEST_FIELD
from reproit_otel.wire.standins import materialize, text_standins

__all__ = [
    "OBSERVED_BODY_BYTES",
    "REQUEST_TIMEOUT_S",
    "ReplayRequest",
    "RequestOverrides",
    "fire_request",
    "observed_body",
    "parse_cookie_override",
    "parse_header_override",
    "recorded_content_type",
    "recorded_request",
    "replay_request",
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
    """A recorded query value as the text to send; a redacted one as its stand-in."""
    value = materialize(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


_FORM_TYPE = "application/x-www-form-urlencoded"


def recorded_content_type(capsule: Mapping[str, Any]) -> str:
    """The content type the recorded body is sent with: a URL-encoded form when the request
    carried one (its recorded ``content-type`` header says so), else JSON."""
    request_input = _start_input(capsule)
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
    request_input = _start_input(capsule)
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
            body = json.dumps(materialize(recorded_body), ensure_ascii=False).encode("utf-8")
    # A recorded path is percent-decoded (ASGI, WSGI): spaces and non-ASCII go back encoded.
    target = urllib.parse.quote(path, safe=_PATH_SAFE) or "/"
    if query:
        target += "?" + urllib.parse.urlencode(query)
    return method or "GET", target, body


def _start_input(capsule: Mapping[str, Any]) -> dict[str, Any] | None:
    start: Any = next((e for e in capsule["events"] if e.get("kind") == "start"), {})
    request_input = start.get("input") if isinstance(start, dict) else None
    return request_input if isinstance(request_input, dict) else None


def parse_header_override(text: str) -> tuple[str, str]:
    """``'Name: value'`` as ``(name, value)``; raises ValueError for anything else."""
    name, colon, value = text.partition(":")
    name = name.strip()
    if not colon or not name or _METHOD.fullmatch(name) is None or _CONTROL.search(value):
        raise ValueError(f"{text!r} is not a header: write it as 'Name: value'")
    return name, value.strip()


def parse_cookie_override(text: str) -> tuple[str, str]:
    """``'name=value'`` as ``(name, value)``; raises ValueError for anything else."""
    name, equals, value = text.partition("=")
    name = name.strip()
    if not equals or not name or ";" in text or _CONTROL.search(text):
        raise ValueError(f"{text!r} is not a cookie: write it as 'name=value'")
    return name, value.strip()


@dataclass(frozen=True)
class RequestOverrides:
    """What ``check --header`` and ``--cookie`` put in the request in place of what the
    capsule gives: each header replaces every recorded header of that name (at the place of
    the first), or is added; each cookie replaces the recorded pair of that name in the
    ``Cookie`` header, or is added to it."""

    headers: Sequence[tuple[str, str]] = ()
    cookies: Sequence[tuple[str, str]] = ()


# Headers the sender writes itself: the length of what it sends, no interim 100 answer.
_FRAMING = frozenset({"content-length", "transfer-encoding"})
_LEFT_OUT = frozenset({"expect"})


@dataclass
class ReplayRequest:
    """One request to send: method, target (path and query), header lines, body bytes."""

    method: str
    target: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | None = None

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        lowered = name.lower()
        return next((v for n, v in self.headers if n.lower() == lowered), None)

    def fire(self, port: int, *, answer_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """Send it to ``127.0.0.1:port`` exactly as listed; the status and the answer's body.

        ``answer_headers``, when given, receives the response's headers (names lower-cased).
        """
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        try:
            names = {name.lower() for name, _ in self.headers}
            connection.putrequest(
                self.method,
                self.target,
                skip_host="host" in names,
                skip_accept_encoding="accept-encoding" in names,
            )
            for name, value in self.headers:
                connection.putheader(name, value.encode("latin-1", "replace"))
            connection.endheaders(self.body)
            response = connection.getresponse()
            if answer_headers is not None:
                answer_headers.update(
                    (name.lower(), value) for name, value in response.getheaders()
                )
            return response.status, _decoded(
                response.read(), response.getheader("content-encoding")
            )
        finally:
            connection.close()


def _decoded(data: bytes, encoding: str | None) -> bytes:
    """The answer's body as the application wrote it: a recorded ``Accept-Encoding`` may have
    asked for gzip or deflate, which the observed body (and its reader) should not see."""
    if not encoding or encoding.strip().lower() not in ("gzip", "x-gzip", "deflate"):
        return data
    try:
        return zlib.decompress(data, 47)  # 32 + 15: a gzip or a zlib header, told apart
    except zlib.error:
        try:
            return zlib.decompress(data, -15)  # a raw deflate stream
        except zlib.error:
            return data


def _recorded_body(request: Mapping[str, Any]) -> bytes | None:
    """The exact body of ``input.request``, or None when it has none to send."""
    encoded = request.get(EXACT_BYTES_FIELD)
    if isinstance(encoded, str):
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            pass
    if request.get("truncated") is True or "body" not in request:
        return None
    body = request["body"]
    if isinstance(body, str):
        return text_standins(body).encode("utf-8")
    # A JSON body with a secret key, recorded as its redacted value: JSON.stringify of it.
    compact = (",", ":")
    return json.dumps(materialize(body), ensure_ascii=False, separators=compact).encode("utf-8")


def _with_length(headers: list[tuple[str, str]], body: bytes | None) -> list[tuple[str, str]]:
    """The header lines with the body's framing written for what is sent."""
    lines: list[tuple[str, str]] = []
    placed = False
    for name, value in headers:
        lowered = name.lower()
        if lowered in _LEFT_OUT:
            continue
        if lowered in _FRAMING:
            if not placed and body is not None:
                lines.append(("Content-Length" if name[:1].isupper() else "content-length", ""))
            placed = True
            continue
        lines.append((name, value))
    if body is not None:
        length = str(len(body))
        if not placed:
            lines.append(("Content-Length", length))
        else:
            lines = [(n, length if n.lower() == "content-length" else v) for n, v in lines]
    return lines


def _decoded_headers(request_input: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The header lines of a capsule without ``input.request``: its decoded headers, a
    header that was redacted whole left out (a stand-in for a whole cookie line is noise)."""
    headers = request_input.get("headers")
    if not isinstance(headers, Mapping):
        return []
    lines: list[tuple[str, str]] = []
    for name, value in headers.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                lines.append((str(name), text_standins(item)))
    return lines


def _override_cookies(
    headers: list[tuple[str, str]], cookies: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    if not cookies:
        return headers
    index = next((i for i, (n, _) in enumerate(headers) if n.lower() == "cookie"), None)
    pairs: list[tuple[str, str]] = []
    if index is not None:
        for part in headers[index][1].split(";"):
            name, equals, value = part.strip().partition("=")
            if name or equals:
                pairs.append((name, value))
    for name, value in cookies:
        at = next((i for i, (n, _) in enumerate(pairs) if n == name), None)
        if at is None:
            pairs.append((name, value))
        else:
            pairs[at] = (name, value)
    line = "; ".join(f"{name}={value}" for name, value in pairs)
    if index is None:
        return [*headers, ("Cookie", line)]
    return [*headers[:index], (headers[index][0], line), *headers[index + 1 :]]


def _override_headers(
    headers: list[tuple[str, str]], overrides: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    for name, value in overrides:
        lowered = name.lower()
        at = next((i for i, (n, _) in enumerate(headers) if n.lower() == lowered), None)
        kept = [(n, v) for n, v in headers if n.lower() != lowered]
        at = len(kept) if at is None else at  # the first recorded line's place, or the end
        headers = [*kept[:at], (name, value), *kept[at:]]
    return headers


def replay_request(
    capsule: Mapping[str, Any], overrides: RequestOverrides | None = None
) -> ReplayRequest:
    """The request a check sends for ``capsule`` (see the module), with ``overrides``."""
    method, target, body = recorded_request(capsule)
    request_input = _start_input(capsule) or {}
    recorded = request_input.get(REQUEST_FIELD)
    headers: list[tuple[str, str]]
    if isinstance(recorded, Mapping) and isinstance(recorded.get("headers"), list):
        headers = [
            (str(pair[0]), text_standins(str(pair[1])))
            for pair in recorded["headers"]
            if isinstance(pair, list) and len(pair) == 2
        ]
        exact = _recorded_body(recorded)
        if exact is not None:
            body = exact
        elif body is not None and not any(n.lower() == "content-type" for n, _ in headers):
            headers.append(("Content-Type", recorded_content_type(capsule)))
    else:
        headers = _decoded_headers(request_input)
        if body is not None:
            kind = recorded_content_type(capsule)
            headers = [(n, v) for n, v in headers if n.lower() != "content-type"]
            headers.append(("content-type", kind))
    if overrides is not None:
        headers = _override_cookies(
            _override_headers(headers, overrides.headers), overrides.cookies
        )
    if method in ("GET", "HEAD") and body == b"":
        body = None
    return ReplayRequest(method, target, _with_length(headers, body), body)


def fire_request(
    port: int,
    method: str,
    target: str,
    body: bytes | None,
    content_type: str = "application/json",
    *,
    answer_headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """Send a request line and body with only a content type (for a body) to ``port``; its
    status and body. ``answer_headers``, when given, receives the response's headers (names
    lower-cased; the verdict reads a redirect's ``location``)."""
    headers = [("content-type", content_type)] if body is not None else []
    request = ReplayRequest(method, target, _with_length(headers, body), body)
    return request.fire(port, answer_headers=answer_headers)


def observed_body(data: bytes) -> dict[str, Any]:
    """``body`` (the first :data:`OBSERVED_BODY_BYTES` as UTF-8 text) and ``bodyBytes``."""
    return {
        "body": data[:OBSERVED_BODY_BYTES].decode("utf-8", "replace"),
        "bodyBytes": len(data),
    }
