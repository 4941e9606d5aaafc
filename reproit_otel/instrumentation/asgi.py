"""ASGI inbound side: the request's input in, the operation's return when the response ends.

Usage, with no code change under ``opentelemetry-instrument`` (``reproit_otel.install()``
patches ``starlette.applications.Starlette.__call__``, which FastAPI inherits, so the
middleware runs outside OpenTelemetry's ASGI middleware), or explicitly for any ASGI app::

    from reproit_otel.instrumentation.asgi import ReproitASGIMiddleware
    app = ReproitASGIMiddleware(app)  # outermost, outside OpenTelemetryMiddleware

What it does for each ``http`` request (PROTOCOL 9.2; other scopes pass through):

* reads the request body whatever its type (a ``content-length`` above 0 or a
  ``transfer-encoding``; up to 64 KiB; the messages are replayed to the application
  unchanged, then ``receive`` is handed on);
* builds the canonical input: an ``application/json`` or ``application/x-www-form-urlencoded``
  body is decoded when it is complete, at most 64 KiB and valid JSON (or a form: an object of
  its fields); the query is decoded (blank values kept, repeats as lists); header names are
  lowercased and repeated headers become lists; and the request as it came in
  (``input.request``: the header lines in order, the body bytes, ``wire/request_record.py``);
* names the operation ``METHOD /path`` (ASGI ``path``, percent-decoded);
* publishes both for the server span that starts inside the application call, through a
  context variable (the span processor begins the operation, ``capture/processor.py``);
* passes ``http.response.start`` and every ``http.response.body`` message on as the
  application sends them, keeping a copy of the body (at most 64 KiB); when the last body
  message (``more_body`` false) goes out, finishes the operation with the status and the
  decoded JSON body (when complete and JSON). No response start at all means status 500;
  an exception from the application means 500 (it propagates unchanged), except a
  cancellation once the start went out (the client left a stream): the status sent.
* on a trusted scan-time request only (D12), holds the start and the first body messages
  until the body completes or exceeds 64 KiB, so that ``x-reproit-events`` can be appended
  to the start message (a streamed response to a scan request waits for that much).

Every byte and message boundary is unchanged, and nothing waits on capture: server-sent
events and token streams arrive as the application sends them. Requests
without an operation are passed through untouched, and a defect of ours leaves the request
untraced (``_guard.py``); the application's exceptions propagate unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from functools import partial
from typing import Any

from reproit_otel._guard import guard_call, guarded
from reproit_otel.capture import recording
from reproit_otel.capture.inbound import (
    MAX_INBOUND_BODY,
    InboundRequest,
    current_inbound,
    decode_body,
    decode_json_body,
    inbound_scope,
    is_captured_body_type,
    parse_query,
    single_or_list,
)
from reproit_otel.failures import note_exception
from reproit_otel.replay.session import active_session, recorded_server_address
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.inputs import http_input
from reproit_otel.wire.request_record import REQUEST_FIELD, recorded_request

__all__ = [
    "ReproitASGIMiddleware",
    "asgi_call",
    "install_starlette",
    "uninstall_starlette",
]

EVENTS_HEADER = b"x-reproit-events"

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _headers(scope: Scope) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name = bytes(raw_name).decode("latin-1").lower()
        headers.setdefault(name, []).append(bytes(raw_value).decode("latin-1"))
    return headers


def _raw_headers(scope: Scope) -> list[tuple[str, str]]:
    """The request headers as the server handed them over: order and names kept."""
    return [
        (bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
        for name, value in scope.get("headers") or ()
    ]


def _input(
    raw: list[tuple[str, str]],
    headers: dict[str, list[str]],
    query: str,
    body: bytes | None,
    server: Any = None,
) -> dict[str, Any]:
    """The canonical input of an ASGI request and its ``input.request`` (built on demand)."""
    content_type = headers.get("content-type", [None])[0]
    decoded = UNSET
    if body is not None and is_captured_body_type(content_type):
        decoded = decode_body(body, content_type)
    value = http_input(body=decoded, query=parse_query(query), headers=single_or_list(headers))
    length = headers.get("content-length", [None])[0]
    size = int(length) if length is not None and length.strip().isdigit() else None
    coding = headers.get("transfer-encoding", [""])[0]
    value[REQUEST_FIELD] = recorded_request(
        raw, body, content_type, size=size, chunked="chunked" in coding.lower(), server=server
    )
    return value


def inbound_from_scope(scope: Scope, body: bytes | None) -> InboundRequest:
    """The :class:`InboundRequest` of an ASGI ``http`` scope and its buffered body."""
    headers = _headers(scope)
    query = bytes(scope.get("query_string") or b"").decode("latin-1")

    def header(name: str) -> str | None:
        values = headers.get(name)
        return values[0] if values else None

    return InboundRequest(
        method=str(scope.get("method") or "GET"),
        path=str(scope.get("path") or "/"),
        input={},
        header=header,
        input_factory=partial(
            _input, _raw_headers(scope), headers, query, body, scope.get("server")
        ),
    )


def _wants_body(scope: Scope) -> bool:
    """Whether the request has a body to read (a length above 0, or chunked)."""
    for raw_name, raw_value in scope.get("headers") or ():
        name = bytes(raw_name).lower()
        if name == b"content-length":
            return bytes(raw_value).strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


async def _read_request(receive: Receive) -> tuple[list[Message], bytes | None]:
    """Read request messages up to 64 KiB; the body when complete and small, else None."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message.get("type") != "http.request":
            return messages, None
        size += len(message.get("body") or b"")
        if size > MAX_INBOUND_BODY:
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(bytes(m.get("body") or b"") for m in messages)


class _Response:
    """One request's response messages: passed on as the application sends them, with a
    bounded copy of the body kept for the output; a trusted scan request's start and first
    body messages are held until the body completes or passes 64 KiB (its events header)."""

    def __init__(self, inbound: InboundRequest, send: Send) -> None:
        self.inbound = inbound
        self.send = send
        self.start: Message | None = None
        self.held: list[Message] = []
        self.copy: list[bytes] | None = []
        self.size = 0
        self.released = False  # the start went to the server
        self.finished = False  # the operation's return is pushed

    def finish(self, *, complete: bool) -> None:
        operation = self.inbound.operation
        if operation is None or self.finished:
            return
        self.finished = True
        start = self.start
        status = start.get("status") if start is not None else 500
        output: Any = None
        if complete and start is not None and self.copy is not None:
            content_type = None
            for raw_name, raw_value in start.get("headers") or ():
                if bytes(raw_name).lower() == b"content-type":
                    content_type = bytes(raw_value).decode("latin-1")
            decoded = decode_json_body(b"".join(self.copy), content_type)
            output = None if decoded is UNSET else decoded
        operation.finish(status if isinstance(status, int) else None, output)
        header = operation.header() if operation.scan else None
        if header is not None and start is not None and not self.released:
            start["headers"] = [*(start.get("headers") or ()), (EVENTS_HEADER, header.encode())]

    async def release(self, *, complete: bool) -> None:
        """Finish the operation and send the held start and body messages (a scan request)."""
        with guarded("asgi.finish"):
            self.finish(complete=complete)
        self.released = True
        messages = ([self.start] if self.start is not None else []) + self.held
        self.held = []
        for message in messages:
            await self.send(message)

    def _keep(self, message: Message) -> bool:
        """Copy a body message (bounded); True when it is the last one."""
        body = message.get("body") or b""
        self.size += len(body)
        if self.copy is not None:
            if self.size > MAX_INBOUND_BODY:
                self.copy = None  # too large to be an output: the copy stops here
            else:
                self.copy.append(bytes(body))
        return not message.get("more_body", False)

    async def __call__(self, message: Message) -> None:
        operation = self.inbound.operation
        if operation is None or self.finished:
            if self.held or (self.start is not None and not self.released):
                await self.release(complete=False)
            await self.send(message)
            return
        kind = message.get("type")
        if kind == "http.response.start" and self.start is None:
            self.start = message
            if not operation.scan:
                self.released = True
                await self.send(message)  # goes out as the application sends it
            return
        if kind == "http.response.body" and self.start is not None:
            last = self._keep(message)
            if self.released:
                if last:
                    with guarded("asgi.finish"):
                        self.finish(complete=True)
                await self.send(message)
                return
            self.held.append(message)
            if last:
                await self.release(complete=True)
            elif self.size > MAX_INBOUND_BODY:
                await self.release(complete=False)
            return
        # Anything else (trailers, pathsend, a second start) goes out after what is held.
        if not self.released:
            await self.release(complete=False)
        await self.send(message)


def _as_recorded_server(scope: Scope) -> Scope:
    """In replay: the scope with the server address production's request was received on."""
    address = recorded_server_address()
    return scope if address is None else {**scope, "server": address}


async def asgi_call(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``app`` for one request with reproit-otel's inbound handling around it."""
    if active_session() is not None and scope.get("type") == "http":
        scope = guard_call("asgi.replayed_server", _as_recorded_server, scope, default=scope)
    if (
        scope.get("type") != "http"
        or recording.current_pipeline() is None
        or current_inbound() is not None
    ):
        await app(scope, receive, send)
        return
    replay: list[Message] = []
    body: bytes | None = None
    if guard_call("asgi.wants_body", _wants_body, scope, default=False):
        replay, body = await _read_request(receive)
    inbound = guard_call("asgi.inbound", inbound_from_scope, scope, body, default=None)

    async def replayed_receive() -> Message:
        if replay:
            return replay.pop(0)
        return await receive()

    app_receive = replayed_receive if replay else receive
    if inbound is None:
        await app(scope, app_receive, send)
        return
    response = _Response(inbound, send)
    with inbound_scope(inbound):
        try:
            await app(scope, app_receive, response)
        except BaseException as error:
            note_exception(error, inbound.operation_name)
            if not response.finished and inbound.operation is not None:
                if response.start is not None and not response.released:
                    # Without us the start would already be on the wire: send what is held
                    # so the server reacts to the failure exactly as it would have.
                    with contextlib.suppress(Exception):  # the application's exception wins
                        await response.release(complete=False)
                elif response.released and isinstance(error, asyncio.CancelledError):
                    with guarded("asgi.finish"):  # the client went away mid-stream
                        response.finish(complete=False)
                else:
                    response.finished = True
                    with guarded("asgi.failed"):
                        inbound.operation.finish(500, None)
            raise
        if not response.finished and inbound.operation is not None:
            if response.start is not None and not response.released:
                await response.release(complete=False)
            else:
                with guarded("asgi.finish"):
                    response.finish(complete=False)  # no start (500), or no last body


class ReproitASGIMiddleware:
    """ASGI middleware wrapping ``app`` with :func:`asgi_call`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await asgi_call(self.app, scope, receive, send)


_PATCH_MARK = "_reproit_original_call"

APPLICATIONS_MODULE = "starlette.applications"
"""Where ``Starlette`` lives: the bootstrap patches it when the application imports it."""


def install_starlette() -> bool:
    """Wrap every Starlette and FastAPI application (patch ``Starlette.__call__``). Idempotent.

    ``Starlette.__call__`` runs before the middleware stack, so reproit-otel sits outside
    OpenTelemetry's ASGI middleware however the FastAPI instrumentation installed it.
    Returns False when Starlette is not installed.
    """
    try:
        from starlette.applications import Starlette  # optional dependency
    except ImportError:
        return False
    if _PATCH_MARK in Starlette.__dict__:
        return True
    original = Starlette.__call__

    async def __call__(self: Any, scope: Scope, receive: Receive, send: Send) -> None:
        async def inner(scope: Scope, receive: Receive, send: Send) -> None:
            await original(self, scope, receive, send)

        await asgi_call(inner, scope, receive, send)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(Starlette, _PATCH_MARK, original)
    Starlette.__call__ = __call__  # type: ignore[method-assign]
    return True


def uninstall_starlette() -> None:
    """Restore ``Starlette.__call__`` exactly (importing nothing: a Starlette that is not
    imported was never patched)."""
    cls = getattr(sys.modules.get(APPLICATIONS_MODULE), "Starlette", None)
    if cls is None:
        return
    original = cls.__dict__.get(_PATCH_MARK)
    if original is not None:
        cls.__call__ = original
        delattr(cls, _PATCH_MARK)
