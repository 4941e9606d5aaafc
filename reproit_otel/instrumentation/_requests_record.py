"""The recording half of the requests instrumentation: one ``HTTPAdapter.send`` as an exchange.

:mod:`reproit_otel.instrumentation.requests` calls :meth:`RecordedCall.begin` when a call
starts, :meth:`RecordedCall.failed` when the transport raised, and
:meth:`RecordedCall.responded` when a response came back. This module turns what it sees into
the exchange of PROTOCOL section 4.1 and hands it to the :class:`ExchangeRecorder`.

Request bodies are observed without taking anything away from the server: strings, bytes and
buffers are read as they are; a seekable file is read to its end and put back where it was;
a generator, an iterator or an unseekable file is replaced, for the duration of the send only,
by a pass-through that records each piece as the transport pulls it (so what is recorded is
what was sent, even when the send fails half way).

Response bodies are observed as the application reads them, through the ``read``,
``read1`` and ``read_chunked`` methods of that one ``urllib3`` response object (every way of
reading a requests body ends in one of them: ``content``, ``iter_content``, ``iter_lines``,
``raw.read``, ``raw.stream``). Every byte is hashed, the first 8192 are kept, and each piece
handed out is one chunk boundary (section 4.5). The exchange is finished when the body has
been read to its end, when a read raises (the response then carries an ``error`` next to what
was read), or when the response is closed or garbage collected before its end (an abandoned
stream: the exchange holds exactly the bytes the application read).

What is kept while the call runs is raw and cheap, in one :class:`RecordedCall`: the method
and URL strings of the prepared request (strings never change, so the recorded URL is worked
out later), copies of the two header stores, the status, the request body's tap and the
response body's pieces (``bytes`` by reference: a body tap is made from them only when the
exchange is built, or when they pass ``_HOLD_LIMIT``). The exchange
itself (recorded URL, bounded headers and bodies, content types, ``resource`` and ``key``) is
built from those only when the pipeline wants it
(:meth:`~reproit_otel.capture.recording.ExchangeRecorder.finish_deferred`), which for a capture is
only when the operation fails. Nothing built later reads the live request or response, so
what is recorded is what was seen when it was seen.

The reads of one response go through one small :class:`_BodyReads` object whose bound
methods are set on that response; it is taken off again when the recording finishes, so a
response read to its end or closed leaves no reference cycle behind.

Finalizers and locks. A stream the application drops before its end is freed by the cyclic
garbage collector, which runs the response's finalizer (``io``'s implicit ``close()``, our
tap) and :meth:`_BodyReads.__del__` on whichever thread allocates, possibly one inside a
locked section of the pipeline (a trace being built, the processor evicting). Neither
finishes the exchange there: both pass the finish to
:func:`reproit_otel.capture.recording.hand_over` (a lock-free deque), and the next hook settles
it (the rule is written out in ``capture/recording.py``). A ``close()`` is told to come from
the collector by the weak reference to the response: the collector clears weak references
to what it is about to finalize before it runs any finalizer, while a ``close()`` the
application makes finds it alive. This module
takes no lock: a response that ends in two threads at once (a read and a close) is finished
once through a one-item token that ``list.pop`` (atomic) hands to exactly one of them.

Where the parts live: the body taps and the request body observers are
:mod:`._requests_body`, the response's read taps (:class:`_BodyReads`) are
:mod:`._requests_reads`; this module holds the call and builds its exchange.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypedDict
from urllib.parse import urlsplit

from requests.structures import CaseInsensitiveDict
from urllib3.response import HTTPResponse

from reproit_otel._guard import absorb, guarded
from reproit_otel.capture.recording import ExchangeRecorder, Unrecordable
from reproit_otel.instrumentation._exceptions import exception_type_name
from reproit_otel.instrumentation._requests_body import (
    _HOLD_LIMIT,
    _KEPT,
    BodyTap,
    _observe_request_body,
)
from reproit_otel.instrumentation._requests_reads import _BodyReads, _drained
from reproit_otel.redaction.body import redact_text_body
from reproit_otel.redaction.core import redact_url
from reproit_otel.redaction.text import scrub_text
from reproit_otel.wire.bounds import (
    bounded_body,
    bounded_headers,
    is_event_stream,
)
from reproit_otel.wire.exact_body import EXACT_BYTES_FIELD
from reproit_otel.wire.urls import url_path_and_query

__all__ = [
    "BodyTap",
    "ErrorFields",
    "RecordedCall",
    "describe_error",
    "effect_key",
    "recorded_url",
    "resource_of",
]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


class ErrorFields(TypedDict):
    """``response.error`` of an exchange whose call raised instead of answering."""

    type: str
    """``<module>.<qualname>`` of the exception class, e.g. ``requests.exceptions.ReadTimeout``."""
    message: str
    """``str(exception)``."""


def describe_error(error: BaseException) -> ErrorFields:
    """The ``error`` object recorded for ``error``."""
    try:
        message = str(error)
    except Exception:  # a broken __str__ must not lose the exchange
        message = repr(error)
    # The message names the URL it failed on: redact it as the recorded URL is.
    return {"type": exception_type_name(error), "message": scrub_text(message)}


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def recorded_url(url: str | bytes | None) -> str:
    """The URL as recorded and matched: a password in the user info, a user name standing
    alone there (a token) and secret query and fragment values replaced by ``$reproit``
    (decision D8). Nothing else about the text changes."""
    return redact_url(_text(url or ""))


def resource_of(url: str) -> str:
    """The effect ``resource``: the host, with its port when the URL names a non-default one
    (WHATWG ``URL.host``)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        return f"{host}:{port}"
    return host


def effect_key(method: str, url: str) -> str:
    """The effect ``key``: ``METHOD path?query`` of the recorded (redacted) URL."""
    return f"{method} {url_path_and_query(url)}"


# ------------------------------------------------------------------------------ headers

# A header snapshot is either a copy of a CaseInsensitiveDict's store (the content type is then
# looked up in it when the exchange is built: _FROM_STORE) or, for any other mapping, the list
# of its items with the content type read at once.
_FROM_STORE: Any = object()


def _header_items(headers: Any) -> list[tuple[Any, Any]]:
    """A snapshot of a header mapping's items, as they are now."""
    if type(headers) is CaseInsensitiveDict:
        # What its items() yields, without a lookup per name: ``_store`` maps each lowercased
        # name to the (name as set, value) pair.
        return list(headers._store.values())  # type: ignore[attr-defined]
    return list((headers or {}).items())


def _other_headers(headers: Any) -> tuple[list[tuple[Any, Any]], str | None]:
    """The snapshot of a header mapping that is not requests' own: its items and content type."""
    return _header_items(headers), _content_type(headers)


def _headers_of(snapshot: Any, content_type: Any) -> tuple[Iterable[tuple[Any, Any]], str | None]:
    """The header items and the content type of a snapshot."""
    if content_type is _FROM_STORE:
        # CaseInsensitiveDict.get("content-type") reads _store["content-type"][1].
        pair = snapshot.get("content-type")
        return snapshot.values(), _content_type_value(None if pair is None else pair[1])
    return snapshot, content_type


def _content_type(headers: Any) -> str | None:
    return _content_type_value((headers or {}).get("content-type"))


def _content_type_value(value: Any) -> str | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return value if isinstance(value, str) else None


def _header_pairs(items: Iterable[tuple[Any, Any]]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for name, value in items:
        text = value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else value
        pairs.append((_text(name), text))
    return pairs


# ------------------------------------------------------------------------------ the call


class RecordedCall:
    """One ``HTTPAdapter.send`` being recorded: what was seen of it, and its exchange.

    :meth:`begin` takes the request's snapshots; then exactly one of :meth:`failed` (the
    transport raised) or :meth:`responded` follows. The exchange is handed to the recorder
    once: at once for a transport error, when the body ends for a response.
    """

    __slots__ = (
        "_done",
        "_error",
        "_method",
        "_pieces",
        "_reads",
        "_recorder",
        "_request_body",
        "_request_headers",
        "_request_type",
        "_response_body",
        "_response_headers",
        "_response_type",
        "_size",
        "_status",
        "_unfinished",
        "_url",
    )

    _recorder: ExchangeRecorder | None
    _method: Any
    _url: Any
    _request_headers: Any
    _request_type: Any
    _request_body: BodyTap | None
    _status: int | None
    _response_headers: Any
    _response_type: Any
    _response_body: BodyTap | None
    _pieces: list[bytes]
    _size: int
    _error: ErrorFields | None
    _reads: _BodyReads | None
    _done: bool
    _unfinished: list[bool]

    @property
    def resource(self) -> str:
        """The effect ``resource`` of this call (see :func:`resource_of`)."""
        return resource_of(recorded_url(self._url))

    @property
    def key(self) -> str:
        """The effect ``key`` of this call (see :func:`effect_key`)."""
        return effect_key(_text(self._method or ""), recorded_url(self._url))

    @classmethod
    def begin(cls, recorder: ExchangeRecorder, prepared: Any) -> RecordedCall:
        """Start recording ``prepared``; its body may be swapped for a pass-through.

        The caller gives the prepared request its own body back once the transport is done
        with it (redirects and hooks see it); the call keeps nothing of the request itself.
        """
        # The class has no __init__: every call is set up here, in the one place it starts.
        call = cls()
        # Let go of at the hand-over: the operation keeps this call, and must not keep the
        # recorder's binding to itself through it.
        call._recorder = recorder
        # Strings do not change: the recorded URL and method text are worked out when built.
        call._method = prepared.method
        call._url = prepared.url
        headers = prepared.headers
        if headers.__class__ is CaseInsensitiveDict:
            call._request_headers = headers._store.copy()  # type: ignore[attr-defined]
            call._request_type = _FROM_STORE
        else:
            call._request_headers, call._request_type = _other_headers(headers)
        call._request_body = None
        call._status = None
        call._response_headers = None
        call._response_type = None
        # The response body's pieces are held here until a tap is needed (see _add).
        call._response_body = None
        call._pieces = []
        call._size = 0
        call._error = None
        call._reads = None
        call._done = False
        # "Finish once" in one step with no lock: a body can end in two threads at once (a
        # read and a close), and whoever pops the token finishes (list.pop is atomic).
        call._unfinished = [True]
        body = prepared.body
        if body is not None:
            tap = call._request_body = BodyTap()
            prepared.body = _observe_request_body(body, tap)
        return call

    def failed(self, error: BaseException) -> None:
        """The transport raised ``error``: record it as the response."""
        self._error = describe_error(error)
        self._unfinished.clear()
        self._done = True
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.finish_deferred("call", self._build, self._held())

    def responded(self, response: Any) -> None:
        """A response came back: record it as the application reads its body."""
        try:
            raw = response.raw
        except AttributeError:
            raw = None
        self._status = int(response.status_code)
        headers = response.headers
        if headers.__class__ is CaseInsensitiveDict:
            self._response_headers = headers._store.copy()  # type: ignore[attr-defined]
            self._response_type = _FROM_STORE
        else:
            self._response_headers, self._response_type = _other_headers(headers)
        if raw is None or not (
            (raw.__class__ is HTTPResponse and "read" not in raw.__dict__)
            or callable(getattr(raw, "read", None))
        ):
            self.finish()  # not a urllib3 body: nothing the application can read
            return
        try:  # _exhausted(raw), its first step inline: an open body is the usual answer
            closed = raw.closed
        except Exception:
            closed = False
        if closed and _drained(raw):
            self.finish()
        else:
            self._reads = _BodyReads(self, raw)

    def finish(self, error: BaseException | None = None) -> None:
        """The body ended (or broke off with ``error``): hand the exchange over, once."""
        try:
            self._unfinished.pop()
        except IndexError:
            return
        self._done = True
        recorder, self._recorder = self._recorder, None
        reads, self._reads = self._reads, None
        if recorder is None:
            return
        try:
            if reads is not None:
                reads.untap()
            try:
                if error is not None:
                    self._error = describe_error(error)
                # _held(), inline: every recorded call finishes here.
                tap = self._response_body
                size = self._size if tap is None else tap.size
                held = size if size < _KEPT else _KEPT
                request = self._request_body
                if request is not None:
                    held += request.kept_size()
                recorder.finish_deferred("call", self._build, held)
            except BaseException:
                recorder.fail("the response could not be recorded")
                raise
        except Exception as exc:  # called from inside the application's reads
            absorb("requests.record_body", exc)

    def _held(self) -> int:
        """About how many bytes the snapshots keep: the kept body bytes (the capture budget
        counts them; headers and the URL are small and bounded)."""
        request = self._request_body
        tap = self._response_body
        size = self._size if tap is None else tap.size
        return (size if size < _KEPT else _KEPT) + (0 if request is None else request.kept_size())

    def _add(self, data: Any) -> None:
        """Account for one piece of the response body.

        ``bytes`` pieces are held by reference in the call itself while they total at most
        ``_HOLD_LIMIT`` (most bodies: a healthy request then makes no tap); the first piece of
        another kind, or past that size, moves them into the tap (:meth:`_tap`), which then
        takes every piece, exactly as if it had been given each from the start.
        """
        tap = self._response_body
        if tap is None:
            if data.__class__ is bytes:
                size = self._size + len(data)
                if size <= _HOLD_LIMIT:
                    if size != self._size:  # an empty piece is not a piece (BodyTap.add)
                        self._pieces.append(data)
                        self._size = size
                    return
            tap = self._tap()
        tap.add(data)

    def _tap(self) -> BodyTap:
        """The response body's tap, given the pieces held so far (made at the first need)."""
        tap = self._response_body
        if tap is None:
            tap = BodyTap(boundaries=True)
            for piece in self._pieces:
                tap.add(piece)
            self._pieces = []
            self._response_body = tap
        return tap

    def _build(self) -> tuple[str, str, dict[str, Any]]:
        """``(resource, key, exchange)`` of the call, from the snapshots alone."""
        with guarded("requests.build_exchange"):
            method = _text(self._method or "")
            url = recorded_url(self._url)
            items, content_type = _headers_of(self._request_headers, self._request_type)
            request = request_fields(
                method, url, _header_pairs(items), content_type, self._request_body
            )
            exchange = {"protocol": "http", "request": request, "response": self._response()}
            return resource_of(url), effect_key(method, url), exchange
        raise Unrecordable("the exchange could not be recorded")

    def _response(self) -> dict[str, Any]:
        if self._status is None:  # the transport raised: its error is the response
            return {"error": self._error}
        items, content_type = _headers_of(self._response_headers, self._response_type)
        return response_fields(
            self._status, _header_pairs(items), content_type, self._tap(), self._error
        )


def request_fields(
    method: str,
    url: str,
    pairs: list[tuple[str, str]],
    content_type: str | None,
    body: BodyTap | None,
) -> dict[str, Any]:
    """An HTTP exchange's ``request`` (PROTOCOL 4.1) from a recorder's snapshots: the
    bounded headers with URL-valued ones redacted, and the bounded body redacted by the
    names inside it. Shared by the requests and httpx recorders."""
    request: dict[str, Any] = {"method": method, "url": url}
    request.update(_url_headers_redacted(bounded_headers(pairs)))
    if body is None:
        request.update(bounded_body(None, content_type))
    else:
        request.update(_text_body_redacted(body.fields(content_type), content_type))
    return request


def response_fields(
    status: int,
    pairs: list[tuple[str, str]],
    content_type: str | None,
    tap: BodyTap,
    error: ErrorFields | None,
) -> dict[str, Any]:
    """An HTTP exchange's ``response`` (PROTOCOL 4.1, 4.5) from a recorder's snapshots: the
    status, the bounded headers, the body (its exact bytes dropped when redaction changed
    it, since they would still hold what was redacted), the chunk boundaries, and the read
    error next to them. Shared by the requests and httpx recorders."""
    response: dict[str, Any] = {"status": status}
    response.update(_url_headers_redacted(bounded_headers(pairs)))
    body = tap.fields(content_type, exact=True)
    text = body.get("body")
    body = _text_body_redacted(body, content_type)
    if body.get("body") != text:
        body.pop(EXACT_BYTES_FIELD, None)
    response.update(body)
    if "body" in body:
        stream = tap.stream(is_event_stream(content_type))
        if stream is not None:
            response["stream"] = stream
    if error is not None:
        response["error"] = error
    return response


# Headers whose value is a URL: an OAuth redirect carries its token in the Location fragment.
_URL_HEADERS = ("location", "content-location", "referer")


def _url_headers_redacted(fields: dict[str, Any]) -> dict[str, Any]:
    """Bounded header fields with every URL-valued header redacted like a recorded URL."""
    headers = fields.get("headers")
    if not headers:
        return fields
    for name in _URL_HEADERS:
        value = headers.get(name)
        if isinstance(value, str):
            headers[name] = redact_url(value)
    return fields


def _text_body_redacted(fields: dict[str, Any], content_type: str | None) -> dict[str, Any]:
    """Bounded body fields with a form or JSON text body redacted by the names inside it."""
    if "body" in fields:
        fields["body"] = redact_text_body(fields["body"], content_type)
    return fields
