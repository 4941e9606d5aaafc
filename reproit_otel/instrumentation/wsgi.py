"""WSGI inbound side: the request's input in, the operation's return at response start.

Usage, with no code change under ``opentelemetry-instrument`` (``reproit_otel.install()``
patches ``flask.Flask.__call__`` so every Flask app is wrapped, outside OpenTelemetry's own
Flask instrumentation), or explicitly for any WSGI app::

    from reproit_otel.instrumentation.wsgi import ReproitWSGIMiddleware
    app.wsgi_app = ReproitWSGIMiddleware(app.wsgi_app)  # outside OTel's wrapper if any

What it does for each request (PROTOCOL 9.1 and 9.2):

* builds the canonical input: a JSON or URL-encoded form body of at most 64 KiB
  (``application/json`` or ``application/x-www-form-urlencoded`` content type, read from
  ``wsgi.input`` and handed to the application unchanged as an in-memory stream; a form
  becomes an object of its fields), the decoded query (blank values kept, repeats as lists),
  the lowercased headers;
* names the operation ``METHOD /concrete/path`` (``SCRIPT_NAME`` + ``PATH_INFO``);
* publishes both for the OpenTelemetry server span that starts inside the application call
  (the span processor begins the operation there, see ``capture/processor.py``);
* holds ``start_response`` until the body completes or exceeds 64 KiB, then finishes the
  operation with the status and the decoded JSON body (when complete and JSON), and adds
  ``x-reproit-events`` to the response headers for a trusted scan-time request (D12).

Every other byte is unchanged: the same status line, headers, body chunks in the same order,
streamed bodies stream (only the first 64 KiB are held back). Requests without an operation
(reproit-otel off, capture off and no trusted scan header) are passed through untouched. An
exception from the application finishes the operation with status 500 and is re-raised
unchanged (and kept on the capture, ``failures.py``). A defect of ours leaves the request
untraced (``_guard.py``).

Limits: bodies sent with chunked transfer encoding (no ``CONTENT_LENGTH``) are not read; an
application that uses the legacy ``write()`` callable gets its response start released at
the first ``write`` (the output is then unknown, recorded as ``null``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from types import TracebackType
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
    withdraw_inbound,
)
from reproit_otel.capture.operation import Operation
from reproit_otel.failures import note_exception
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.inputs import http_input

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


def _environ_header(environ: dict[str, Any], name: str) -> str | None:
    """First value of the lowercase header ``name`` as the request carried it, or None."""
    value = environ.get(_environ_key(name))
    return value if isinstance(value, str) else None


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


def _read_body(environ: dict[str, Any]) -> bytes:
    content_type = environ.get("CONTENT_TYPE")
    if not isinstance(content_type, str) or not is_captured_body_type(content_type):
        return b""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return b""
    if length <= 0 or length > MAX_INBOUND_BODY:
        return b""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    data: bytes = stream.read(length)
    # The application reads the same bytes from memory.
    environ["wsgi.input"] = io.BytesIO(data)
    return data


def inbound_from_environ(environ: dict[str, Any]) -> InboundRequest:
    """The :class:`InboundRequest` of a WSGI request (reads a small JSON body, see above).

    Headers, query and body are decoded only if the input is wanted (a failing capture, a
    scan request): the request keeps a shallow copy of the environ as it came in.
    """
    snapshot = environ.copy()
    body = _read_body(environ)
    method = environ.get("REQUEST_METHOD") or "GET"
    script = environ.get("SCRIPT_NAME") or ""
    path = _text(f"{script}{environ.get('PATH_INFO') or ''}") or "/"
    return InboundRequest(
        method=method if type(method) is str else str(method),
        path=path,
        input={},
        header=partial(_environ_header, snapshot),
        input_factory=partial(_canonical_input, body, snapshot),
    )


def _canonical_input(body: bytes, environ: dict[str, Any]) -> dict[str, Any]:
    """The canonical input (PROTOCOL 9.2) from what the request carried (built when wanted)."""
    return http_input(
        body=decode_body(body, environ.get("CONTENT_TYPE")),
        query=parse_query(str(environ.get("QUERY_STRING") or "")),
        headers=_environ_headers(environ),
    )


def _output(body: bytes, headers: list[tuple[str, str]]) -> Any:
    """The operation's output: the decoded JSON response body, else ``None``."""
    decoded = decode_json_body(body, _content_type(headers))
    return None if decoded is UNSET else decoded


def _status_code(status: str) -> int | None:
    head = status.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


def _content_type(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if name.lower() == "content-type":
            return value
    return None


class _Exchange:
    """The held response start of one request and the operation it finishes."""

    def __init__(self, inbound: InboundRequest, start_response: StartResponse) -> None:
        self.inbound = inbound
        self.start_response = start_response
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.exc_info: ExcInfo | None = None
        self.released = False
        self.passthrough = False

    @property
    def operation(self) -> Operation | None:
        return self.inbound.operation

    def hold(
        self, status: str, headers: list[tuple[str, str]], exc_info: ExcInfo | None = None
    ) -> Callable[[bytes], object]:
        """The ``start_response`` the application calls."""
        if self.released or self.passthrough or self.inbound.operation is None:
            # Nothing to finish (or an error page after the start was sent): pass through.
            self.passthrough = not self.released
            self.released = True
            if exc_info is not None:
                return self.start_response(status, headers, exc_info)
            return self.start_response(status, headers)
        self.status, self.headers, self.exc_info = status, headers, exc_info
        return self._write

    def _write(self, data: bytes) -> object:
        # Legacy write(): the body goes out now, so the start must go out first.
        write = self.release(None, complete=False)
        return write(data)

    def finish(self, body: bytes | None, *, complete: bool) -> list[tuple[str, str]]:
        """Finish the operation; the headers to add to the response start."""
        operation = self.inbound.operation
        if operation is None or self.status is None:
            return []
        status = _status_code(self.status)
        if complete and body is not None:
            # Decoded only if the operation's events are wanted (a failure, a scan request).
            operation.finish(status, output_factory=partial(_output, body, self.headers))
        else:
            operation.finish(status, None)
        if not operation.scan:
            return []
        header = operation.header()
        return [] if header is None else [(EVENTS_HEADER, header)]

    def release(self, body: bytes | None, *, complete: bool) -> Callable[[bytes], object]:
        """Finish the operation and send the held response start (once)."""
        self.released = True
        extra: list[tuple[str, str]] = []
        try:
            extra = self.finish(body, complete=complete)
        except Exception as exc:
            absorb("wsgi.finish", exc)
        headers = self.headers + extra if extra else self.headers
        if self.exc_info is not None:
            return self.start_response(self.status, headers, self.exc_info)
        return self.start_response(self.status, headers)

    def failed(self) -> None:
        """The application raised before the response started: the operation returns 500."""
        operation = self.operation
        if operation is not None and not self.released:
            with guarded("wsgi.failed"):
                operation.finish(500, None)


class _HeldBody:
    """The application's body, with its first 64 KiB held until the start is released."""

    def __init__(self, exchange: _Exchange, body: Iterable[bytes]) -> None:
        self._exchange = exchange
        self._body = body
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        exchange = self._exchange
        held: list[bytes] = []
        size = 0
        iterator = iter(self._body)
        try:
            for chunk in iterator:
                if exchange.released:
                    yield from held
                    held = []
                    yield chunk
                    continue
                held.append(chunk)
                size += len(chunk)
                if size > MAX_INBOUND_BODY:
                    exchange.release(None, complete=False)
                    yield from held
                    held = []
        except BaseException as error:
            note_exception(error, exchange.inbound.operation_name)
            exchange.failed()
            raise
        if not exchange.released:
            exchange.release(b"".join(held), complete=True)
        yield from held

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        close = getattr(self._body, "close", None)
        if callable(close):
            close()


def wsgi_call(
    app: WSGIApp, environ: dict[str, Any], start_response: StartResponse
) -> Iterable[bytes]:
    """Run ``app`` for one request with reproit-otel's inbound handling around it."""
    pipeline = recording.current_pipeline()
    if pipeline is None or current_inbound() is not None or not _begins(pipeline):
        return app(environ, start_response)
    try:
        inbound = inbound_from_environ(environ)
    except Exception as exc:
        absorb("wsgi.inbound", exc)
        return app(environ, start_response)
    exchange = _Exchange(inbound, start_response)
    token = publish_inbound(inbound)
    try:
        body = app(environ, exchange.hold)
    except BaseException as error:
        note_exception(error, inbound.operation_name)
        exchange.failed()
        raise
    finally:
        withdraw_inbound(token)
    if exchange.passthrough or inbound.operation is None:
        return body
    if exchange.released:
        return body  # legacy write() already sent the start
    if isinstance(body, (list, tuple)):
        # Already in memory: finish now and hand back the very same object.
        data = b"".join(body)
        if len(data) > MAX_INBOUND_BODY:
            exchange.release(None, complete=False)
        else:
            exchange.release(data, complete=True)
        return body
    return _HeldBody(exchange, body)


def _begins(pipeline: object) -> bool:
    """Whether ``pipeline`` may begin an operation for a request (else nothing is wrapped)."""
    begins = getattr(pipeline, "begins_operations", None)
    return begins is None or bool(begins())


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
        def inner(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            result: Iterable[bytes] = original(self, environ, start_response)
            return result

        return wsgi_call(inner, environ, start_response)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(cls, _PATCH_MARK, original)
    cls.__call__ = __call__  # type: ignore[method-assign]
    return True


def uninstall_flask() -> None:
    """Restore ``flask.Flask.__call__`` exactly."""
    try:
        import flask  # optional dependency
    except ImportError:
        return
    cls = flask.Flask
    original = cls.__dict__.get(_PATCH_MARK)
    if original is not None:
        cls.__call__ = original  # type: ignore[method-assign]
        delattr(cls, _PATCH_MARK)
