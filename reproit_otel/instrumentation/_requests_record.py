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
out later), copies of the two header stores, the status and the two body taps. The exchange
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
"""

from __future__ import annotations

import hashlib
import io
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypedDict
from urllib.parse import urlsplit

from requests.structures import CaseInsensitiveDict
from urllib3.response import HTTPResponse

from reproit_otel._guard import absorb, guarded
from reproit_otel.capture.recording import ExchangeRecorder, Unrecordable, hand_over
from reproit_otel.instrumentation._exceptions import exception_type_name
from reproit_otel.wire._js import utf8_bytes
from reproit_otel.wire.body_redaction import redact_text_body
from reproit_otel.wire.bounds import (
    MAX_BODY_BYTES,
    MAX_STREAM_CHUNKS,
    StreamBoundaries,
    StreamFields,
    bounded_body,
    bounded_headers,
    is_event_stream,
)
from reproit_otel.wire.exact_body import EXACT_BYTES_FIELD, exact_body
from reproit_otel.wire.redaction import redact_url, redact_urls_in_text
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

_READ_BLOCK = 65536
_KEPT = MAX_BODY_BYTES + 1  # bytes of a body kept: one more than fits tells "too big"
# Bytes of a body a tap holds by reference before it folds them as they come: a 64 KiB
# answer read whole costs a healthy request no copy and no hash; a long stream stays bounded.
_HOLD_LIMIT = 128 * 1024
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
    return {"type": exception_type_name(error), "message": redact_urls_in_text(message)}


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


class BodyTap:
    """Counts every byte given to it; keeps the first ``MAX_BODY_BYTES + 1`` and hashes the
    whole body when the body fields are asked for.

    The pieces are held by reference (a ``bytes`` piece cannot change; any other kind is
    copied) and folded into the kept prefix and the SHA-256 only by :meth:`fields`, which runs
    when a failing operation is built: a healthy request never copies or hashes its bodies, so
    its cost does not grow with their size. Past ``_HOLD_LIMIT`` bytes the pieces are folded
    as they arrive, so a tap never holds more than that. Small bodies are never hashed (the
    kept bytes are all of them).

    With ``boundaries`` it also notes each piece as one stream chunk (section 4.5): the
    lengths of the first ``MAX_STREAM_CHUNKS`` pieces are kept, later pieces only counted.
    """

    __slots__ = ("_chunks", "_folded", "_held", "_kept", "_pieces", "_sha", "size")

    def __init__(self, *, boundaries: bool = False) -> None:
        self._sha: Any = None
        self._kept = bytearray()
        self._held: list[bytes] = []
        self._folded = 0  # bytes already folded into the kept prefix and the hash
        self.size = 0
        self._chunks: list[int] | None = [] if boundaries else None
        self._pieces = 0

    def add(self, data: bytes | bytearray | memoryview | str) -> None:
        """Account for one piece (a ``str`` counts as its UTF-8 bytes)."""
        if data.__class__ is bytes:
            piece: Any = data
        else:
            piece = utf8_bytes(data) if isinstance(data, str) else bytes(data)
        count = len(piece)
        if not count:
            return
        total = self.size + count
        self.size = total
        self._held.append(piece)
        if total > _HOLD_LIMIT:
            self._fold()
        chunks = self._chunks
        if chunks is not None:
            self._pieces += 1
            if self._pieces <= MAX_STREAM_CHUNKS:
                chunks.append(count)

    def kept_size(self) -> int:
        """How many bytes the built body keeps: the first ``MAX_BODY_BYTES + 1`` at most (the
        pieces held until then are not counted: they are dropped with the operation)."""
        size = self.size
        return size if size < _KEPT else _KEPT

    def _fold(self) -> None:
        """Fold the held pieces, in order, into the kept prefix and the hash."""
        held = self._held
        if not held:
            return
        self._held = []
        kept = self._kept
        sha = self._sha
        seen = self._folded
        for piece in held:
            total = seen + len(piece)
            if total > _KEPT:
                if sha is None:  # the kept bytes are everything so far
                    sha = self._sha = hashlib.sha256(kept)
                sha.update(piece)
            if seen < _KEPT:  # the kept bytes are the first min(size, _KEPT) bytes
                kept += piece[: _KEPT - seen]
            seen = total
        self._folded = seen

    def fields(self, content_type: str | None, *, exact: bool = False) -> dict[str, Any]:
        """The body fields of section 4.2 for everything added so far.

        ``exact`` (response bodies) records them so that a replay serves these very bytes
        (:func:`~reproit_otel.wire.exact_body.exact_body`).
        """
        self._fold()
        if self.size > MAX_BODY_BYTES:
            sha = self._sha if self._sha is not None else hashlib.sha256(self._kept)
            return {"bodyBytes": self.size, "bodySha256": sha.hexdigest(), "truncated": True}
        if exact:
            return exact_body(bytes(self._kept), content_type)
        return bounded_body(bytes(self._kept) if self.size else None, content_type)

    def stream(self, event_stream: bool) -> StreamFields | None:
        """The ``stream`` field of the pieces added so far (``None``: no boundaries kept)."""
        if self._chunks is None:
            return None
        boundaries = StreamBoundaries()
        for length in self._chunks:
            boundaries.add(length)
        for _ in range(self._pieces - len(self._chunks)):
            boundaries.add(0)  # past the cap a piece is only counted, whatever its length
        return boundaries.result(event_stream)


# ------------------------------------------------------------------------------ request body


class _TeeReader(io.RawIOBase):
    """An unseekable file handed to the transport: records what it reads, gives bytes."""

    def __init__(self, source: Any, tap: BodyTap) -> None:
        super().__init__()
        self._source = source
        self._tap = tap

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        data = self._source.read() if size is None or size < 0 else self._source.read(size)
        if isinstance(data, str):
            data = utf8_bytes(data)  # what urllib3 sends for a text file
        data = bytes(data or b"")
        self._tap.add(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _tee_iterable(source: Iterable[Any], tap: BodyTap) -> Iterator[Any]:
    """Yields ``source``'s pieces unchanged, recording each as the transport pulls it."""
    for piece in source:
        if isinstance(piece, (bytes, bytearray, memoryview, str)):
            tap.add(piece)
        yield piece


def _read_and_rewind(source: Any, tap: BodyTap) -> bool:
    """Read a seekable file to its end into ``tap`` and seek back; False if it cannot seek."""
    try:
        if not source.seekable():
            return False
        position = source.tell()
    except (AttributeError, OSError, ValueError):
        return False
    try:
        while True:
            block = source.read(_READ_BLOCK)
            if not block:
                break
            tap.add(block)
    finally:
        source.seek(position)
    return True


def _observe_request_body(body: Any, tap: BodyTap) -> Any:
    """Record what ``body`` will send; return what the transport must be given instead."""
    if body is None:
        return body
    if isinstance(body, (str, bytes, bytearray)):
        tap.add(body)
        return body
    if hasattr(body, "read"):
        if _read_and_rewind(body, tap):
            return body
        return _TeeReader(body, tap)
    if isinstance(body, (list, tuple)):
        for piece in body:  # re-iterable: reading it takes nothing away
            if isinstance(piece, (bytes, bytearray, memoryview, str)):
                tap.add(piece)
        return body
    try:
        view = memoryview(body)
    except TypeError:
        return _tee_iterable(body, tap)
    tap.add(view)
    return body


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
        "_reads",
        "_recorder",
        "_request_body",
        "_request_headers",
        "_request_type",
        "_response_body",
        "_response_headers",
        "_response_type",
        "_status",
        "_unfinished",
        "_url",
    )

    def __init__(self, recorder: ExchangeRecorder, prepared: Any) -> None:
        # Let go of at the hand-over: the operation keeps this call, and must not keep the
        # recorder's binding to itself through it.
        self._recorder: ExchangeRecorder | None = recorder
        # Strings do not change: the recorded URL and method text are worked out when built.
        self._method: Any = prepared.method
        self._url: Any = prepared.url
        headers = prepared.headers
        if headers.__class__ is CaseInsensitiveDict:
            self._request_headers: Any = headers._store.copy()  # type: ignore[attr-defined]
            self._request_type: Any = _FROM_STORE
        else:
            self._request_headers, self._request_type = _other_headers(headers)
        self._request_body: BodyTap | None = None
        self._status: int | None = None
        self._response_headers: Any = None
        self._response_type: Any = None
        self._response_body = BodyTap(boundaries=True)
        self._error: ErrorFields | None = None
        self._reads: _BodyReads | None = None
        self._done = False
        # "Finish once" in one step with no lock: a body can end in two threads at once (a
        # read and a close), and whoever pops the token finishes (list.pop is atomic).
        self._unfinished = [True]

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
        call = cls(recorder, prepared)
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
        elif _exhausted(raw):
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
                recorder.finish_deferred("call", self._build, self._held())
            except BaseException:
                recorder.fail("the response could not be recorded")
                raise
        except Exception as exc:  # called from inside the application's reads
            absorb("requests.record_body", exc)

    def _held(self) -> int:
        """About how many bytes the snapshots keep: the kept body bytes (the capture budget
        counts them; headers and the URL are small and bounded)."""
        request = self._request_body
        return self._response_body.kept_size() + (0 if request is None else request.kept_size())

    def _build(self) -> tuple[str, str, dict[str, Any]]:
        """``(resource, key, exchange)`` of the call, from the snapshots alone."""
        with guarded("requests.build_exchange"):
            method = _text(self._method or "")
            url = recorded_url(self._url)
            items, content_type = _headers_of(self._request_headers, self._request_type)
            request: dict[str, Any] = {"method": method, "url": url}
            request.update(_url_headers_redacted(bounded_headers(_header_pairs(items))))
            body = self._request_body
            if body is None:
                request.update(bounded_body(None, content_type))
            else:
                request.update(_text_body_redacted(body.fields(content_type), content_type))
            exchange = {"protocol": "http", "request": request, "response": self._response()}
            return resource_of(url), effect_key(method, url), exchange
        raise Unrecordable("the exchange could not be recorded")

    def _response(self) -> dict[str, Any]:
        if self._status is None:  # the transport raised: its error is the response
            return {"error": self._error}
        response: dict[str, Any] = {"status": self._status}
        items, content_type = _headers_of(self._response_headers, self._response_type)
        response.update(_url_headers_redacted(bounded_headers(_header_pairs(items))))
        tap = self._response_body
        body = tap.fields(content_type, exact=True)
        text = body.get("body")
        body = _text_body_redacted(body, content_type)
        if body.get("body") is not text:  # redacted: the exact bytes would still hold it
            body.pop(EXACT_BYTES_FIELD, None)
        response.update(body)
        if "body" in body:
            stream = tap.stream(is_event_stream(content_type))
            if stream is not None:
                response["stream"] = stream
        if self._error is not None:
            response["error"] = self._error
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


def _exhausted(raw: Any) -> bool:
    """True when nothing is left to read from the urllib3 response ``raw``."""
    try:
        if not raw.closed:
            return False
    except Exception:
        return False
    try:
        buffered = raw._decoded_buffer
    except AttributeError:
        buffered = None
    if buffered is not None and len(buffered) > 0:
        return False
    try:
        decoder = raw._decoder
    except AttributeError:
        return True
    return not (decoder is not None and getattr(decoder, "has_unconsumed_tail", False))


class _BodyReads:
    """The body reads of one urllib3 response, recorded into its :class:`RecordedCall`.

    Its bound methods ``read``, ``read1``, ``read_chunked`` and ``close`` are set as instance
    attributes of that one response (the class, other responses and the bytes the application
    receives stay exactly as they were); :meth:`untap` takes them off again. A ``close()`` that
    urllib3 makes inside a read (it does before raising a protocol error) is settled by that
    read, so the error is recorded with the exchange.

    While the taps are set the response, this object and the call form a reference cycle;
    the call's finish removes the taps and lets go of this object, so reference counting
    frees the response. Only a stream neither read to its end nor closed is left to the cyclic
    collector, and the call is finished after it is collected: the response's own finalizer
    closes it and :meth:`__del__` covers any other body object, and both only hand the finish
    over (:func:`~reproit_otel.capture.recording.hand_over`), never finish on the collector's
    thread.
    """

    __slots__ = (
        "_alive",
        "_call",
        "_chunked",
        "_close",
        "_close_pending",
        "_depth",
        "_previous",
        "_raw",
        "_read",
        "_read1",
    )

    def __init__(self, call: RecordedCall, raw: Any) -> None:
        self._call = call
        self._raw = raw
        self._depth = 0  # reads under way: a read inside a read passes through
        self._close_pending = False
        self._previous: dict[str, Any] | None = None  # instance attributes the taps replaced
        try:  # dead once the collector is finalizing the response: see _collected()
            self._alive: Any = weakref.ref(raw)
        except TypeError:  # a body object without weak references: every close hands over
            self._alive = None
        own = raw.__dict__
        if raw.__class__ is HTTPResponse and not (
            "read" in own or "read1" in own or "read_chunked" in own or "close" in own
        ):
            self._read: Any = raw.read
            self._read1: Any = raw.read1
            self._chunked: Any = raw.read_chunked
            self._close: Any = raw.close
            own["read"] = self.read
            own["read1"] = self.read1
            own["read_chunked"] = self.read_chunked
            own["close"] = self.close
        else:
            self._tap_any(raw, own)

    def _tap_any(self, raw: Any, own: dict[str, Any]) -> None:
        """Set the taps on a body object of any kind (the methods it does not have are left)."""
        chunked = getattr(raw, "read_chunked", None)
        self._chunked = chunked if callable(chunked) else None
        self._close = raw.close
        self._read = raw.read
        read1 = getattr(raw, "read1", None)
        self._read1 = read1 if callable(read1) else None
        taps: dict[str, Any] = {"read": self.read}
        if self._read1 is not None:
            taps["read1"] = self.read1
        if self._chunked is not None:
            taps["read_chunked"] = self.read_chunked
        taps["close"] = self.close
        self._previous = {name: own[name] for name in taps if name in own} or None
        own.update(taps)

    def untap(self) -> None:
        """Give the response its own methods back (or what was set on it before the taps)."""
        own = self._raw.__dict__
        previous = self._previous
        for name, tap in (
            ("read", self.read),
            ("read1", self.read1),
            ("read_chunked", self.read_chunked),
            ("close", self.close),
        ):
            if name in own and own[name] == tap:
                if previous is not None and name in previous:
                    own[name] = previous[name]
                else:
                    del own[name]

    def __del__(self) -> None:
        # Collected before its end: the bytes read so far are the body. A finalizer runs on
        # whatever thread allocates, maybe inside a locked section: it only hands over.
        call = self._call
        if not call._done:
            hand_over(call.finish)

    def _collected(self) -> bool:
        """True when the collector is finalizing the response: it clears the weak references
        to what it finalizes before running any finalizer."""
        alive = self._alive
        return alive is None or alive() is None

    def read(self, *args: Any, **kwargs: Any) -> Any:
        return self._reading(self._read, args, kwargs)

    def read1(self, *args: Any, **kwargs: Any) -> Any:
        return self._reading(self._read1, args, kwargs)

    def _reading(
        self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """One ``read``/``read1`` of the body through ``method``, recorded."""
        call = self._call
        if self._depth or call._done:  # a read inside a read (the outer one records), or late
            return method(*args, **kwargs)
        self._depth += 1
        try:
            data = method(*args, **kwargs)
        except Exception as error:
            call.finish(error)
            raise
        finally:
            self._depth -= 1
        self._settle(data, args, kwargs)
        return data

    def _settle(self, data: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """After a read: record what it gave; finish when the body ended or was closed."""
        call = self._call
        if data:
            if not call._done:
                try:
                    call._response_body.add(data)
                except Exception as exc:  # never let a defect of ours reach the read
                    absorb("requests.record_body", exc)
            if self._close_pending or _exhausted(self._raw):
                call.finish()
        elif (
            self._close_pending
            or (args[0] if args else kwargs.get("amt")) != 0
            or _exhausted(self._raw)
        ):
            call.finish()

    def read_chunked(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        call = self._call
        pieces = self._chunked(*args, **kwargs)
        try:
            while True:
                self._depth += 1
                try:
                    piece = next(pieces)
                except StopIteration:
                    break
                except Exception as error:
                    call.finish(error)
                    raise
                finally:
                    self._depth -= 1
                if piece and not call._done:
                    try:
                        call._response_body.add(piece)
                    except Exception as exc:
                        absorb("requests.record_body", exc)
                yield piece
        finally:
            pieces.close()  # the reader stopped early: close() or garbage collection finishes
        call.finish()

    def close(self) -> None:
        try:
            self._close()
        finally:
            if self._depth:
                self._close_pending = True
            elif self._collected():  # the response's finalizer: never finish on its thread
                hand_over(self._call.finish)
            else:
                self._call.finish()
