"""The recording half of the httpx instrumentation: one transport call as an exchange.

:mod:`reproit_otel.instrumentation.httpx` calls :meth:`HttpxCall.begin` when a transport's
``handle_request`` (or ``handle_async_request``) starts, :meth:`HttpxCall.failed` when it
raised and :meth:`HttpxCall.responded` when it returned a response. The exchange has the
shape the requests recorder writes (PROTOCOL section 4.1, ``protocol: "http"``), built by the
same helpers, so a capsule does not tell which client made the call.

Request body: a body given whole (``content=``, ``json=``, ``data=``, ``files=`` all end in an
``httpx.ByteStream``) is read as it is; any other stream (a generator, an async iterator) is
swapped, for the duration of the call, for a pass-through that records each piece as the
transport pulls it.

Response body: the response's ``stream`` is swapped for a pass-through
(:class:`_SyncTap`, :class:`_AsyncTap`) that records each piece the transport hands on, as
the application reads (``read()``, ``iter_bytes``, ``aiter_raw``...). A body sent with a
``content-encoding`` is recorded decoded, as every recorded body is (the replay serves it
without that header); each piece is then what the decoder gave for one piece read. The
exchange is finished when the body ends, when a read raises (``error`` is then recorded next
to the part that arrived) or when the response is closed before its end (an abandoned
stream: the exchange holds exactly what was read). A response dropped without a close is
finished from the tap's finalizer through :func:`~reproit_otel.capture.recording.hand_over`.

This module takes no lock: a body that ends twice (a read and a close) is finished once
through the one-item token ``list.pop`` hands to exactly one caller.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from reproit_otel._guard import absorb, guarded
from reproit_otel.capture.recording import ExchangeRecorder, Unrecordable, hand_over
from reproit_otel.instrumentation._requests_body import BodyTap
from reproit_otel.instrumentation._requests_record import (
    ErrorFields,
    describe_error,
    effect_key,
    recorded_url,
    request_fields,
    resource_of,
    response_fields,
)

__all__ = ["HttpxCall", "request_content"]


def _pairs(raw: Any) -> list[tuple[str, str]]:
    """httpx's raw header pairs as text (latin-1, as they went over the wire)."""
    return [(bytes(name).decode("latin-1"), bytes(value).decode("latin-1")) for name, value in raw]


def _content_type(pairs: list[tuple[str, str]]) -> str | None:
    for name, value in pairs:
        if name.lower() == "content-type":
            return value
    return None


def request_content(request: httpx.Request) -> bytes | None:
    """The request body when it was given whole (``None``: it is a stream of pieces)."""
    stream = request.stream
    if isinstance(stream, httpx.ByteStream):
        return b"".join(stream)
    return None


# httpx's own decoders, so that a recorded body is decoded as the application's is; a release
# that moved them records encoded bodies as they were sent.
_decoders: Any
try:
    _decoders = importlib.import_module("httpx._decoders")
except ImportError:
    _decoders = None


def _decoder(pairs: list[tuple[str, str]]) -> Any:
    """The content decoder of a response with a ``content-encoding``, else ``None``."""
    if _decoders is None:
        return None
    names = [
        part.strip().lower()
        for name, value in pairs
        if name.lower() == "content-encoding"
        for part in value.split(",")
    ]
    chosen = [_decoders.SUPPORTED_DECODERS[n]() for n in names if n in _decoders.SUPPORTED_DECODERS]
    chosen = [d for d in chosen if not isinstance(d, _decoders.IdentityDecoder)]
    if not chosen:
        return None
    return chosen[0] if len(chosen) == 1 else _decoders.MultiDecoder(chosen)


class HttpxCall:
    """One transport call being recorded: the request's snapshot, then how it ended."""

    __slots__ = (
        "_decoder",
        "_error",
        "_method",
        "_recorder",
        "_request_body",
        "_request_headers",
        "_response_body",
        "_response_headers",
        "_status",
        "_unfinished",
        "_url",
    )

    def __init__(self, recorder: ExchangeRecorder, request: httpx.Request) -> None:
        self._recorder: ExchangeRecorder | None = recorder
        self._method = request.method
        self._url = str(request.url)
        self._request_headers = list(request.headers.raw)
        self._request_body: BodyTap | None = None
        self._status: int | None = None
        self._response_headers: list[tuple[bytes, bytes]] = []
        self._response_body = BodyTap(boundaries=True)
        self._error: ErrorFields | None = None
        self._decoder: Any = None
        self._unfinished = [True]

    @classmethod
    def begin(
        cls, recorder: ExchangeRecorder, request: httpx.Request, *, asynchronous: bool
    ) -> HttpxCall:
        """Start recording ``request``; a streamed body is swapped for a pass-through of the
        transport's kind (``asynchronous``: an async transport), which the caller takes out
        again once the transport is done with it. A multipart body is both kinds."""
        call = cls(recorder, request)
        content = request_content(request)
        if content is not None:
            if content:
                call._request_body = BodyTap()
                call._request_body.add(content)
            return call
        tap = call._request_body = BodyTap()
        stream = request.stream
        if asynchronous and isinstance(stream, httpx.AsyncByteStream):
            request.stream = _AsyncRequestTee(stream, tap)
        elif not asynchronous and isinstance(stream, httpx.SyncByteStream):
            request.stream = _SyncRequestTee(stream, tap)
        return call

    def failed(self, error: BaseException) -> None:
        """The transport raised ``error``: it is the response."""
        self._error = describe_error(error)
        self._status = None
        self.finish()

    def responded(self, response: httpx.Response) -> None:
        """A response came back: record its body as the application reads it."""
        self._status = int(response.status_code)
        self._response_headers = list(response.headers.raw)
        self._decoder = _decoder(_pairs(self._response_headers))
        stream = response.stream
        if isinstance(stream, httpx.AsyncByteStream):
            response.stream = _AsyncTap(stream, self)
        elif isinstance(stream, httpx.SyncByteStream):
            response.stream = _SyncTap(stream, self)
        else:  # not a stream of ours to read: nothing more will be seen of the body
            self.finish()

    def add(self, piece: bytes) -> None:
        """One piece of the response body as the transport handed it on."""
        decoder = self._decoder
        if decoder is not None:
            piece = decoder.decode(piece)
        self._response_body.add(piece)

    def finish(self, error: BaseException | None = None) -> None:
        """The body ended (or broke off with ``error``): hand the exchange over, once."""
        try:
            self._unfinished.pop()
        except IndexError:
            return
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        try:
            if self._decoder is not None and error is None and self._status is not None:
                self._response_body.add(self._decoder.flush())
            if error is not None:
                self._error = describe_error(error)
            held = self._response_body.kept_size()
            if self._request_body is not None:
                held += self._request_body.kept_size()
            recorder.finish_deferred("call", self._build, held)
        except Exception as exc:  # called from inside the application's reads
            recorder.fail("the response could not be recorded")
            absorb("httpx.record_body", exc)

    def _build(self) -> tuple[str, str, dict[str, Any]]:
        """``(resource, key, exchange)`` of the call, from the snapshots alone."""
        with guarded("httpx.build_exchange"):
            url = recorded_url(self._url)
            pairs = _pairs(self._request_headers)
            content_type = _content_type(pairs)
            request = request_fields(self._method, url, pairs, content_type, self._request_body)
            exchange = {"protocol": "http", "request": request, "response": self._response()}
            return resource_of(url), effect_key(self._method, url), exchange
        raise Unrecordable("the exchange could not be recorded")

    def _response(self) -> dict[str, Any]:
        if self._status is None:
            return {"error": self._error}
        pairs = _pairs(self._response_headers)
        return response_fields(
            self._status, pairs, _content_type(pairs), self._response_body, self._error
        )


def _record_piece(call: HttpxCall, piece: bytes) -> None:
    try:
        call.add(piece)
    except Exception as exc:  # never let a defect of ours reach the read
        absorb("httpx.record_body", exc)


# ------------------------------------------------------------------------------ streams


class _SyncRequestTee(httpx.SyncByteStream):
    """A streamed request body handed to the transport: records each piece it pulls."""

    def __init__(self, source: httpx.SyncByteStream, tap: BodyTap) -> None:
        self._source = source
        self._tap = tap

    def __iter__(self) -> Iterator[bytes]:
        for piece in self._source:
            self._tap.add(piece)
            yield piece

    def close(self) -> None:
        self._source.close()


class _AsyncRequestTee(httpx.AsyncByteStream):
    """:class:`_SyncRequestTee` for an async transport."""

    def __init__(self, source: httpx.AsyncByteStream, tap: BodyTap) -> None:
        self._source = source
        self._tap = tap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._source:
            self._tap.add(piece)
            yield piece

    async def aclose(self) -> None:
        await self._source.aclose()


class _SyncTap(httpx.SyncByteStream):
    """A response body stream that records each piece the application receives."""

    def __init__(self, inner: httpx.SyncByteStream, call: HttpxCall) -> None:
        self._inner = inner
        self._call = call

    def __iter__(self) -> Iterator[bytes]:
        call = self._call
        pieces = iter(self._inner)
        while True:
            try:
                piece = next(pieces)
            except StopIteration:
                break
            except Exception as error:
                call.finish(error)
                raise
            _record_piece(call, piece)
            yield piece
        call.finish()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._call.finish()

    def __del__(self) -> None:
        # Dropped before its end: what was read is the body. A finalizer only hands over.
        if self._call._unfinished:
            hand_over(self._call.finish)


class _AsyncTap(httpx.AsyncByteStream):
    """:class:`_SyncTap` for an async transport."""

    def __init__(self, inner: httpx.AsyncByteStream, call: HttpxCall) -> None:
        self._inner = inner
        self._call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        call = self._call
        pieces = self._inner.__aiter__()
        while True:
            try:
                piece = await pieces.__anext__()
            except StopAsyncIteration:
                break
            except Exception as error:
                call.finish(error)
                raise
            _record_piece(call, piece)
            yield piece
        call.finish()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._call.finish()

    def __del__(self) -> None:
        if self._call._unfinished:
            hand_over(self._call.finish)
