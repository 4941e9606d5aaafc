"""When the recorded request begins in a replaying process, and what the replay used.

A production replay boots the whole application, and boot makes calls of its own (Django
``runserver``'s migration check, warm-up queries, a dialect's set-up, ``check``'s ``GET /``
probes): those are *before-request* calls. They must neither consume the recorded
exchanges nor fail the boot, so until the recorded request arrives the session answers
without consuming (:mod:`reproit_otel.wire.replay_usage`).

The request is seen where the capture saw it: an OpenTelemetry SERVER span that is the local
root. :class:`RequestWindow` is a span processor added to the SDK ``TracerProvider``; the
first such span whose method and path are the capsule operation's (or whose method and path
cannot be read) begins the request (``check`` probes a recorded ``GET /`` with ``HEAD /``, so
its probes never match): matching turns strict, and the pinned clock starts again
at the recorded ``observedAtMs`` so clock-derived values of the replay line up with the
recorded ones. When that span ends, one line goes to the process's real standard error::

    REPROIT:REPLAY-USAGE {"dataExchanges":4,"consumed":4,"unused":0,"ambientExchanges":3,
                          "ambient":5,"beforeRequest":2,"beforeRequestCalls":[...],
                          "consumedOrder":[0,1,2,3],"unusedCalls":[]}

(one line; the counts of :meth:`~reproit_otel.wire.replay_usage.ReplayUsage.report`).
``reproit-otel check`` reads it for its verdict and ``--json``: a *fixed* needs every recorded
data exchange consumed, in order (``consumedOrder``).

Without an SDK ``TracerProvider`` (nothing could see the request arrive) the window is not
opened: every call is matched strictly from the start, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind

from reproit_otel._guard import guarded
from reproit_otel.wire.canonical import ordered_json
from reproit_otel.wire.replay import ReplaySession

__all__ = ["USAGE_MARKER", "RequestWindow", "open_request_window", "request_matches_operation"]

USAGE_MARKER = "REPROIT:REPLAY-USAGE "
"""The prefix of the line written when the recorded request's server span ends."""


def _text(attributes: Any, *names: str) -> str | None:
    for name in names:
        value = attributes.get(name) if attributes is not None else None
        if isinstance(value, str) and value:
            return value
    return None


def request_matches_operation(attributes: Any, operation: str) -> bool:
    """Whether a server span's attributes name the recorded ``METHOD /path`` operation.

    The path comes from ``url.path``/``http.target``, else from the full URL
    (``url.full``/``http.url``: servers such as wsgiref set no target). When the method or
    the path cannot be read, the span counts as the request.
    """
    method = _text(attributes, "http.request.method", "http.method")
    target = _text(attributes, "url.path", "http.target")
    if target is None:
        url = _text(attributes, "url.full", "http.url")
        target = urlsplit(url).path if url else None
    if method is None or target is None:
        return True
    recorded_method, _, recorded_path = operation.partition(" ")
    path = target.split("?", 1)[0] or "/"
    return method.upper() == recorded_method.upper() and path == (recorded_path or "/")


class RequestWindow(SpanProcessor):
    """Begins the recorded request at its server span; reports the usage when it ends."""

    def __init__(
        self,
        session: ReplaySession,
        operation: str,
        on_begin: Callable[[], None],
        write_line: Callable[[str], None],
    ) -> None:
        self._session = session
        self._operation = operation
        self._on_begin = on_begin
        self._write_line = write_line
        self._request_span: tuple[int, int] | None = None
        self._lock = threading.Lock()
        self.stopped = False

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if self.stopped or self._request_span is not None or span.kind is not SpanKind.SERVER:
            return
        parent = span.parent
        if parent is not None and not parent.is_remote:
            return
        with guarded("replay.request_window"):
            if not request_matches_operation(span.attributes, self._operation):
                return
            context = span.get_span_context()
            with self._lock:
                if self._request_span is not None:
                    return
                self._request_span = (context.trace_id, context.span_id)
            # The clock restarts first: the session reads the request's start from it.
            self._on_begin()
            self._session.begin_request()

    def on_end(self, span: ReadableSpan) -> None:
        started = self._request_span
        if started is None or self.stopped:
            return
        context = span.get_span_context()
        if context is None or (context.trace_id, context.span_id) != started:
            return
        with guarded("replay.request_window"):
            self._write_line(USAGE_MARKER + ordered_json(self._session.usage.report()))

    def shutdown(self) -> None:
        self.stopped = True

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def open_request_window(
    session: ReplaySession,
    operation: str,
    on_begin: Callable[[], None],
    write_line: Callable[[str], None],
) -> RequestWindow | None:
    """Make ``session`` await the recorded request, when the global provider can show it.

    Returns the installed :class:`RequestWindow`, or ``None`` (no SDK ``TracerProvider``:
    the session stays strict from the start).
    """
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    add = getattr(provider, "add_span_processor", None)
    if not callable(add):
        return None
    window = RequestWindow(session, operation, on_begin, write_line)
    add(window)
    session.usage.await_request()
    return window
