"""The span processor that turns OpenTelemetry server spans into ReproIt operations.

:class:`ReproitSpanProcessor` is an OpenTelemetry SDK ``SpanProcessor``. Add it to the
``TracerProvider`` (``reproit_otel.install()`` does) and it:

1. begins an operation when a SERVER span that is the local root starts (no parent, or a
   remote parent). The trace context is the scan-time context of a trusted
   ``x-reproit-trace`` header (decision D12: only with ``REPROIT_SCAN=1`` and, when
   ``REPROIT_SCAN_TOKEN`` is set, a matching ``x-reproit-scan-token``; otherwise the header
   is ignored), else a synthesized capture context (PROTOCOL 5.2: ``cap-<ms>-<n>``, a fresh
   16-hex ``replaySeed``) when capture is on (a sink is configured), else nothing happens.
   The operation name and input come from the WSGI/ASGI middleware (``inbound.py``), or from
   the span's attributes when no middleware ran;
2. notes every span started under that server span (one append: which spans an exchange
   covers is decided only when a failure's capture is opened, ``operation.py``, ``span_log``)
   and binds the exchanges recorders start
   through :mod:`reproit_otel.capture.recording` to its operation, which settles them; they
   become ``effect`` events in the order they were issued (``operation.py`` says how
   ``effectsComplete`` is computed, D4, and when a capture's events are built). A span of a library
   reproit-otel does not record (httpx, redis, ...) makes the operation incomplete; the reason
   (library, span name) is counted in :meth:`ReproitSpanProcessor.stats` and logged once. So
   does a call recorded through a library installed outside the versions reproit-otel is
   tested with (``supported.py``: urllib3 1.25 under requests), with the library, its version
   and the tested range as the reason;
3. finishes the operation when the middleware sees the response start (or itself when the
   server span ends without middleware), and hands capture operations to the sinks
   (:class:`OperationSink`, e.g. the uploader) once the server span has ended: a healthy
   one only counted, a failing one unopened, for the uploader's thread to build.
   Scan-time operations are never captured: their events leave in the response header.

It never raises into the application (every hook runs in :func:`reproit_otel._guard.guarded`),
does no network I/O, and its tables are bounded: at most :data:`MAX_OPERATIONS` live
operations, each evicted after :data:`OPERATION_TTL_S` seconds if its server span never ends.
Concurrent requests (threads, asyncio tasks) are kept apart by their span ids.

Locks and finalizers. No finalizer, weakref callback, signal, ``atexit`` or GC callback of
reproit-otel takes a lock, allocates under a lock it could re-enter, or calls into the
pipeline: the collector runs finalizers on whichever thread allocates, possibly inside one of
the locked sections below. Finalizers hand their work over through
:func:`reproit_otel.capture.recording.hand_over` (a lock-free deque) or do nothing; the processor
settles it when a server span begins, recorders when a call starts, an operation when it
finishes, all with no lock held, and the uploader's thread settles it too, holding no lock
(``uploader.py``: so an idle worker does not keep it). Other code's finalizers end spans too
(a generator closed with its span open): while the thread is collecting
(``recording.collecting``), ``on_start`` and ``on_end`` hand themselves over the same way
instead of taking any lock. The locks the
application's threads take on the capture side, and why none can be waited on by a thread
that already holds it:

* the processor's lock (``_lock``, plain): the operation tables and the statistics. Taken last
  (after an operation's lock, never before one); under it only dict and counter updates run:
  no logging (:meth:`_note_reason` and the eviction warning log after releasing it), no
  redaction, no call into an operation, a sink or the application. ``_evict_locked`` only
  unlinks the evicted operations and marks them; their tallies and the warning follow after
  the release;
* an operation's lock and its trace's lock: see ``operation.py`` and ``wire/trace.py``;
* ``_guard``'s counter lock: a counter update, the log line is written after it;
* ``recording._secrets_lock``: see ``recording.py``;
* the uploader's condition (``uploader.py``): taken by :meth:`OperationSink.submit` after
  every lock above is released;
* ``_requests_record``: no lock (a one-item token finishes a call once).

Debugging: :class:`DebugDumpSink` writes every handed-off operation's events as canonical JSON
to ``<directory>/<traceId>.json`` (``REPROIT_DEBUG_DUMP=<directory>``).
"""

from __future__ import annotations

import contextvars
import hmac
import itertools
import logging
import os
import re
import tempfile
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation import _SPAN_KEY as _otel_span_key

from reproit_otel._guard import absorb, guarded
from reproit_otel.capture import recording
from reproit_otel.capture.inbound import (
    InboundRequest,
    current_inbound,
    run_deferred,
    single_or_list,
)
from reproit_otel.capture.operation import (
    _BESIDE_SCOPES,
    HEAVY_MAX_SPANS,
    MAX_SPANS_PER_OPERATION,
    ExchangeBinding,
    ExchangeState,
    Operation,
    OperationSettings,
    SpanRecord,
    _scope_name,
    is_dependency_span,
)
from reproit_otel.config import EffectsCompleteMode, ReproitConfig, load_config
from reproit_otel.errors import TraceError
from reproit_otel.failures import frame_roots, record_exception
from reproit_otel.redaction.core import scrub_secret_values, scrub_value
from reproit_otel.supported import unsupported_recorders
from reproit_otel.wire.canonical import canonical_json_bytes
from reproit_otel.wire.exception import exception_from_stacktrace
from reproit_otel.wire.inputs import http_input
from reproit_otel.wire.trace import (
    MAX_EVENTS,
    BackendTrace,
    TraceContext,
    bounded_operation,
    trace_context_from_headers,
)

__all__ = [
    "MAX_OPERATIONS",
    "OPERATION_TTL_S",
    "SCAN_TOKEN_HEADER",
    "DebugDumpSink",
    "OperationSink",
    "ReproitSpanProcessor",
]

_log = logging.getLogger("reproit_otel")

MAX_OPERATIONS = 1024
"""Live operations kept at once; the oldest is evicted past it."""
OPERATION_TTL_S = 600.0
"""An operation whose server span has not ended after this many seconds is evicted."""
SCAN_TOKEN_HEADER = "x-reproit-scan-token"
"""Request header that must carry ``REPROIT_SCAN_TOKEN`` for a scan request to be trusted."""
_TRACE_HEADER = "x-reproit-trace"
_MAX_REASON_KEYS = 256
# The context keys of the current span and of suppressed instrumentation: the current context is
# a dict, so one lookup of it answers both questions (``trace.get_current_span()`` and
# ``context.get_value()`` each look the context up again).
_SPAN_KEY: str = _otel_span_key
_SUPPRESS_KEY: str = otel_context._SUPPRESS_INSTRUMENTATION_KEY


def _context_getter() -> Callable[[], Context]:
    """``opentelemetry.context.get_current``, or, with the runtime context OpenTelemetry
    installs by default (a ``ContextVar``), that variable's ``get``: one call instead of
    three, for every recorded call."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    if type(runtime).__name__ == "ContextVarsRuntimeContext" and isinstance(
        variable, contextvars.ContextVar
    ):
        getter: Callable[[], Context] = variable.get
        return getter
    return otel_context.get_current


_current_context = _context_getter()


class OperationSink(Protocol):
    """Receives every finished capture operation (the uploader, the debug dump).

    A sink that only keeps failures may also define ``note_healthy()``: it is then called,
    instead of :meth:`submit`, for a capture that finished healthy (a status under 500 and no
    agent oracle marker) whose trace was never opened, so that trace is never built. A sink
    with a thread of its own may define ``submit_unopened(open_trace)``: it is called instead
    of :meth:`submit` for a failing capture whose trace is not opened yet, and calls
    ``open_trace()`` (which builds the events, holding no lock) on that thread.
    """

    def submit(self, trace: BackendTrace) -> None:
        """Take the finished trace; must not block or raise."""


class DebugDumpSink:
    """Write each finished operation's events to ``<directory>/<traceId>.json`` (canonical JSON).

    Meant for debugging and tests (``REPROIT_DEBUG_DUMP``); files are written atomically (a
    temporary file renamed into place), on the thread that ends the server span.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def submit(self, trace: BackendTrace) -> None:
        """Write the trace's events; failures are logged, never raised."""
        with guarded("debug_dump.submit"):
            self.directory.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9._-]", "_", str(trace.trace_id)) + ".json"
            data = canonical_json_bytes(trace.events)
            fd, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, self.directory / name)


def _attribute_text(span: ReadableSpan, *names: str) -> str | None:
    attributes = span.attributes or {}
    for name in names:
        value = attributes.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _status_of(span: ReadableSpan) -> int | None:
    attributes = span.attributes or {}
    for name in ("http.response.status_code", "http.status_code"):
        value = attributes.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


class ReproitSpanProcessor(SpanProcessor):
    """Begins, tracks and hands off ReproIt operations from the spans it sees."""

    def __init__(
        self,
        config: ReproitConfig | None = None,
        sinks: Sequence[OperationSink] = (),
        *,
        capture: bool | None = None,
        max_operations: int = MAX_OPERATIONS,
        operation_ttl_s: float = OPERATION_TTL_S,
    ) -> None:
        """``capture`` (default: true when a sink is given) synthesizes a capture context for
        every server operation; scan-time operations follow the configuration alone."""
        self.config = config if config is not None else load_config()
        self.sinks: list[OperationSink] = list(sinks)
        self._sink_calls = [_sink_calls(sink) for sink in self.sinks]
        # Sinks with a thread that settles handed-over work (the uploader): started at begin.
        self._settlers: list[Callable[[], None]] = [
            settler for settler in map(_settler_of, self.sinks) if settler is not None
        ]
        self.capture = bool(self.sinks) if capture is None else capture
        self._max_operations = max_operations
        self._ttl = operation_ttl_s
        self._lock = threading.Lock()
        self._operations: OrderedDict[tuple[int, int], Operation] = OrderedDict()
        self._spans: dict[tuple[int, int], Operation] = {}
        self._counter = itertools.count(1)
        self._stats: Counter[str] = Counter()
        self._reasons: Counter[str] = Counter()
        self._shutdown = False
        self._watching = False  # recording.watch_collections() called
        self._secrets: tuple[str, ...] = self.config.secret_values
        self._registered: tuple[str, ...] = ()
        # Recorders whose calls go through a library outside the tested versions, with the
        # reason every operation recording such a call is incomplete for (supported.py, D4).
        self._unsupported: dict[str, str] = {}
        with guarded("processor.supported"):
            self._unsupported = unsupported_recorders()
        config = self.config
        never = config.effects_complete is EffectsCompleteMode.NEVER
        # Heavy capture: an operation past the 256-event trace limit is still recorded whole,
        # for the uploader to send as an artifact (see uploader.py); never a scan.
        heavy = config.capture_budget > 0
        self._capture_settings = OperationSettings(
            secrets=self._current_secrets,
            on_ready=self._hand_off,
            on_reason=self._note_reason,
            on_tally=self._take_tally,
            on_incomplete=self._count_incomplete,
            effects_never=never,
            max_spans=HEAVY_MAX_SPANS if heavy else MAX_SPANS_PER_OPERATION,
            budget=config.capture_budget if heavy else 0,
            build=config.build,
            max_events=config.capture_max_events if heavy else MAX_EVENTS,
        )
        self._scan_settings = OperationSettings(
            secrets=self._current_secrets,
            on_ready=self._hand_off,
            on_reason=self._note_reason,
            on_tally=self._take_tally,
            effects_never=never,
        )
        recording.set_pipeline(self)

    # -- public -----------------------------------------------------------------------------

    def add_sink(self, sink: OperationSink) -> None:
        """Also hand finished capture operations to ``sink`` (turns capture on)."""
        self.sinks.append(sink)
        self._sink_calls = [*self._sink_calls, _sink_calls(sink)]
        settler = _settler_of(sink)
        if settler is not None:
            self._settlers.append(settler)
        self.capture = True

    def stats(self) -> dict[str, Any]:
        """Counters: operations begun/finished/submitted, evictions, exchanges, incompleteness.

        ``incomplete_reasons`` maps ``"<library>: <span name>"`` (or another reason) to how
        many operations it made incomplete.
        """
        with self._lock:
            result: dict[str, Any] = dict(self._stats)
            result["live_operations"] = len(self._operations)
            result["incomplete_reasons"] = dict(self._reasons)
        return result

    # -- SpanProcessor ----------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Begin an operation at a local-root SERVER span; track spans under an operation."""
        if self._shutdown:
            return
        if recording.collecting.active:  # a finalizer started it: see _settle_later
            self._settle_later(self.on_start, span, parent_context)
            return
        try:
            # An SDK span's fields are read directly and its SpanContext (a tuple: trace id,
            # span id, remote flag, ...) by index: each property costs a call, and this runs
            # for every span of every request. Another span class takes the public way.
            try:
                parent: Any = span._parent
                context: Any = span._context
            except AttributeError:
                parent, context = span.parent, span.get_span_context()
            if parent is None or parent[2]:  # a local root: maybe an operation begins
                self._on_start(span, context)
                return
            spans = self._spans
            if not spans:
                return  # nothing is being recorded
            trace_id = context[0]
            parent_id = parent[1]
            operation = spans.get((trace_id, parent_id))
            if operation is None or operation.evicted:
                return
            span_id = context[1]
            if not operation.eager and not operation._closed:
                # A healthy request's span: logged by reference, its coverage decided only if
                # it is needed (operation.py, ``span_log``). A span SQLAlchemy opens beside its
                # statements, or one past the limit, is judged as it happens.
                log = operation.span_log
                try:  # an SDK span's scope name, read directly
                    scope: str | None = span._instrumentation_scope._name  # type: ignore[union-attr]
                except AttributeError:
                    scope = _scope_name(span)
                if len(log) < operation._settings.max_spans and scope not in _BESIDE_SCOPES:
                    log.append((span_id, parent_id, span))
                    spans[(trace_id, span_id)] = operation  # one dict store: atomic
                    binding = _open_binding.binding
                    if (
                        binding is not None
                        and binding.span_id == parent_id
                        and binding.operation is operation
                        and binding.adoptable is None
                        and binding.state is ExchangeState.PENDING
                        and is_dependency_span(span)
                    ):
                        binding.adoptable = span_id
                    return
                operation.make_eager()
            dependency = is_dependency_span(span)
            record = SpanRecord(span_id, parent_id, span, dependency)
            if operation.add_span(record):
                spans[(trace_id, span_id)] = operation  # one dict store: atomic
                if dependency:
                    binding = _open_binding.binding
                    if (
                        binding is not None
                        and binding.operation is operation
                        and binding.span_id == parent_id
                    ):
                        operation.adopt(binding, record)
        except Exception as exc:
            absorb("processor.on_start", exc)

    def on_end(self, span: ReadableSpan) -> None:
        """Settle a span's coverage; hand off an operation whose server span ended."""
        if self._shutdown or not self._spans:
            return
        if recording.collecting.active:  # a finalizer ended it: see _settle_later
            self._settle_later(self.on_end, span)
            return
        try:
            try:  # see on_start
                context: Any = span._context
            except AttributeError:
                context = span.get_span_context()
            if context is None:
                return
            span_id = context[1]
            operation = self._spans.get((context[0], span_id))
            if operation is None:
                return
            if span_id != operation.root_span_id:
                if operation.eager:  # else its coverage is decided later (see on_start)
                    operation.end_span(span_id, span)
                return
            self._on_end(span, operation)
        except Exception as exc:
            absorb("processor.on_end", exc)

    @staticmethod
    def _settle_later(hook: Callable[..., None], *args: Any) -> None:
        """Hand a span hook over: the collector runs finalizers (a generator or coroutine
        closed with its span open) inside whatever the thread was doing, maybe one of our
        locked sections, so the hook runs at the next one that holds no lock."""
        recording.hand_over(partial(hook, *args))

    def shutdown(self) -> None:
        """Stop recording (may be called twice) and close the sinks (``close``/``shutdown``)."""
        if self._shutdown:
            return
        self._shutdown = True
        recording.clear_pipeline(self)
        for sink in self.sinks:
            with guarded("processor.shutdown"):
                stop = getattr(sink, "close", None) or getattr(sink, "shutdown", None)
                if callable(stop):
                    stop()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush sinks that can be flushed; True when all of them reported success."""
        ok = True
        for sink in self.sinks:
            with guarded("processor.force_flush"):
                flush = getattr(sink, "flush", None) or getattr(sink, "force_flush", None)
                if callable(flush):
                    ok = bool(flush(timeout_millis / 1000.0)) and ok
        return ok

    # -- recording pipeline (reproit_otel.capture.recording) --------------------------------

    def has_live_operations(self) -> bool:
        """True while an operation is being recorded (the recorders' cheap check)."""
        return bool(self._operations) and not self._shutdown

    def begins_operations(self) -> bool:
        """Whether a server request may begin an operation (capture on, or scan mode)."""
        return (self.capture or self.config.scan) and not self._shutdown

    checks_suppression = True
    """:meth:`start_exchange` answers None itself under suppressed instrumentation (it reads
    the current context anyway), so :func:`reproit_otel.capture.recording.start_exchange`
    need not."""

    def start_exchange(self, library: str) -> recording.ExchangeRecorder | None:
        """Bind a new exchange to the current span's operation (or None: nothing records,
        including reproit-otel's own and exporters' traffic: instrumentation suppressed)."""
        if self._shutdown or not self._operations:
            return None
        context = _current_context()
        if context.get(_SUPPRESS_KEY):
            return None
        span: Any = context.get(_SPAN_KEY)
        operation: Operation | None = None
        span_id: int | None = None
        if span is not None:  # _current_operation(), inline: this runs for every call
            try:
                span_context: Any = span._context  # an SDK span: see _on_start
            except AttributeError:
                span_context = span.get_span_context()
            span_id = span_context[1]
            operation = self._spans.get((span_context[0], span_id))
        if operation is None or operation.evicted:
            operation, span_id = self._request_operation()
            if operation is None:
                return None
        # The binding is the recorder: its owner, the operation, settles the exchange (and
        # hands its counters to the processor if it comes after the hand-off).
        binding = operation.bind_exchange(span_id, library)
        _open_binding.binding = binding
        if self._unsupported:
            unsupported = self._unsupported.get(library)
            if unsupported is not None:
                operation.mark_incomplete(unsupported)
        return binding

    def mark_incomplete(self, reason: str) -> None:
        """An unrecordable call in the current operation: its effects become incomplete."""
        operation, _ = self._current_operation()
        if operation is not None:
            operation.mark_incomplete(reason)

    def cover_current_span(self) -> None:
        """The current dependency span needs no exchange of its own (see
        :meth:`~reproit_otel.capture.operation.Operation.cover_span`)."""
        if self._shutdown or not self._operations:
            return
        operation, span_id = self._current_operation()
        if operation is not None:
            operation.cover_span(span_id)

    # -- internals --------------------------------------------------------------------------

    def note_exception(self, error: BaseException) -> None:
        """The current request raised ``error``: keep it on its operation (``failures.py``)."""
        operation, _ = self._current_operation()
        if operation is not None and not operation.scan:
            operation.note_error(partial(record_exception, error))

    def _take_tally(self, operation: Operation) -> None:
        """Add what ``operation`` counted since the last call to the statistics."""
        tally = operation.take_tally()
        if any(tally):
            with self._lock:
                self._add_locked(tally)

    def _count_incomplete(self, operation: Operation) -> None:
        """``operation`` was found incomplete after its hand-off (building a failure's events
        on the uploader's thread): count it as the hand-off would have."""
        with self._lock:
            self._stats["incomplete_operations"] += 1

    def _add_locked(self, tally: tuple[int, int, int, int]) -> None:
        stats = self._stats
        started, recorded, lost, failed = tally
        if started:
            stats["exchanges_started"] += started
        if recorded:
            stats["exchanges_recorded"] += recorded
        if lost:
            stats["exchanges_lost"] += lost
        if failed:
            stats["exchanges_failed"] += failed

    def _current_operation(self) -> tuple[Operation | None, int | None]:
        context = otel_context.get_current()
        span: Any = context.get(_SPAN_KEY)
        if span is not None:
            span_context = span.get_span_context()
            span_id = span_context.span_id
            operation = self._spans.get((span_context.trace_id, span_id))
            if operation is not None and not operation.evicted:
                return operation, span_id
        return self._request_operation()

    def _request_operation(self) -> tuple[Operation | None, None]:
        """The operation of the current inbound request, for a call outside our spans (another
        provider's span, a non-recording span)."""
        inbound = current_inbound()
        if inbound is not None and inbound.operation is not None:
            operation = inbound.operation
            if not operation.evicted and not operation.handed_off:
                return operation, None
        return None, None

    def _on_start(self, span: Span, context: Any) -> None:
        """A local-root span started (``context``: its SpanContext)."""
        if (self.capture or self.config.scan) and span.kind is SpanKind.SERVER:
            if recording.handed_over:  # what finalizers handed over: no lock is held here
                recording.settle_handed_over()
            if not self._watching:
                self._watching = True
                recording.watch_collections()
            self._begin(span, context[0], context[1])

    def _current_secrets(self) -> tuple[str, ...]:
        """Configured secret values plus those registered since (``reproit_otel.secrets``)."""
        registered = recording.registered_secret_values()
        if registered != self._registered:
            self._registered = registered
            self._secrets = tuple(dict.fromkeys((*self.config.secret_values, *registered)))
        return self._secrets

    def _trusted_scan_context(self, inbound: InboundRequest | None) -> TraceContext | None:
        if inbound is None or not self.config.scan:
            return None
        if inbound.header(_TRACE_HEADER) is None:
            return None
        token = self.config.scan_token
        if token is not None:
            sent = inbound.header(SCAN_TOKEN_HEADER)
            if sent is None or not hmac.compare_digest(sent.encode(), token.encode()):
                with self._lock:
                    self._stats["scan_requests_refused"] += 1
                return None
        return trace_context_from_headers(inbound.header)

    def _begin(self, span: Span, trace_id: int, span_id: int) -> None:
        inbound = current_inbound()
        if inbound is not None and inbound.operation is not None:
            return  # a second server span in the same request (nested instrumentation)
        scan_context = self._trusted_scan_context(inbound) if self.config.scan else None
        if scan_context is None and not self.capture:
            return
        if scan_context is None:
            for keep_settling in self._settlers:  # no lock held; a no-op once it runs
                keep_settling()
        source: Callable[[], Any]
        if inbound is not None:
            name = inbound.operation_name
            # Not the bound inbound.canonical_input: the trace must not hold the request (the
            # request holds the operation, which holds the trace).
            source = inbound.input_factory or partial(_same, inbound.input)
        else:
            name, input_value = self._from_attributes(span)
            source = partial(_same, input_value)
        secret_values = self._current_secrets()
        if secret_values:
            # D8: a configured secret in the path would ride in the operation name, which every
            # event, span id and listing repeats.
            name = scrub_secret_values(name, secret_values)
        trace: BackendTrace | None = None
        bounded: str | None = None
        try:
            if scan_context is not None:
                input_value = source()
                secret_values = self._current_secrets()
                if secret_values:
                    input_value = scrub_value(input_value, secret_values)
                trace = BackendTrace.begin(scan_context, name, input=input_value)
            else:
                # A capture: its trace is opened, and the input built, scrubbed and redacted,
                # only if the operation is wanted (operation.py, "Lazy traces"); the name is
                # bounded now, as BackendTrace.begin would.
                bounded = bounded_operation(name)
        except TraceError as exc:
            with self._lock:
                self._stats["untraced_requests"] += 1
            _log.debug("reproit-otel: request %r not traced: %s", name, exc.code)
            return
        if trace is not None:
            operation = Operation(trace, self._scan_settings, trace_id, span_id, inbound)
        else:
            operation = Operation(
                None,
                self._capture_settings,
                trace_id,
                span_id,
                inbound,
                name=bounded or "",
                input_factory=source,
                number=next(self._counter),
            )
        key = (trace_id, span_id)
        evicted: list[Operation] = []
        with self._lock:
            if self._operations:
                evicted = self._evict_locked()
            self._operations[key] = operation
            self._spans[key] = operation
            self._stats["scan_operations" if operation.scan else "capture_operations"] += 1
        if inbound is not None:
            inbound.operation = operation
            for work in run_deferred(inbound):  # what the request did before its span
                with guarded("processor.deferred"):
                    work()
        for old in evicted:
            self._take_tally(old)  # not under the processor's lock: operations lock first
            _log.warning(
                "reproit-otel: operation %r evicted (its server span did not end in time)",
                old.name,
            )

    def _from_attributes(self, span: Span) -> tuple[str, dict[str, Any]]:
        method = _attribute_text(span, "http.request.method", "http.method") or "GET"
        target = _attribute_text(span, "url.path", "http.target")
        if target is None:
            # A server that sets neither RAW_URI nor REQUEST_URI (wsgiref, Django's
            # runserver) leaves only the full URL; its path is the concrete one.
            target = _target_of(_attribute_text(span, "url.full", "http.url"))
        path, _, query = target.partition("?")
        query = _attribute_text(span, "url.query") or query
        if not path:
            return span.name, http_input()
        parsed = single_or_list(parse_qs(query, keep_blank_values=True)) if query else {}
        return f"{method} {path}", http_input(query=parsed)

    def _evict_locked(self) -> list[Operation]:
        evicted: list[Operation] = []
        now = time.monotonic()
        while self._operations:
            key, oldest = next(iter(self._operations.items()))
            too_many = len(self._operations) >= self._max_operations  # room for one more
            if not too_many and now - oldest.created <= self._ttl:
                break
            del self._operations[key]
            self._drop_spans_locked(oldest)
            oldest.evicted = True
            oldest.let_go()
            evicted.append(oldest)
            self._stats["evicted_operations"] += 1
        return evicted

    def _drop_spans_locked(self, operation: Operation) -> None:
        trace_id = operation.otel_trace_id
        for entry in operation.span_log:
            self._spans.pop((trace_id, entry[0]), None)
        for span_id in list(operation.spans):
            self._spans.pop((trace_id, span_id), None)
        self._spans.pop((trace_id, operation.root_span_id), None)

    def _on_end(self, span: ReadableSpan, operation: Operation) -> None:
        """The server span of ``operation`` ended."""
        if operation.error is None and not operation.scan and span.events:
            # No hook saw the exception: the span's exception event is the next best source.
            operation.note_error(partial(_error_of_span, span))
        if operation.inbound is None and not operation.finished:
            # No middleware ran: the span's attributes are all we know about the response.
            operation.finish(_status_of(span))
        if operation.end_root():
            self._hand_off(operation)

    def _note_reason(self, operation: Operation, reason: str) -> None:
        with self._lock:
            first = reason not in self._reasons
            if first and len(self._reasons) >= _MAX_REASON_KEYS:
                reason, first = "other", False
            self._reasons[reason] += 1
        if first:
            _log.info(
                "reproit-otel: effects of %r are incomplete: %s "
                "(calls reproit-otel does not record make a capture incomplete; "
                "logged once per reason)",
                operation.name,
                reason,
            )

    def _hand_off(self, operation: Operation) -> None:
        # Taken before the processor's lock: an operation's lock is never taken inside it.
        tally = operation.take_tally()
        with self._lock:
            stats = self._stats
            self._add_locked(tally)
            if operation.handed_off or operation.evicted:
                return
            operation.handed_off = True
            # The request and its operation point at each other; let go of that cycle here
            # so both are freed without the cyclic garbage collector.
            operation.inbound = None
            self._operations.pop((operation.otel_trace_id, operation.root_span_id), None)
            self._drop_spans_locked(operation)
            stats["operations_finished"] += 1
            if operation.reasons:
                stats["incomplete_operations"] += 1
            if operation.scan:
                return
            if operation.late:
                stats["late_effect_operations"] += 1
                operation.let_go()
                return
            stats["operations_submitted"] += 1
        if not operation.trace_opened:
            # A capture whose trace was never opened. Healthy (no failure status, no oracle
            # marker): a sink that only takes failures hears of it without its trace being
            # opened. Failing: a sink that can opens it on its own thread, so its events are
            # built there rather than on the request's.
            wanted = operation.wanted
            for sink, healthy, unopened in self._sink_calls:
                try:
                    if not wanted and healthy is not None:
                        healthy()
                    elif wanted and unopened is not None:
                        unopened(operation.open_trace)
                    else:
                        sink.submit(operation.trace)
                except Exception as exc:
                    absorb("processor.sink", exc)
            if not wanted:
                operation.let_go()
            return
        for sink in self.sinks:
            try:
                sink.submit(operation.trace)
            except Exception as exc:
                absorb("processor.sink", exc)


def _sink_calls(
    sink: OperationSink,
) -> tuple[
    OperationSink,
    Callable[[], None] | None,
    Callable[[Callable[[], BackendTrace]], None] | None,
]:
    """The sink, and its ``note_healthy`` and ``submit_unopened`` if it has them (see
    :class:`OperationSink`)."""
    note = getattr(sink, "note_healthy", None)
    unopened = getattr(sink, "submit_unopened", None)
    return sink, note if callable(note) else None, unopened if callable(unopened) else None


def _settler_of(sink: OperationSink) -> Callable[[], None] | None:
    """The sink's ``keep_settling`` (a thread that settles handed-over work), if it has one."""
    settler = getattr(sink, "keep_settling", None)
    return settler if callable(settler) else None


def _target_of(url: str | None) -> str:
    """Path and query of a full URL (``http://h/a/b?q=1`` -> ``/a/b?q=1``), percent-decoded
    like a WSGI ``PATH_INFO``; ``""`` when there is none."""
    if not url:
        return ""
    parts = urlsplit(url)
    path = unquote(parts.path)
    return f"{path}?{parts.query}" if parts.query else path


def _error_of_span(span: ReadableSpan, secrets: tuple[str, ...]) -> dict[str, Any] | None:
    """The exception of the span's last ``exception`` event, else None."""
    for event in reversed(span.events):
        if event.name != "exception":
            continue
        attributes = event.attributes or {}
        type_name = attributes.get("exception.type")
        if not isinstance(type_name, str) or not type_name:
            continue
        message = attributes.get("exception.message")
        stacktrace = attributes.get("exception.stacktrace")
        return exception_from_stacktrace(
            type_name,
            message if isinstance(message, str) else "",
            stacktrace if isinstance(stacktrace, str) else "",
            frame_roots(),
            secrets,
        )
    return None


def _same(value: Any) -> Any:
    return value


class _OpenBinding(threading.local):
    binding: ExchangeBinding | None = None


# The exchange most recently started on this thread: a dependency span that starts right under
# the span the exchange was bound to (a transport span below a recorder) is covered by it.
_open_binding = _OpenBinding()
