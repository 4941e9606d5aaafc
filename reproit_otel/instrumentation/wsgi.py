"""WSGI inbound side: the request's input in, the operation's return when the response ends.

Usage, with no code change under ``opentelemetry-instrument`` (``reproit_otel.install()``
patches ``flask.Flask.__call__`` so every Flask app is wrapped, outside OpenTelemetry's own
Flask instrumentation), or explicitly for any WSGI app::

    from reproit_otel.instrumentation.wsgi import ReproitWSGIMiddleware
    app.wsgi_app = ReproitWSGIMiddleware(app.wsgi_app)  # outside OTel's wrapper if any

What it does for each request (PROTOCOL 9.1 and 9.2):

* reads a request body of at most 64 KiB, whatever its type (with a ``Content-Length``, or
  chunked when the server sets ``wsgi.input_terminated``), and hands the application the same
  bytes (from memory; a longer chunked body continues from the server's stream);
* builds the canonical input: a JSON or URL-encoded form body (``application/json`` or
  ``application/x-www-form-urlencoded``; a form becomes an object of its fields), the
  decoded query (blank values kept, repeats as lists), the lowercased headers; and the
  request as it came in (``input.request``: every header in the environ's order, the body
  bytes, see ``wire/request_record.py``);
* names the operation ``METHOD /concrete/path`` (``SCRIPT_NAME`` + ``PATH_INFO``);
* publishes both for the OpenTelemetry server span that starts inside the application call
  (the span processor begins the operation there, see ``capture/processor.py``);
* passes ``start_response`` and every body chunk on to the server as the application gives
  them, keeping a copy of the first 64 KiB; when the body ends (or as the application returns
  a body already in memory) finishes the operation with the status and the decoded JSON body
  (when complete, at most 64 KiB and JSON);
* on a trusted scan-time request only (D12), holds the response start until the body
  completes or exceeds 64 KiB, then adds ``x-reproit-events`` to its headers.

Every byte is unchanged and nothing waits on capture: the same status line, headers and body
chunks, each sent when the application yields it (server-sent events and endless streams
included). Requests without an operation (reproit-otel off, capture off and no trusted scan
header) are passed through untouched. An exception from the application or its body travels
to the server unchanged (so the server answers exactly as without reproit-otel) and finishes
the operation with status 500 (the exception is kept on the capture, ``failures.py``). A
body the server stops reading early (the client left) finishes without output. A defect of
ours leaves the request untraced (``_guard.py``).

Limits: a chunked body is read only when the server says it ends the stream
(``wsgi.input_terminated``: gunicorn, werkzeug); WSGI keeps neither the case nor the order of
header names beyond its environ, so names are recorded capitalised (``Accept-Language``); what
an application sends through the legacy ``write()`` callable is not copied (its output is
recorded as ``null``).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from types import MethodType, TracebackType
from typing import Any

from reproit_otel._guard import absorb, guarded
from reproit_otel.capture import recording
from reproit_otel.capture.inbound import (
    MAX_INBOUND_BODY,
    InboundRequest,
    current_inbound,
    decode_body,
    decode_json_body,
    is_captured_body_type,
    parse_query,
    publish_inbound,
    reset_inbound,
)
from reproit_otel.failures import note_exception
from reproit_otel.replay.session import active_session, recorded_server_address
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.inputs import http_input
from reproit_otel.wire.request_record import REQUEST_FIELD, recorded_request, title_case

__all__ = ["ReproitWSGIMiddleware", "install_flask", "uninstall_flask", "wsgi_call"]

EVENTS_HEADER = "x-reproit-events"

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _header_name(key: str) -> str | None:
    if key.startswith("HTTP_"):
        return key[5:].replace("_", "-").lower()
    if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        return key.replace("_", "-").lower()
    return None


def _environ_key(name: str) -> str:
    """The environ key of the lowercase header ``name`` (``x-a`` -> ``HTTP_X_A``)."""
    key = name.replace("-", "_").upper()
    return key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + key


def _environ_headers(environ: dict[str, Any]) -> dict[str, str]:
    """Every request header of a WSGI environ, by lowercase name."""
    headers: dict[str, str] = {}
    for key, value in environ.items():
        name = _header_name(key)
        if name is not None and isinstance(value, str):
            headers[name] = value
    return headers


def _text(value: str) -> str:
    # WSGI hands URL parts as latin-1 decoded bytes; the path is UTF-8 on the wire.
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8", "replace")
    except UnicodeEncodeError:
        return value


def _declared_length(environ: dict[str, Any]) -> int | None:
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None


def _is_chunked(environ: Mapping[str, Any]) -> bool:
    coding = environ.get("HTTP_TRANSFER_ENCODING")
    return isinstance(coding, str) and "chunked" in coding.lower()


class _ChainedInput(io.RawIOBase):
    """What the application reads after a chunked body's first bytes were read for the
    capture: those bytes, then the rest of the server's stream."""

    def __init__(self, head: bytes, rest: Any) -> None:
        super().__init__()
        self._head = io.BytesIO(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count = self._head.readinto(view)
        if count:
            return count
        data: bytes = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)


def _read_body(environ: dict[str, Any]) -> tuple[bytes | None, int | None]:
    """The request body (None when it was not read) and its declared length.

    A body of at most 64 KiB with a ``Content-Length`` is read whatever its type; a chunked
    body (no length, ``wsgi.input_terminated`` set by the server) is read up to 64 KiB. The
    application then reads the very same bytes (from memory, then from the server's stream).
    """
    length = _declared_length(environ)
    stream = environ.get("wsgi.input")
    if stream is None or length is None:
        return None, length
    if length > 0:
        if length > MAX_INBOUND_BODY:
            return None, length
        data: bytes = stream.read(length)
        environ["wsgi.input"] = io.BytesIO(data)  # the application reads the same bytes
        return data, length
    if not _is_chunked(environ) or not environ.get("wsgi.input_terminated"):
        return b"", 0
    head: bytes = b""
    while len(head) <= MAX_INBOUND_BODY:
        piece = stream.read(MAX_INBOUND_BODY + 1 - len(head))
        if not piece:
            break
        head += piece
    if len(head) > MAX_INBOUND_BODY:
        environ["wsgi.input"] = io.BufferedReader(_ChainedInput(head, stream))
        return None, None
    environ["wsgi.input"] = io.BytesIO(head)
    return head, len(head)


class _EnvironCopy(dict[str, Any]):
    """The environ as the request came in, with the request body read from it; calling it
    builds the canonical input (PROTOCOL 9.2).

    It is the request's ``input_factory``: one object kept per request, decoded only if the
    input is wanted (a failing capture, a scan request). It does not refer to the request,
    so the operation's trace may keep it. A variable the environ leaves out reads as None
    with ``copy[name]`` (PEP 3333 lets a server leave out an empty one).
    """

    __slots__ = ("body", "size")

    body: bytes | None
    size: int | None

    def __missing__(self, key: str) -> None:
        return None

    def __call__(self) -> dict[str, Any]:
        content_type = self.get("CONTENT_TYPE")
        body = self.body
        captured = is_captured_body_type(content_type) and body is not None
        value = http_input(
            body=decode_body(body, content_type) if captured and body else UNSET,
            query=parse_query(str(self.get("QUERY_STRING") or "")),
            headers=_environ_headers(self),
        )
        value[REQUEST_FIELD] = recorded_request(
            _ordered_headers(self),
            body,
            content_type if isinstance(content_type, str) else None,
            size=self.size,
            chunked=_is_chunked(self),
            server=(self["SERVER_NAME"], self["SERVER_PORT"]),
        )
        return value


def _ordered_headers(environ: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The request headers in the environ's order, names in their usual capitalised form
    (WSGI keeps neither the case nor the separate lines of a repeated header)."""
    pairs: list[tuple[str, str]] = []
    for key, value in environ.items():
        name = _header_name(key)
        if name is not None and isinstance(value, str):
            pairs.append((title_case(name), value))
    return pairs


def _output(body: bytes, headers: list[tuple[str, str]]) -> Any:
    """The operation's output: the decoded JSON response body, else ``None``."""
    decoded = decode_json_body(body, _content_type(headers))
    return None if decoded is UNSET else decoded


_STATUS_CODES: dict[str, int | None] = {}
"""Status lines already parsed (an application answers with a handful of them)."""


def _status_code(status: str) -> int | None:
    head = status.split(" ", 1)[0]
    code = int(head) if head.isdigit() else None
    if len(_STATUS_CODES) < 256:
        _STATUS_CODES[status] = code
    return code


def _content_type(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if name.lower() == "content-type":
            return value
    return None


class _WSGIRequest(InboundRequest):
    """One WSGI request: what the span processor reads, the response start and body passed
    on as the application gives them (a bounded copy kept), and for a trusted scan request
    the response start held for the ``x-reproit-events`` header.

    One object per request, so a healthy request pays for one object and few calls.
    """

    __slots__ = (
        "body",
        "closed",
        "environ",
        "exc_info",
        "finished",
        "headers",
        "passthrough",
        "released",
        "server_write",
        "start_response",
        "status",
    )

    def __init__(self, environ: dict[str, Any], start_response: StartResponse) -> None:
        # Sets every slot of InboundRequest itself: this runs on every captured request.
        copy = _EnvironCopy(environ)  # before the body is read: wsgi.input as it came
        if "CONTENT_LENGTH" in copy or "HTTP_TRANSFER_ENCODING" in copy:
            copy.body, copy.size = _read_body(environ)
        else:
            copy.body, copy.size = b"", 0
        method = copy["REQUEST_METHOD"] or "GET"
        if type(method) is not str:
            method = str(method)
        path = f"{copy['SCRIPT_NAME'] or ''}{copy['PATH_INFO'] or ''}"
        if not path.isascii():
            path = _text(path)
        path = path or "/"
        self.method = method
        self.path = path
        self.operation_name = f"{method} {path}"
        self.input = {}  # unused: input_factory builds it when it is wanted
        self.input_factory = self.environ = copy
        self.operation = None
        self.start_response = start_response
        self.server_write: Callable[[bytes], object] | None = None
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.exc_info: ExcInfo | None = None
        self.released = False  # the response start went to the server
        self.finished = False  # the operation's return is pushed
        self.passthrough = False
        self.body: Iterable[bytes] = ()
        self.closed = False

    def header(self, name: str) -> str | None:
        """First value of the lowercase header ``name`` as the request carried it, or None."""
        value = self.environ.get(_environ_key(name))
        return value if isinstance(value, str) else None

    def hold(
        self, status: str, headers: list[tuple[str, str]], exc_info: ExcInfo | None = None
    ) -> Callable[[bytes], object]:
        """The ``start_response`` the application calls.

        Passed on to the server at once, except on a trusted scan request whose operation is
        still open: that start is held until the body completes or passes 64 KiB, so the
        ``x-reproit-events`` header can carry the return event.
        """
        operation = self.operation
        if operation is None:
            self.passthrough = not self.released
        elif not self.finished:
            if operation.scan and not self.released:
                self.status, self.headers, self.exc_info = status, headers, exc_info
                return self._write
            # The latest start is the one the server sends (an error page replaces it).
            self.status, self.headers = status, headers
        self.released = True
        if exc_info is not None:
            write = self.start_response(status, headers, exc_info)
        else:
            write = self.start_response(status, headers)
        self.server_write = write
        return write

    def _write(self, data: bytes) -> object:
        # Legacy write() on a held start: the body goes out now, so the start must go first.
        write = self.server_write
        if write is None:
            write = self.release(None, complete=False)
        return write(data)

    def finish(self, body: bytes | None, *, complete: bool) -> list[tuple[str, str]]:
        """Push the operation's return (once): the status, and the decoded JSON ``body`` as
        its output when ``complete``. Returns the response headers, with ``x-reproit-events``
        added for a trusted scan request."""
        headers = self.headers
        operation = self.operation
        if operation is None or self.status is None or self.finished:
            return headers
        self.finished = True
        try:
            try:
                status = _STATUS_CODES[self.status]
            except KeyError:
                status = _status_code(self.status)
            if complete and body is not None:
                # Decoded only if the operation's events are wanted (a failure, a scan).
                operation.finish(status, output_factory=partial(_output, body, headers))
            else:
                operation.finish(status, None)
            if operation.scan:
                header = operation.header()
                if header is not None:
                    headers = [*headers, (EVENTS_HEADER, header)]
        except Exception as exc:
            absorb("wsgi.finish", exc)
        return headers

    def release(self, body: bytes | None, *, complete: bool) -> Callable[[bytes], object]:
        """Finish the operation and send the held response start (a scan request's), with
        ``x-reproit-events`` added."""
        self.released = True
        headers = self.finish(body, complete=complete)
        if self.exc_info is not None:
            write = self.start_response(self.status, headers, self.exc_info)
        else:
            write = self.start_response(self.status, headers)
        self.server_write = write
        return write

    def failed(self) -> None:
        """The application (or its body) raised: the operation returns 500 (the exception
        itself travels on unchanged; the server answers as it would without us)."""
        operation = self.operation
        if operation is not None and not self.finished:
            self.finished = True
            with guarded("wsgi.failed"):
                operation.finish(500, None)

    def __iter__(self) -> Iterator[bytes]:
        # Each chunk goes out as the application yields it; what is kept is a bounded copy.
        # Only a held scan start keeps chunks back, until the body completes or passes 64 KiB.
        held: list[bytes] = []
        copy: list[bytes] | None = []
        size = 0
        try:
            for chunk in self.body:
                size += len(chunk)
                if copy is not None:
                    if size > MAX_INBOUND_BODY:
                        copy = None  # too large to be an output: the copy stops here
                    else:
                        copy.append(chunk)
                if not self.released:
                    held.append(chunk)
                    if size > MAX_INBOUND_BODY:
                        self.release(None, complete=False)
                        yield from held
                        held = []
                    continue
                if held:
                    yield from held
                    held = []
                yield chunk
        except GeneratorExit:
            self.finish(None, complete=False)  # the server stopped reading (client gone)
            raise
        except BaseException as error:
            note_exception(error, self.operation_name)
            self.failed()
            raise
        whole = None if copy is None else b"".join(copy)
        if not self.released:
            self.release(whole, complete=True)
        else:
            self.finish(whole, complete=whole is not None)
        yield from held

    def close(self) -> None:
        """Close the application's body (once), as the server asks."""
        if self.closed:
            return
        self.closed = True
        if self.released and not self.finished:
            with guarded("wsgi.close"):
                self.finish(None, complete=False)  # ended before the body did
        try:
            close = self.body.close  # type: ignore[attr-defined]
        except AttributeError:
            return
        close()  # as a server does: a close attribute is called


def _as_recorded_server(environ: dict[str, Any]) -> None:
    """In replay: the server address production's request was received on (the replayed
    application listens on ``check``'s port, production's on its own)."""
    address = recorded_server_address()
    if address is not None:
        environ["SERVER_NAME"], environ["SERVER_PORT"] = address[0], str(address[1])


def wsgi_call(
    app: WSGIApp,
    environ: dict[str, Any],
    start_response: StartResponse,
    *,
    whole_body: Callable[[Iterable[bytes]], bytes | None] | None = None,
) -> Iterable[bytes]:
    """Run ``app`` for one request with reproit-otel's inbound handling around it.

    ``whole_body``, for a framework whose responses keep their body in memory, gives the
    whole body of such a response (None for any other): the operation then finishes when the
    application returns, as for a list, and the server gets the very same object.
    """
    if active_session() is not None:
        with guarded("wsgi.replayed_server"):
            _as_recorded_server(environ)
    pipeline = recording.current_pipeline()
    if pipeline is None:
        return app(environ, start_response)
    try:
        begins = pipeline.begins_operations  # type: ignore[attr-defined]  # the processor's
    except AttributeError:  # a pipeline that does not say: any request may begin one
        pass
    else:
        if not begins():
            return app(environ, start_response)
    if current_inbound() is not None:
        return app(environ, start_response)
    try:
        request = _WSGIRequest(environ, start_response)
    except Exception as exc:
        absorb("wsgi.inbound", exc)
        return app(environ, start_response)
    token = publish_inbound(request)
    try:
        body = app(environ, request.hold)
    except BaseException as error:
        note_exception(error, request.operation_name)
        request.failed()
        raise
    finally:
        try:
            reset_inbound(token)
        except ValueError:  # not in the context that published it: clear instead
            publish_inbound(None)
    if request.operation is None or request.passthrough or request.finished:
        # Nothing to finish, or a legacy write() already finished it.
        return body
    data: bytes | None = None
    if isinstance(body, (list, tuple)):
        data = b"".join(body)
    elif whole_body is not None:
        try:
            data = whole_body(body)
        except Exception as exc:
            absorb("wsgi.whole_body", exc)
    if data is None:
        request.body = body
        return request
    # Already in memory: finish now and hand back the very same object.
    whole = None if len(data) > MAX_INBOUND_BODY else data
    if request.released:
        request.finish(whole, complete=whole is not None)
    else:
        request.release(whole, complete=whole is not None)
    return body


class ReproitWSGIMiddleware:
    """WSGI middleware wrapping ``app`` with :func:`wsgi_call`."""

    def __init__(self, app: WSGIApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        return wsgi_call(self.app, environ, start_response)


_PATCH_MARK = "_reproit_original_call"


def install_flask() -> bool:
    """Wrap every Flask application (patch ``flask.Flask.__call__``). Idempotent.

    ``Flask.__call__`` is the outermost seam of a Flask app: OpenTelemetry's Flask
    instrumentation wraps ``wsgi_app`` below it, so the middleware runs outside the server
    span and can hand it the request. Returns False when Flask is not installed.
    """
    try:
        import flask  # optional dependency, patched only when present
    except ImportError:
        return False
    cls = flask.Flask
    if _PATCH_MARK in cls.__dict__:
        return True
    original = cls.__call__

    def __call__(
        self: Any, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        # A bound method rather than a closure: no Python frame of ours per request.
        return wsgi_call(MethodType(original, self), environ, start_response)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, _PATCH_MARK, original)
    cls.__call__ = __call__  # type: ignore[method-assign]
    return True


def uninstall_flask() -> None:
    """Restore ``flask.Flask.__call__`` exactly (importing nothing: a Flask that is not
    imported was never patched)."""
    cls = getattr(sys.modules.get("flask"), "Flask", None)
    if cls is None:
        return
    original = cls.__dict__.get(_PATCH_MARK)
    if original is not None:
        cls.__call__ = original
        delattr(cls, _PATCH_MARK)
