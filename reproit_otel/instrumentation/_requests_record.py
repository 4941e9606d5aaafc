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

What is kept while the call runs is raw and cheap: the method, the recorded URL, snapshots of
the header lists, the status, the content types and the two body taps. The exchange itself
(bounded headers and bodies, ``resource`` and ``key`` from the URL) is built from those only
when the pipeline wants it (:meth:`~reproit_otel.recording.ExchangeRecorder.finish_deferred`),
which for a capture is only when the operation fails. Nothing built later reads the live
request or response, so what is recorded is what was seen when it was seen.
"""

from __future__ import annotations

import functools
import hashlib
import io
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypedDict
from urllib.parse import urlsplit, urlunsplit

from requests.structures import CaseInsensitiveDict

from reproit_otel._guard import guarded
from reproit_otel.instrumentation._exceptions import exception_type_name
from reproit_otel.recording import ExchangeRecorder, Unrecordable
from reproit_otel.wire._js import utf8_bytes
from reproit_otel.wire.bounds import (
    MAX_BODY_BYTES,
    StreamBoundaries,
    bounded_body,
    bounded_headers,
    is_event_stream,
)
from reproit_otel.wire.redaction import redact_url
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
    return {"type": exception_type_name(error), "message": message}


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def recorded_url(url: str | bytes | None) -> str:
    """The URL as recorded and matched: no password in the user info, secret query values
    replaced by ``$reproit`` (decision D8). Nothing else about the text changes."""
    text = _text(url or "")
    try:
        parts = urlsplit(text)
    except ValueError:
        return redact_url(text)
    if parts.password is not None:
        user, _, host = parts.netloc.rpartition("@")
        name = user.partition(":")[0]
        text = urlunsplit(parts._replace(netloc=f"{name}@{host}"))
    return redact_url(text)


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
    """Counts and hashes every byte given to it, keeps the first ``MAX_BODY_BYTES + 1``.

    With ``boundaries`` it also notes each piece as one stream chunk (section 4.5). The hash
    is started only once a body outgrows what is kept (until then the kept bytes are all of
    it), so small bodies are never hashed.
    """

    __slots__ = ("_kept", "_sha", "boundaries", "size")

    def __init__(self, *, boundaries: bool = False) -> None:
        self._sha: Any = None
        self._kept = bytearray()
        self.size = 0
        self.boundaries = StreamBoundaries() if boundaries else None

    def add(self, data: bytes | bytearray | memoryview | str) -> None:
        """Account for one piece (a ``str`` counts as its UTF-8 bytes)."""
        piece = utf8_bytes(data) if isinstance(data, str) else bytes(data)
        if not piece:
            return
        if self._sha is None and self.size + len(piece) > MAX_BODY_BYTES + 1:
            self._sha = hashlib.sha256(self._kept)  # the kept bytes are everything so far
        if self._sha is not None:
            self._sha.update(piece)
        self.size += len(piece)
        room = MAX_BODY_BYTES + 1 - len(self._kept)
        if room > 0:
            self._kept += piece[:room]
        if self.boundaries is not None:
            self.boundaries.add(len(piece))

    def fields(self, content_type: str | None) -> dict[str, Any]:
        """The body fields of section 4.2 for everything added so far."""
        if self.size > MAX_BODY_BYTES:
            sha = self._sha if self._sha is not None else hashlib.sha256(self._kept)
            return {"bodyBytes": self.size, "bodySha256": sha.hexdigest(), "truncated": True}
        return bounded_body(bytes(self._kept) if self.size else None, content_type)


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


def _header_items(headers: Any) -> list[tuple[Any, Any]]:
    """A snapshot of a header mapping's items, as they are now."""
    if type(headers) is CaseInsensitiveDict:
        # What its items() yields, without a lookup per name: ``_store`` maps each lowercased
        # name to the (name as set, value) pair.
        return list(headers._store.values())  # type: ignore[attr-defined]
    return list((headers or {}).items())


def _header_pairs(items: Iterable[tuple[Any, Any]]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for name, value in items:
        text = value.decode("latin-1") if isinstance(value, (bytes, bytearray)) else value
        pairs.append((_text(name), text))
    return pairs


# ------------------------------------------------------------------------------ the call


class RecordedCall:
    """One ``HTTPAdapter.send`` being recorded."""

    def __init__(self, recorder: ExchangeRecorder, prepared: Any) -> None:
        self._recorder = recorder
        self._prepared: Any = prepared
        self._original_body = prepared.body
        self._body_tap = BodyTap()
        self.method = _text(prepared.method or "")
        self.url = recorded_url(prepared.url)
        self._headers = _header_items(prepared.headers)
        self._content_type = _content_type(prepared.headers)

    @property
    def resource(self) -> str:
        """The effect ``resource`` of this call (see :func:`resource_of`)."""
        return resource_of(self.url)

    @property
    def key(self) -> str:
        """The effect ``key`` of this call (see :func:`effect_key`)."""
        return effect_key(self.method, self.url)

    @classmethod
    def begin(cls, recorder: ExchangeRecorder, prepared: Any) -> RecordedCall:
        """Start recording ``prepared``; its body may be swapped for a pass-through."""
        call = cls(recorder, prepared)
        prepared.body = _observe_request_body(call._original_body, call._body_tap)
        return call

    def restore_body(self) -> None:
        """Give the prepared request its own body back (redirects and hooks see it).

        The call lets go of the prepared request (and of its body) here: what is recorded
        was taken from it already.
        """
        self._prepared.body = self._original_body
        self._prepared = None
        self._original_body = None

    def failed(self, error: BaseException) -> None:
        """The transport raised ``error``: record it as the response."""
        fields: dict[str, Any] = {"error": describe_error(error)}
        self._finish(lambda: fields)

    def responded(self, response: Any) -> None:
        """A response came back: record it as the application reads its body."""
        raw = getattr(response, "raw", None)
        recording = _ResponseRecording(self, response)
        if raw is None or not callable(getattr(raw, "read", None)):
            recording.finish()  # not a urllib3 body: nothing the application can read
            return
        _tap_raw(raw, recording)
        if _exhausted(raw):
            recording.finish()

    def _finish(self, response: Callable[[], dict[str, Any]]) -> None:
        """Hand the exchange over; it is built from the snapshots only when wanted."""
        request = _RequestSnapshot(
            self.method, self.url, self._headers, self._body_tap, self._content_type
        )
        self._recorder.finish_deferred("call", functools.partial(request.exchange, response))

    def abandon(self, reason: str) -> None:
        """Our own code failed: the operation is told this call could not be recorded."""
        self._recorder.fail(reason)


def _content_type(headers: Any) -> str | None:
    value = (headers or {}).get("content-type")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return value if isinstance(value, str) else None


# The weak references that finish a response's recording when it is collected (see watch).
_watches: set[weakref.ref[Any]] = set()


class _ResponseRecording:
    """The response half: accumulates the body the application reads, finishes once."""

    def __init__(self, call: RecordedCall, response: Any) -> None:
        self._call = call
        self._lock = threading.Lock()
        self._done = False
        self._tap = BodyTap(boundaries=True)
        self._status = int(response.status_code)
        self._headers = _header_items(response.headers)
        self._content_type = _content_type(response.headers)
        self._watch: weakref.ref[Any] | None = None
        self._untap: Callable[[], None] | None = None

    def on_finish(self, untap: Callable[[], None]) -> None:
        """Call ``untap`` when the recording finishes (it removes the response's taps)."""
        self._untap = untap

    def watch(self, raw: Any) -> None:
        """Finish when ``raw`` is collected before its end (an unread, unclosed stream).

        The weak reference is held by a module-level set (so its callback runs even when the
        response, its taps and this recording are collected together as one cycle) and by
        this recording, until :meth:`finish` lets go of it.
        """
        self._watch = weakref.ref(raw, self._collected)
        _watches.add(self._watch)

    def _collected(self, _ref: object) -> None:
        self.finish()

    def add(self, data: bytes) -> None:
        # Called from inside the application's reads: never let a defect of ours reach them.
        with guarded("requests.record_body"), self._lock:
            if not self._done:
                self._tap.add(data)

    def finish(self, error: BaseException | None = None) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            if self._watch is not None:
                _watches.discard(self._watch)
                self._watch = None
            untap, self._untap = self._untap, None
        with guarded("requests.record_body"):
            if untap is not None:
                untap()
            self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        try:
            fields = functools.partial(
                _response_fields,
                self._status,
                self._headers,
                self._tap,
                self._content_type,
                None if error is None else describe_error(error),
            )
            self._call._finish(fields)
        except BaseException:
            self._call.abandon("the response could not be recorded")
            raise


# The builders below run when the exchange is wanted; they see only the snapshots.


class _RequestSnapshot:
    """What was seen of the request: enough to build the exchange later."""

    __slots__ = ("body", "content_type", "headers", "method", "url")

    def __init__(
        self,
        method: str,
        url: str,
        headers: list[tuple[Any, Any]],
        body: BodyTap,
        content_type: str | None,
    ) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.content_type = content_type

    def exchange(self, response: Callable[[], dict[str, Any]]) -> tuple[str, str, dict[str, Any]]:
        """``(resource, key, exchange)`` of the call, with ``response()`` as its response."""
        with guarded("requests.build_exchange"):
            request: dict[str, Any] = {"method": self.method, "url": self.url}
            request.update(bounded_headers(_header_pairs(self.headers)))
            request.update(self.body.fields(self.content_type))
            exchange = {"protocol": "http", "request": request, "response": response()}
            return resource_of(self.url), effect_key(self.method, self.url), exchange
        raise Unrecordable("the exchange could not be recorded")


def _response_fields(
    status: int,
    headers: list[tuple[Any, Any]],
    tap: BodyTap,
    content_type: str | None,
    error: ErrorFields | None,
) -> dict[str, Any]:
    response: dict[str, Any] = {"status": status}
    response.update(bounded_headers(_header_pairs(headers)))
    body = tap.fields(content_type)
    response.update(body)
    if "body" in body and tap.boundaries is not None:
        stream = tap.boundaries.result(is_event_stream(content_type))
        if stream is not None:
            response["stream"] = stream
    if error is not None:
        response["error"] = error
    return response


def _exhausted(raw: Any) -> bool:
    """True when nothing is left to read from the urllib3 response ``raw``."""
    try:
        if not raw.closed:
            return False
    except Exception:
        return False
    buffered = getattr(raw, "_decoded_buffer", None)
    if buffered is not None and len(buffered) > 0:
        return False
    decoder = getattr(raw, "_decoder", None)
    return not (decoder is not None and getattr(decoder, "has_unconsumed_tail", False))


class _ReadState:
    """Whether a read of the response is under way (urllib3 closes itself inside reads)."""

    __slots__ = ("close_pending", "depth")

    def __init__(self) -> None:
        self.depth = 0
        self.close_pending = False


def _tap_raw(raw: Any, recording: _ResponseRecording) -> None:
    """Route the body reads of this one urllib3 response through ``recording``.

    Only instance attributes are set: the class, other responses and the bytes the
    application receives stay exactly as they were. A ``close()`` that urllib3 makes inside
    a read (it does before raising a protocol error) is settled by that read, so the error is
    recorded with the exchange.

    The taps hold ``raw`` (they call its own methods), so while they are set ``raw`` is part
    of a reference cycle. The recording removes them when it finishes, which gives ``raw``
    back its own methods and lets reference counting free it; only a stream that is neither
    read to its end nor closed is left to the cyclic collector (and recorded when collected).
    """
    state = _ReadState()

    def settle(data: bytes | None, amt: Any) -> None:
        if data:
            recording.add(data)
        if state.close_pending or (not data and amt != 0) or _exhausted(raw):
            recording.finish()

    def reading(method: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any, **kwargs: Any) -> Any:
            if state.depth:  # a read inside a read: the outer one records
                return method(*args, **kwargs)
            state.depth += 1
            try:
                data = method(*args, **kwargs)
            except Exception as error:
                recording.finish(error)
                raise
            finally:
                state.depth -= 1
            settle(data, args[0] if args else kwargs.get("amt"))
            return data

        return read

    original_chunked = raw.read_chunked if callable(getattr(raw, "read_chunked", None)) else None

    def read_chunked(*args: Any, **kwargs: Any) -> Iterator[bytes]:
        assert original_chunked is not None
        pieces = original_chunked(*args, **kwargs)
        try:
            while True:
                state.depth += 1
                try:
                    piece = next(pieces)
                except StopIteration:
                    break
                except Exception as error:
                    recording.finish(error)
                    raise
                finally:
                    state.depth -= 1
                if piece:
                    recording.add(piece)
                yield piece
        finally:
            pieces.close()  # the reader stopped early: close() or garbage collection finishes
        recording.finish()

    original_close = raw.close

    def close() -> None:
        try:
            original_close()
        finally:
            if state.depth:
                state.close_pending = True
            else:
                recording.finish()

    taps: dict[str, Callable[..., Any]] = {"read": reading(raw.read)}
    if callable(getattr(raw, "read1", None)):
        taps["read1"] = reading(raw.read1)
    if original_chunked is not None:
        taps["read_chunked"] = read_chunked
    taps["close"] = close
    own = vars(raw)
    # What untap needs, without holding ``raw`` or the taps (the recording it is handed to
    # must not keep the response alive): a weak reference and the taps' identities.
    previous = {name: own[name] for name in taps if name in own}
    tap_ids = {name: id(tap) for name, tap in taps.items()}
    raw_ref = weakref.ref(raw)
    own.update(taps)
    del own

    def untap() -> None:
        target = raw_ref()
        if target is None:
            return
        attributes = vars(target)
        for name, tap_id in tap_ids.items():
            if id(attributes.get(name)) == tap_id:
                if name in previous:
                    attributes[name] = previous[name]
                else:
                    del attributes[name]

    recording.on_finish(untap)
    # A stream the application neither finishes nor closes is recorded when it is collected.
    recording.watch(raw)
