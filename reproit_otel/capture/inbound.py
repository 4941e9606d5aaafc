"""Facts about the inbound request, handed from the WSGI/ASGI middleware to the span processor.

The middleware (``instrumentation/wsgi.py``, ``instrumentation/asgi.py``) runs outside the
OpenTelemetry server span: it reads the request (method, concrete path, the canonical input
of PROTOCOL 9.2, the trusted ``x-reproit-*`` headers) and publishes an :class:`InboundRequest`
in a :class:`~contextvars.ContextVar` for the duration of the application call. When the
server span starts inside that call, the span processor reads it (:func:`current_inbound`),
begins the operation and stores it in :attr:`InboundRequest.operation`, so the middleware can
finish the operation when the response starts.

Without the middleware (a framework reproit-otel does not wire) the processor falls back to
what the server span's attributes say (method, path, query; no body, no headers) and
finishes the operation itself when the span ends.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from reproit_otel.wire._js import UNSET
from reproit_otel.wire._jsparse import js_json_parse

if TYPE_CHECKING:
    from reproit_otel.capture.operation import Operation

__all__ = [
    "MAX_INBOUND_BODY",
    "InboundRequest",
    "current_inbound",
    "decode_body",
    "decode_json_body",
    "defer_until_operation",
    "inbound_scope",
    "is_captured_body_type",
    "parse_query",
    "publish_inbound",
    "reset_inbound",
    "run_deferred",
    "single_or_list",
    "withdraw_inbound",
]

MAX_INBOUND_BODY = 65536
"""Request and response bodies are buffered up to this many bytes (64 KiB, PROTOCOL 9.2)."""

JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"


class InboundRequest:
    """One inbound HTTP request as the middleware saw it.

    ``InboundRequest(method, path, input, header, *, operation=None, input_factory=None)``;
    ``header`` answers :meth:`header`. A middleware may subclass it to keep its own
    per-request state in the same object (the WSGI middleware does: one object per request).
    """

    # Slots: one small object per request, read on the span processor's hot path.
    __slots__ = (
        "_header",
        "input",
        "input_factory",
        "method",
        "operation",
        "operation_name",
        "path",
    )

    method: str
    """Request method as sent (``GET``)."""
    path: str
    """Concrete, percent-decoded path without the query (``/orders/42``)."""
    operation_name: str
    """``METHOD /concrete/path``, the operation name (PROTOCOL 9.1)."""
    input: dict[str, Any]
    """The canonical input (``wire.inputs.http_input``), not yet redacted (unused when
    ``input_factory`` is given)."""
    input_factory: Callable[[], dict[str, Any]] | None
    """Builds the canonical input from what the middleware kept, when it is wanted (a capture
    builds it only for an operation that fails). It must not refer to the request: the
    operation's trace keeps it, and the request refers to the operation."""
    operation: Operation | None
    """Set by the span processor when the server span of this request begins an operation."""

    def __init__(
        self,
        method: str,
        path: str,
        input: dict[str, Any],
        header: Callable[[str], str | None],
        *,
        operation: Operation | None = None,
        input_factory: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.operation_name = f"{method} {path}"
        self.input = input
        self._header = header
        self.operation = operation
        self.input_factory = input_factory

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.operation_name!r})"

    def header(self, name: str) -> str | None:
        """First value of a lowercase request header name, or None."""
        return self._header(name)

    def canonical_input(self) -> dict[str, Any]:
        """The canonical input: ``input_factory()`` when given, else ``input``."""
        if self.input_factory is not None:
            return self.input_factory()
        return self.input


_current: contextvars.ContextVar[InboundRequest | None] = contextvars.ContextVar(
    "reproit_inbound", default=None
)

# The context variable's own methods, not functions around them: they run on every request,
# and a bound C method costs no Python frame.
current_inbound: Callable[[], InboundRequest | None] = _current.get
"""The inbound request of the current context, if a middleware published one."""

publish_inbound: Callable[[InboundRequest | None], contextvars.Token[InboundRequest | None]] = (
    _current.set
)
"""Make a request the current inbound request; give the token to :func:`withdraw_inbound`
(the two halves of :class:`inbound_scope`, for a middleware's hot path)."""

reset_inbound: Callable[[contextvars.Token[InboundRequest | None]], None] = _current.reset
"""Undo :func:`publish_inbound` in the context that published; raises ValueError for a token
of another context (:func:`withdraw_inbound` handles that case)."""


_deferred: contextvars.ContextVar[
    tuple[InboundRequest, tuple[Callable[[], object], ...]] | None
] = contextvars.ContextVar("reproit_inbound_deferred", default=None)


def defer_until_operation(inbound: InboundRequest, work: Callable[[], object]) -> None:
    """Run ``work`` when ``inbound``'s operation begins (its server span starts).

    For what a request does before the server span exists: Flask opens its signed session
    while it pushes the request context, before OpenTelemetry's ``before_request`` hook starts
    the span. Work deferred for a request whose operation never begins is dropped with it.
    """
    pending = _deferred.get()
    earlier = pending[1] if pending is not None and pending[0] is inbound else ()
    _deferred.set((inbound, (*earlier, work)))


def run_deferred(inbound: InboundRequest) -> tuple[Callable[[], object], ...]:
    """The work :func:`defer_until_operation` holds for ``inbound`` (the span processor runs
    it once it has set ``inbound.operation``), forgotten once taken."""
    pending = _deferred.get()
    if pending is None:
        return ()
    _deferred.set(None)
    return pending[1] if pending[0] is inbound else ()


def withdraw_inbound(token: contextvars.Token[InboundRequest | None]) -> None:
    """Undo :func:`publish_inbound`."""
    try:
        _current.reset(token)
    except ValueError:
        # Reset from another context (a generator resumed elsewhere): clear instead.
        _current.set(None)


class inbound_scope:  # a context manager named like a function at its call sites
    """Publish ``request`` as the current inbound request inside a ``with`` block."""

    def __init__(self, request: InboundRequest) -> None:
        self._request = request
        self._token: contextvars.Token[InboundRequest | None] | None = None

    def __enter__(self) -> InboundRequest:
        self._token = publish_inbound(self._request)
        return self._request

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            withdraw_inbound(self._token)
            self._token = None


def single_or_list(pairs: Mapping[str, list[Any]]) -> dict[str, Any]:
    """Collapse repeated values: one value stays itself, several become a list (PROTOCOL 9.2)."""
    return {name: values[0] if len(values) == 1 else list(values) for name, values in pairs.items()}


def parse_query(query: str) -> dict[str, Any]:
    """A query string decoded as PROTOCOL 9.2 says: blank values kept, repeats as lists."""
    return single_or_list(parse_qs(query, keep_blank_values=True)) if query else {}


def decode_json_body(data: bytes, content_type: str | None) -> Any:
    """The decoded JSON body, or :data:`UNSET` when it is not a JSON body.

    JSON means: a content type containing ``application/json`` (case-insensitive), at most
    :data:`MAX_INBOUND_BODY` bytes, UTF-8 text that ``JSON.parse`` accepts.
    """
    if not data or len(data) > MAX_INBOUND_BODY:
        return UNSET
    if content_type is None or JSON_TYPE not in content_type.lower():
        return UNSET
    try:
        return js_json_parse(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return UNSET


def is_captured_body_type(content_type: str | None) -> bool:
    """Whether a request body of ``content_type`` is read into the input (JSON or a form)."""
    if not content_type:
        return False
    lowered = content_type.lower()
    return JSON_TYPE in lowered or FORM_TYPE in lowered


def decode_body(data: bytes, content_type: str | None) -> Any:
    """The decoded request body, or :data:`UNSET`: JSON as :func:`decode_json_body`, or a
    URL-encoded form (``application/x-www-form-urlencoded``, UTF-8) as an object of its
    fields, decoded like a query (blank values kept, repeated fields as lists).

    A form is what a browser or ``requests.post(data=...)`` sends to a Django or Flask view;
    its fields are redacted by name like any other input. Multipart bodies (files) are not
    decoded.
    """
    if content_type is not None and FORM_TYPE in content_type.lower():
        if not data or len(data) > MAX_INBOUND_BODY:
            return UNSET
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return UNSET
        return parse_query(text)
    return decode_json_body(data, content_type)
