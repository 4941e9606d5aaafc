"""The replay half of the httpx instrumentation: recorded exchanges as httpx responses.

:func:`serve` answers one transport call from the active replay session with the matcher of
PROTOCOL 7.2 to 7.4 (through :func:`~reproit_otel.instrumentation._requests_replay.answer`,
the same answer the requests replay gives): the recorded status, headers and body, its
recorded chunks one by one as the body stream, a recorded transport error raised as the
recorded httpx exception class (resolved from an allow-list), a recorded mid-body error
raised after the recorded part of the body, and ``599 Reproit Diverged`` for a call the
recording does not hold. No socket is ever opened.
"""

from __future__ import annotations

import builtins
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import httpx

from reproit_otel.instrumentation._exceptions import allowed_exception_classes
from reproit_otel.instrumentation._httpx_record import request_content
from reproit_otel.instrumentation._requests_record import recorded_url
from reproit_otel.instrumentation._requests_replay import (
    answer,
    reason_phrase,
    served_headers,
)
from reproit_otel.redaction.body import redact_text_body
from reproit_otel.redaction.core import scrub_secret_values, scrub_value
from reproit_otel.replay.session import note_quiet_refusal, report_divergence
from reproit_otel.wire.matching import try_json
from reproit_otel.wire.replay import ReplaySession

__all__ = [
    "live_probe",
    "rebuild_error",
    "serve",
    "serve_async",
    "serve_sync",
    "served_http_version",
    "telemetry_refusal",
]

# Only these classes are ever instantiated from a capsule: httpx's own exceptions, the
# standard library's TLS errors and the built-in exceptions.
_ALLOWED = allowed_exception_classes(builtins, ssl, httpx)


def rebuild_error(error: Any, request: httpx.Request) -> BaseException:
    """An exception of the recorded ``error["type"]`` whose ``str()`` is ``error["message"]``.

    A class outside the allow-list (or an unreadable record) becomes
    :class:`httpx.ConnectError` with the recorded message.
    """
    type_name = error.get("type") if isinstance(error, Mapping) else None
    message = error.get("message") if isinstance(error, Mapping) else None
    text = message if isinstance(message, str) else "recorded transport error"
    cls = _ALLOWED.get(type_name) if isinstance(type_name, str) else None
    if cls is None:
        cls = httpx.ConnectError
    if issubclass(cls, httpx.RequestError):
        return cls(text, request=request)
    # Without running __init__: str() is then exactly the recorded message.
    exc = cls.__new__(cls)
    BaseException.__init__(exc, text)
    for attribute in ("request", "response"):
        if not hasattr(exc, attribute):
            with contextlib.suppress(AttributeError):
                setattr(exc, attribute, None)
    return exc


def telemetry_refusal(request: httpx.Request) -> httpx.ConnectError:
    """What a call made under ``suppress_instrumentation`` gets during a replay (counted)."""
    note_quiet_refusal()
    return httpx.ConnectError(
        f"reproit replay refused telemetry traffic ({request.method} "
        f"{recorded_url(str(request.url))}): calls made under OpenTelemetry's "
        "suppress_instrumentation are not served from the capsule and never leave a "
        "replayed process",
        request=request,
    )


def served_http_version(transport: Any) -> bytes:
    """The HTTP version a replayed response of ``transport`` reports.

    A capture does not record the version a response came in, so a replay reports
    ``HTTP/2`` where the transport speaks nothing else (``http1=False, http2=True``: prior
    knowledge over ``http://``, ``h2`` alone in ALPN over ``https://``) and ``HTTP/1.1``
    otherwise, which is what a client allowing both gets from most servers over ``http://``.
    """
    pool = getattr(transport, "_pool", None)
    only_http2 = getattr(pool, "_http2", False) is True and getattr(pool, "_http1", True) is False
    return b"HTTP/2" if only_http2 else b"HTTP/1.1"


def _content_type(request: httpx.Request) -> str | None:
    value = request.headers.get("content-type")
    return value if isinstance(value, str) else None


def live_probe(
    request: httpx.Request, content: bytes | None, secrets: Iterable[str]
) -> dict[str, Any]:
    """The probe ``{method, url, [body]}`` of section 7.4, redacted as the capture was."""
    secret_list = tuple(secrets)
    probe: dict[str, Any] = {
        "method": request.method,
        "url": scrub_secret_values(recorded_url(str(request.url)), secret_list),
    }
    if content:
        text = content.decode("utf-8", "replace")
        content_type = _content_type(request)
        body = redact_text_body(try_json(text, content_type), content_type)
        probe["body"] = scrub_value(body, secret_list)
    return probe


def _sync_content(request: httpx.Request) -> bytes:
    content = request_content(request)
    if content is not None:
        return content
    if isinstance(request.stream, httpx.SyncByteStream):
        return request.read()
    return b""


async def _async_content(request: httpx.Request) -> bytes:
    content = request_content(request)
    if content is not None:
        return content
    if isinstance(request.stream, httpx.AsyncByteStream):
        return await request.aread()
    return b""


class _ServedChunks:
    """The recorded chunks, then the recorded mid-body error."""

    def __init__(self, chunks: Iterable[bytes], error: BaseException | None) -> None:
        self._chunks = [c for c in chunks if c]
        self._error = error

    def pieces(self) -> Iterator[bytes]:
        yield from self._chunks
        error, self._error = self._error, None
        if error is not None:
            raise error


class _SyncServed(httpx.SyncByteStream):
    def __init__(self, chunks: _ServedChunks) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        return self._chunks.pieces()


class _AsyncServed(httpx.AsyncByteStream):
    def __init__(self, chunks: _ServedChunks) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._chunks.pieces():
            yield piece


def serve(
    session: ReplaySession,
    request: httpx.Request,
    content: bytes,
    secrets: tuple[str, ...],
    *,
    asynchronous: bool,
    http_version: bytes = b"HTTP/1.1",
) -> httpx.Response:
    """The response to ``request`` from the recording (raises a recorded transport error);
    it reports ``http_version`` (see :func:`served_http_version`)."""
    probe = live_probe(request, content, secrets)
    result = answer(session, probe)
    if session.on_divergence is None:  # a session with a callback reported them itself
        for line in result.divergences:
            report_divergence(line)
    if result.error is not None or result.served is None:
        raise rebuild_error(result.error, request)
    served = result.served
    body_error = None
    if result.body_error is not None:
        body_error = rebuild_error(result.body_error, request)
    chunks = _ServedChunks(
        served.chunks if served.chunks is not None else (served.body,), body_error
    )
    stream: httpx.SyncByteStream | httpx.AsyncByteStream = (
        _AsyncServed(chunks) if asynchronous else _SyncServed(chunks)
    )
    status = served.status if isinstance(served.status, int) else 200
    extensions: dict[str, Any] = {"http_version": http_version}
    phrase = reason_phrase(status)
    if phrase is not None and http_version != b"HTTP/2":  # HTTP/2 has no reason phrase
        extensions["reason_phrase"] = phrase.encode("latin-1", "replace")
    return httpx.Response(
        status,
        headers=served_headers(served.headers),
        stream=stream,
        extensions=extensions,
    )


async def serve_async(
    session: ReplaySession,
    request: httpx.Request,
    secrets: tuple[str, ...],
    http_version: bytes = b"HTTP/1.1",
) -> httpx.Response:
    """:func:`serve` for an async transport (the request body is read asynchronously)."""
    content = await _async_content(request)
    return serve(session, request, content, secrets, asynchronous=True, http_version=http_version)


def serve_sync(
    session: ReplaySession,
    request: httpx.Request,
    secrets: tuple[str, ...],
    http_version: bytes = b"HTTP/1.1",
) -> httpx.Response:
    """:func:`serve` for a sync transport."""
    content = _sync_content(request)
    return serve(session, request, content, secrets, asynchronous=False, http_version=http_version)
