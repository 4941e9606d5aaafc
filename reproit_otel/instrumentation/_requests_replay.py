"""The replay half of the requests instrumentation: recorded exchanges as urllib3 responses.

:func:`live_probe` turns the application's prepared request into the probe of PROTOCOL 7.4
(redacted as the capture was, decision D8). :class:`ReplayedBody` is a real
:class:`urllib3.response.HTTPResponse` whose body comes from memory: ``read``, ``read1``,
``readinto`` and ``data`` behave as on a live response, and ``stream`` (what
``iter_content``/``iter_lines`` use) hands out the recorded chunks one by one, a chunk longer
than the requested size split as urllib3 splits it. :func:`rebuild_error` turns a recorded
``error`` back into an exception of the recorded class, resolved from an allow-list.
:func:`telemetry_refusal` is what a call made under OpenTelemetry's
``suppress_instrumentation`` (an exporter's upload) gets instead: it is neither served nor let
out, and it is no divergence.
"""

from __future__ import annotations

import builtins
import contextlib
import http
import inspect
import ssl
from collections import deque
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, cast

import requests.exceptions
import urllib3.exceptions
from urllib3.response import HTTPResponse

from reproit_otel.instrumentation._exceptions import allowed_exception_classes
from reproit_otel.instrumentation._requests_record import recorded_url
from reproit_otel.redaction.body import redact_text_body
from reproit_otel.redaction.core import scrub_secret_values, scrub_value
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.matching import try_json
from reproit_otel.wire.replay import ReplaySession, ServedResponse, serve_http

__all__ = [
    "BEFORE_REQUEST_STATUS",
    "DIVERGED_REASON",
    "Answer",
    "ReplayedBody",
    "answer",
    "live_probe",
    "reason_phrase",
    "rebuild_error",
    "served_headers",
    "telemetry_refusal",
]

DIVERGED_REASON = "Reproit Diverged"
"""Reason phrase of the 599 answer to a call the recording does not hold (section 0)."""

_READ_BLOCK = 65536


# Only these classes are ever instantiated from a capsule: the transport errors requests and
# urllib3 raise, the standard library's TLS errors and the built-in exceptions.
_ALLOWED = allowed_exception_classes(builtins, ssl, urllib3.exceptions, requests.exceptions)


def rebuild_error(error: Any, request: Any) -> BaseException:
    """An exception of the recorded ``error["type"]`` whose ``str()`` is ``error["message"]``.

    A class outside the allow-list (or an unreadable record) becomes
    :class:`requests.exceptions.ConnectionError` with the recorded message.
    """
    type_name = error.get("type") if isinstance(error, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    text = message if isinstance(message, str) else "recorded transport error"
    cls = _ALLOWED.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        cls = requests.exceptions.ConnectionError
    if issubclass(cls, requests.exceptions.RequestException):
        return cls(text, request=request)
    # Build without running __init__: many urllib3 errors take a pool or a URL we do not have,
    # and their __init__ would reformat the message. str() then is exactly the message.
    exc = cls.__new__(cls)
    BaseException.__init__(exc, text)
    for attribute in ("pool", "url", "reason"):
        if not hasattr(exc, attribute):
            with contextlib.suppress(AttributeError):
                setattr(exc, attribute, None)
    return exc


def telemetry_refusal(request: Any) -> requests.exceptions.ConnectionError:
    """The error a suppressed (telemetry) call gets during a replay; counts the refusal.

    Exporters send under ``suppress_instrumentation``; their traffic is not the application's
    behaviour, so it must not consume a recorded exchange or write a DIVERGENCE line, and a
    replay never lets anything out.
    """
    from reproit_otel.replay.session import note_quiet_refusal

    note_quiet_refusal()
    return requests.exceptions.ConnectionError(
        f"reproit replay refused telemetry traffic ({request.method} {recorded_url(request.url)}):"
        " calls made under OpenTelemetry's suppress_instrumentation are not served from the"
        " capsule and never leave a replayed process",
        request=request,
    )


_PHRASES = {int(status): status.phrase for status in http.HTTPStatus}


def reason_phrase(status: int) -> str | None:
    """The standard reason phrase of ``status`` (``Reproit Diverged`` for 599)."""
    if status == 599:
        return DIVERGED_REASON
    return _PHRASES.get(status) if isinstance(status, int) else None


def served_headers(headers: Any) -> dict[str, str]:
    """The served headers as strings; a value that is not a string is not served (a redacted
    one is a stand-in by now, see :mod:`reproit_otel.wire.standins`)."""
    if not isinstance(headers, Mapping):
        return {}
    return {str(k): v for k, v in headers.items() if isinstance(v, str)}


def _body_text(body: Any) -> str:
    if body is None:
        return ""
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body).decode("utf-8", "replace")
    if isinstance(body, str):
        return body
    if hasattr(body, "read"):
        data = body.read()
        return _body_text(data)
    if isinstance(body, Iterable):
        parts = [
            p.encode("utf-8") if isinstance(p, str) else bytes(p)
            for p in body
            if isinstance(p, (str, bytes, bytearray, memoryview))
        ]
        return b"".join(parts).decode("utf-8", "replace")
    return ""


def _read_live_body(prepared: Any) -> str:
    """The text of the live request body; a seekable file is put back where it was."""
    body = prepared.body
    if hasattr(body, "read") and hasattr(body, "seek"):
        try:
            position = body.tell()
        except (OSError, ValueError):
            return _body_text(body)
        try:
            return _body_text(body)
        finally:
            body.seek(position)
    return _body_text(body)


def live_probe(prepared: Any, secrets: Iterable[str]) -> dict[str, Any]:
    """The probe ``{method, url, [body]}`` of section 7.4 for the prepared request.

    The URL is redacted like a recorded one, configured secret values are scrubbed from the
    URL and the body, and the body text goes through ``try_json`` with the request's
    content type; an empty body is left out.
    """
    method = prepared.method or ""
    if isinstance(method, bytes):
        method = method.decode("utf-8", "replace")
    secret_list = tuple(secrets)
    probe: dict[str, Any] = {
        "method": method,
        "url": scrub_secret_values(recorded_url(prepared.url), secret_list),
    }
    text = _read_live_body(prepared)
    if text:
        content_type = (prepared.headers or {}).get("content-type")
        if isinstance(content_type, bytes):
            content_type = content_type.decode("latin-1")
        body = redact_text_body(try_json(text, content_type), content_type)
        probe["body"] = scrub_value(body, secret_list)
    return probe


@dataclass(frozen=True)
class Answer:
    """What one live call gets from the recording."""

    served: ServedResponse | None = None
    """The response to hand back (``None`` when ``error`` is to be raised instead)."""
    error: Mapping[str, Any] | None = None
    """A recorded transport error: the call raises it instead of answering."""
    body_error: Mapping[str, Any] | None = None
    """A recorded error while the body was read: raised after the recorded part of the body."""
    divergences: tuple[str, ...] = ()
    """``REPROIT:DIVERGENCE`` lines this call produced (to be written to standard error)."""


def answer(session: ReplaySession, probe: dict[str, Any]) -> Answer:
    """Serve ``probe`` from ``session`` with ``serve_http`` (PROTOCOL 7.4), plus errors.

    ``serve_http`` answers with the recorded response; the requests recorder also records
    transport errors (a response that is only ``{"error": ...}``, raised instead of
    answering) and errors while the body was read (``error`` next to ``status``, raised after
    the recorded part of the body).
    """
    if session.usage.awaiting:
        return _before_request(session, probe)
    served = serve_http(session, probe)
    if served.divergence_line is not None:
        return Answer(served=served, divergences=(served.divergence_line,))
    recorded = served.recorded or {}
    error = recorded.get("error", UNSET)
    recorded_error = error if isinstance(error, Mapping) else None
    if recorded_error is not None and "status" not in recorded:
        return Answer(error=recorded_error)
    return Answer(served=served, body_error=recorded_error)


BEFORE_REQUEST_STATUS = 503
"""The status of a call made before the recorded request that the recording cannot answer."""
_BEFORE_REQUEST_BODY = b'{"reproit":"before-request"}'


def _before_request(session: ReplaySession, probe: dict[str, Any]) -> Answer:
    # Boot-time calls (warm-up, health checks of upstreams) must neither consume the
    # request's exchanges nor reach the network: a recorded answer to the same call is read
    # without consuming it, anything else gets a documented 503.
    probe = session.redact_probe("http", probe)
    session.note_before_request(
        {"protocol": "http", "method": probe.get("method"), "url": probe.get("url")}
    )
    entry = session.peek_entry("http", probe)
    served = entry.answer if entry is not None else None
    recorded = served.recorded if isinstance(served, ServedResponse) else None
    if isinstance(served, ServedResponse) and (recorded is None or "error" not in recorded):
        return Answer(served=served)
    return Answer(
        served=ServedResponse(
            status=BEFORE_REQUEST_STATUS,
            headers={"content-type": "application/json"},
            body_text=_BEFORE_REQUEST_BODY.decode(),
            body=_BEFORE_REQUEST_BODY,
        )
    )


class _RecordedChunks:
    """The ``_fp`` of a :class:`ReplayedBody`: the recorded chunks, then the recorded error.

    A plain object with the file methods urllib3 calls, not an :class:`io.RawIOBase`: one is
    made per served call, and the io base class costs more to set up than the rest of it.
    """

    __slots__ = ("_chunks", "_error", "closed")

    def __init__(self, chunks: Iterable[bytes], error: BaseException | None) -> None:
        self._chunks: deque[bytes] = deque(c for c in chunks if c)
        self._error = error
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def flush(self) -> None:
        pass

    def readable(self) -> bool:
        return True

    def isclosed(self) -> bool:
        return self.closed or (not self._chunks and self._error is None)

    def _end(self) -> bytes:
        error, self._error = self._error, None
        if error is not None:
            raise error
        return b""

    def next_piece(self, size: int | None) -> bytes:
        """At most ``size`` bytes of the current chunk (the whole chunk for ``None``)."""
        if not self._chunks:
            return self._end()
        chunk = self._chunks[0]
        if size is None or size < 0 or size >= len(chunk):
            self._chunks.popleft()
            return chunk
        self._chunks[0] = chunk[size:]
        return chunk[:size]

    def read1(self, size: int | None = -1) -> bytes:
        if self.closed:
            return b""
        return self.next_piece(size)

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            return b""
        if not self._chunks:
            return self._end()
        if size is None or size < 0:
            data = b"".join(self._chunks)
            self._chunks.clear()
            return data
        out = bytearray()
        while self._chunks and len(out) < size:
            out += self.next_piece(size - len(out))
        return bytes(out)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


# urllib3 takes the status line's version text from 2.3 on; earlier releases (1.26 to 2.2)
# have no such parameter.
_VERSION_STRING: dict[str, Any] = (
    {"version_string": "HTTP/1.1"}
    if "version_string" in inspect.signature(HTTPResponse.__init__).parameters
    else {}
)


class ReplayedBody(HTTPResponse):
    """A urllib3 response answered from the recording; no connection, no socket."""

    def __init__(
        self,
        *,
        status: int,
        headers: Mapping[str, str],
        chunks: Iterable[bytes],
        url: str | None,
        method: str | None,
        error: BaseException | None = None,
    ) -> None:
        self._recorded = _RecordedChunks(chunks, error)
        super().__init__(
            body=cast("IO[Any]", self._recorded),  # duck-typed: the file methods urllib3 calls
            headers=headers,
            status=status,
            version=11,
            **_VERSION_STRING,
            reason=reason_phrase(status),
            preload_content=False,
            decode_content=False,
            enforce_content_length=False,
            request_method=method,
            request_url=url,
        )

    def stream(
        self, amt: int | None = _READ_BLOCK, decode_content: bool | None = None
    ) -> Generator[bytes, None, None]:
        """The recorded chunks in order, each split into pieces of at most ``amt`` bytes."""
        if amt == 0:
            return
        while not self._recorded.isclosed():
            piece = self._recorded.next_piece(amt)
            if piece:
                yield piece

    def read_chunked(
        self, amt: int | None = None, decode_content: bool | None = None
    ) -> Generator[bytes, None, None]:
        """Same as :meth:`stream`: the recording is already split into its chunks."""
        yield from self.stream(amt, decode_content)
