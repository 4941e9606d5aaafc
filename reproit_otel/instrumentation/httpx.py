"""httpx: record every HTTP exchange of an operation, and serve it back in a replay.

Recording
=========

::

    from reproit_otel.instrumentation.httpx import install_recorder, uninstall_recorder

    install_recorder()     # idempotent; reproit_otel.install() and the distro call it for you
    ...
    uninstall_recorder()   # puts httpx back as it was

Every call that goes through ``httpx.HTTPTransport.handle_request`` or
``httpx.AsyncHTTPTransport.handle_async_request`` while an operation is being recorded
becomes one effect of kind ``call`` with the exchange the requests recorder writes (PROTOCOL
section 4.1, ``protocol: "http"``; see :mod:`reproit_otel.instrumentation.requests` for the
fields, the bounds and the redaction rules, which are the same): a capsule does not tell
which client made a call. Both ``Client`` and ``AsyncClient`` are covered, and so is every
mounted transport of those classes (``mounts=``, proxies), since the seam is the transport
class itself; a transport class of another kind (``MockTransport``, ``WSGITransport``, a
custom ``BaseTransport``) is not recorded, and its OpenTelemetry span, if any, makes the
operation's effects incomplete (decision D4).

* Request bodies given whole (``content``, ``json``, ``data``, ``files``) are recorded as
  sent; a streamed request body (a generator, an async iterator) is recorded piece by piece as
  the transport sends it.
* The response body is recorded as the application reads it (``read``/``aread``,
  ``iter_bytes``/``aiter_bytes``, ``iter_raw``, ``iter_lines``...), with one stream chunk per
  piece the transport hands on. A body read to its end finishes the exchange; a ``stream()``
  the application leaves part way is finished when the response is closed (the ``with``
  block's end) or dropped: the exchange then holds exactly the bytes that were read. A body
  with a ``content-encoding`` is recorded decoded.
* A transport error (``httpx.ConnectError``, ``httpx.ConnectTimeout``, ``httpx.ReadTimeout``...)
  is recorded as ``{"error": {"type": "httpx.ConnectError", "message": ...}}`` and reaches the
  application unchanged; an error while the body is read is recorded next to the status,
  headers and the part of the body that arrived.
* Calls made under OpenTelemetry's ``suppress_instrumentation`` are not recorded.

The exchange belongs to the operation of the OpenTelemetry context current when the transport
is called. Asyncio tasks copy the context they are created in, so the calls of an
``asyncio.gather`` inside a request belong to that request, and concurrent requests on one
event loop never share an exchange.

Where the seam sits next to OpenTelemetry's httpx instrumentation: that instrumentation wraps
the same two methods (with ``wrapt``), and an exchange covers the span current when it starts.
So the recorder puts itself *inside* any such wrapper, whichever was installed first: when the
method is already wrapped, the recorder replaces what the wrapper wraps instead of the class
attribute. OpenTelemetry's ``uninstrument`` then leaves the recorder in place, and
:func:`uninstall_recorder` takes it out from wherever it sits. The CLIENT span is thereby
covered by its exchange, and the operation's effects stay complete.

Replay
======

:class:`HttpxReplayInstrumentor` (installed by the replay bootstrap when ``REPROIT_REPLAY`` is
set) puts a server of the recording at the same seam, inside OpenTelemetry's wrapper, so
replayed calls still make their CLIENT spans. Each call is answered from the active replay
session as a requests call is (``instrumentation/_httpx_replay.py``); a call the recording
does not hold gets ``599 Reproit Diverged`` and its ``REPROIT:DIVERGENCE`` line; a suppressed
(telemetry) call is refused with ``httpx.ConnectError``, quietly. No socket is opened.

Locks. ``_patch_lock`` only orders installs and uninstalls; a call takes no lock of this
package (a replayed call takes the replay session's, to consume its exchange).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Collection
from typing import Any

import httpx
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from reproit_otel._guard import absorb
from reproit_otel.capture.recording import (
    ExchangeRecorder,
    is_suppressed,
    registered_secret_values,
    start_exchange,
)
from reproit_otel.config import given_secret_values
from reproit_otel.instrumentation._httpx_record import HttpxCall
from reproit_otel.instrumentation._httpx_replay import (
    serve_async,
    serve_sync,
    served_http_version,
    telemetry_refusal,
)
from reproit_otel.replay.session import active_session

__all__ = [
    "HttpxReplayInstrumentor",
    "install_recorder",
    "recorder_installed",
    "uninstall_recorder",
]

_Handle = Callable[..., Any]

_SEAMS: tuple[tuple[type[Any], str], ...] = (
    (httpx.HTTPTransport, "handle_request"),
    (httpx.AsyncHTTPTransport, "handle_async_request"),
)
_RECORDER = "__reproit_recorder__"
_REPLAY = "__reproit_replay__"

_patch_lock = threading.Lock()


# ------------------------------------------------------------------------------ the seam


def _seat(cls: type[Any], name: str, make: Callable[[_Handle], _Handle], marker: str) -> None:
    """Put ``make(original)`` at ``cls.name``, inside any wrapper object already there."""
    holder: Any = None
    current: Any = cls.__dict__[name]
    # type(), not isinstance(): a wrapt proxy passes isinstance() as the function it wraps.
    while type(current) is not types.FunctionType and hasattr(current, "__wrapped__"):
        holder, current = current, current.__wrapped__
    if getattr(current, marker, False):
        return
    patched = make(current)
    setattr(patched, marker, True)
    patched.__wrapped__ = current  # type: ignore[attr-defined]
    if holder is None:
        setattr(cls, name, patched)
    else:
        holder.__wrapped__ = patched


def _unseat(cls: type[Any], name: str, marker: str) -> None:
    """Take what :func:`_seat` put with ``marker`` out of ``cls.name``'s chain of wrappers."""
    holder: Any = None
    current: Any = cls.__dict__.get(name)
    while current is not None:
        if getattr(current, marker, False) and type(current) is types.FunctionType:
            original = current.__wrapped__  # type: ignore[attr-defined]
            if holder is None:
                setattr(cls, name, original)
            else:
                holder.__wrapped__ = original
            return
        holder, current = current, getattr(current, "__wrapped__", None)


def _seated(cls: type[Any], name: str, marker: str) -> bool:
    current: Any = cls.__dict__.get(name)
    while current is not None:
        if getattr(current, marker, False):
            return True
        current = getattr(current, "__wrapped__", None)
    return False


# ------------------------------------------------------------------------------ recording


def _begin(
    request: httpx.Request, *, asynchronous: bool
) -> tuple[ExchangeRecorder, HttpxCall] | None:
    """The recorder and call of a transport call, or ``None`` when nothing records it.

    Every step of ours is guarded: a defect of the recorder never reaches the call.
    """
    try:
        recorder = start_exchange("httpx")
    except Exception as exc:
        absorb("httpx.start_exchange", exc)
        return None
    if recorder is None:
        return None
    try:
        return recorder, HttpxCall.begin(recorder, request, asynchronous=asynchronous)
    except Exception as exc:
        recorder.fail("the request could not be recorded")
        absorb("httpx.record_request", exc)
        return None


def _ended(call: HttpxCall, response: Any, error: BaseException | None) -> None:
    try:
        if error is not None:
            call.failed(error)
        else:
            call.responded(response)
    except Exception as exc:
        absorb("httpx.record_response", exc)


def _recording_sync(original: _Handle) -> _Handle:
    def handle_request(self: Any, request: httpx.Request) -> Any:
        stream = request.stream
        started = _begin(request, asynchronous=False)
        if started is None:
            return original(self, request)
        _, call = started
        try:
            response = original(self, request)
        except BaseException as error:
            request.stream = stream
            _ended(call, None, error)
            raise
        request.stream = stream
        _ended(call, response, None)
        return response

    return handle_request


def _recording_async(original: _Handle) -> _Handle:
    async def handle_async_request(self: Any, request: httpx.Request) -> Any:
        stream = request.stream
        started = _begin(request, asynchronous=True)
        if started is None:
            return await original(self, request)
        _, call = started
        try:
            response = await original(self, request)
        except BaseException as error:
            request.stream = stream
            _ended(call, None, error)
            raise
        request.stream = stream
        _ended(call, response, None)
        return response

    return handle_async_request


_RECORDING = (_recording_sync, _recording_async)


def install_recorder() -> None:
    """Record every httpx transport call made inside a recorded operation. Idempotent."""
    with _patch_lock:
        for (cls, name), make in zip(_SEAMS, _RECORDING, strict=True):
            _seat(cls, name, make, _RECORDER)


def uninstall_recorder() -> None:
    """Undo :func:`install_recorder` (wherever the recorder sits); nothing when not installed."""
    with _patch_lock:
        for cls, name in _SEAMS:
            _unseat(cls, name, _RECORDER)


def recorder_installed() -> bool:
    """True while the recorder is patched in."""
    return all(_seated(cls, name, _RECORDER) for cls, name in _SEAMS)


# ------------------------------------------------------------------------------ replay


def _no_session(request: httpx.Request) -> httpx.ConnectError:
    return httpx.ConnectError(
        "reproit replay is installed but no replay session is active; set REPROIT_REPLAY "
        "to a capsule, or uninstrument HttpxReplayInstrumentor",
        request=request,
    )


def _replay_sync(secrets: tuple[str, ...]) -> Callable[[_Handle], _Handle]:
    def make(original: _Handle) -> _Handle:
        def handle_request(self: Any, request: httpx.Request) -> Any:
            session = active_session()
            if session is None:
                raise _no_session(request)
            if is_suppressed():  # an exporter's upload: refused quietly, never a divergence
                raise telemetry_refusal(request)
            return serve_sync(
                session, request, secrets + registered_secret_values(), served_http_version(self)
            )

        return handle_request

    return make


def _replay_async(secrets: tuple[str, ...]) -> Callable[[_Handle], _Handle]:
    def make(original: _Handle) -> _Handle:
        async def handle_async_request(self: Any, request: httpx.Request) -> Any:
            session = active_session()
            if session is None:
                raise _no_session(request)
            if is_suppressed():
                raise telemetry_refusal(request)
            return await serve_async(
                session, request, secrets + registered_secret_values(), served_http_version(self)
            )

        return handle_async_request

    return make


class HttpxReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Serves every httpx transport call from the active replay session, never the network.

    ``instrument(secret_values=(...))`` adds values to scrub from live calls before they are
    compared (``REPROIT_SECRET_VALUES`` is read from the configuration);
    ``uninstrument()`` puts the transports back.
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        return ("httpx >= 0.23",)

    def _instrument(self, **kwargs: Any) -> None:
        values = given_secret_values(kwargs.get("secret_values"))
        with _patch_lock:
            _seat(httpx.HTTPTransport, "handle_request", _replay_sync(values), _REPLAY)
            _seat(httpx.AsyncHTTPTransport, "handle_async_request", _replay_async(values), _REPLAY)

    def _uninstrument(self, **kwargs: Any) -> None:
        with _patch_lock:
            for cls, name in _SEAMS:
                _unseat(cls, name, _REPLAY)
