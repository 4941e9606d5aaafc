"""One server operation being recorded: its trace, its spans and its exchanges.

An :class:`Operation` is created by the span processor when a local-root SERVER span starts
(``processor.py``). It owns the :class:`~reproit_otel.wire.trace.BackendTrace` of the request
and the bookkeeping that decides ``effectsComplete`` (PROTOCOL decision D4):

* every span started under the operation's server span is tracked (parent, kind, name,
  instrumentation library), up to :data:`MAX_SPANS_PER_OPERATION` (:data:`HEAVY_MAX_SPANS` for
  a capture while heavy capture is on): noted by reference as it starts, and judged only when
  the judgement is needed (a failing capture opened, see ``span_log`` in
  :meth:`Operation.__init__`), so a healthy request pays one append per span;
* a *dependency span* is a CLIENT span or a span with a ``db.system`` / ``db.system.name``
  attribute; each must be covered by a recorded exchange. An exchange covers the span that was
  current when the recorder started it (or that span's nearest dependency ancestor); a nested
  transport span (urllib3 under requests) is covered by its covered dependency ancestor;
* effects are complete when, at the moment the response starts, no dependency span went
  uncovered, no exchange failed or is still pending, no unrecordable call was reported, and
  the configuration does not force ``never``.

Exchanges of a capture become ``effect`` events in the order their calls were *issued*
(:func:`_in_issue_order`), not the order they completed: concurrent calls of one operation
(an ``asyncio.gather``, a streamed body read after later calls) keep the place the code gave
them, which is the order a replay issues them in (``docs/replay.md``, "Concurrent calls").
A trace opened before its operation finished (scan time, an agent oracle marker) takes the
exchanges that complete after that in completion order. Configured secret values (D8) are
replaced in every string of an exchange, its key and resource, and of the output.

Lazy traces. A capture is uploaded only when the operation fails (status 500 or more, or a
marked agent oracle), so a capture operation is one flat record until it is wanted: it keeps
the request's input source, the monotonic origin and the ``start`` event's stamp
(``sequence``, ``at``, ``monoNs``), then, for each exchange a recorder hands over with
:meth:`~reproit_otel.capture.recording.ExchangeRecorder.finish_deferred`, its raw builder and the
stamp it got when it completed, and at the finish the ``return`` event's fields and stamp. No
:class:`~reproit_otel.wire.trace.BackendTrace` exists yet. The trace is *opened*
(:meth:`Operation.open_trace`, or reading :attr:`Operation.trace`) only when someone needs it:
it is then built from the record (``BackendTrace.reopened`` and the stamps), so its events are
byte for byte those of a trace opened at the start. A healthy capture is never opened (the
uploader only counts it); a failing one is handed to the uploader unopened and opened on the
uploader's thread, where its exchanges are built (bounded, keyed, scrubbed, redacted) before
its ``return`` event is pushed, so that an exchange that turns out to be unrecordable still
makes ``effectsComplete`` false; a sink that reads events on the request thread (the debug
dump) opens it there. An agent oracle marker opens the trace when it is pushed; an exchange
handed over already built (an invoke boundary's) waits in the record like a deferred one,
its build giving it back. Scan-time operations open their trace at once and build everything
as it comes.
While heavy capture is on, what a capture holds is bounded as it is recorded: once the
exchanges kept reach the capture budget (``REPROIT_CAPTURE_BUDGET``, by the bytes each
recorder says it keeps), later ones are settled but not kept, only counted
(``BackendTrace.unheld_effects``): the operation is then sent as the bounded batch, ``partial``
with those counts, as one past the budget at upload is. The event cap
(``REPROIT_CAPTURE_MAX_EVENTS``) is met the same way: once only the ``return`` event would
still fit, later exchanges are settled and counted (``BackendTrace.capped_effects``), so the
operation still finishes and is sent, ``partial``. The
operation is *finished* when the middleware sees the response start (or, without middleware,
when the server span ends) and *handed off* to the sinks once it is finished and its server
span has ended, whichever comes last. Dependency activity after the finish (a background
call still running under the request's context) cannot be recorded any more: it is counted
and the operation is not handed off, because its ``effectsComplete: true`` would no longer
be true.

Every method is safe to call from any thread; state changes happen under the operation's lock.

Locks. The operation's lock is a plain ``threading.Lock``. Lock order: operation, then the
trace's (the operation pushes under its own lock), then the processor's (stats); the
processor never takes an operation's lock while holding its own. Under the operation's lock
nothing logs, builds, redacts or scrubs, and no code of the application or of another
library runs: reasons met under it are queued and reported to the processor (which counts
and logs them) after it is released, deferred exchanges and the output are built and
scrubbed before :meth:`Operation.finish` takes it, the ``return`` event is pushed after the
operation is closed under it, and a noted exception is redacted into the output with it
released. A finalizer never reaches it: reproit-otel's own only hand work over, and while a
thread is collecting, the hooks other code's finalizers may call (a span ended, an exchange
finished, an operation finished) hand themselves over instead of taking it (``recording.py``,
"Finalizers"); :meth:`Operation.finish` settles that work before it takes the lock. So no hook
of ours can wait on this lock on a thread that already holds it (a re-entrant lock would only
have let such a hook change the operation half way through a finish).
"""

from __future__ import annotations

import enum
import functools
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.trace import SpanKind

from reproit_otel._guard import absorb, guarded
from reproit_otel.capture import recording
from reproit_otel.capture.recording import DeferredExchange, Unrecordable
from reproit_otel.config import CAPTURE_MAX_EVENTS_CEILING
from reproit_otel.errors import TraceError
from reproit_otel.redaction.core import placehold_equal, redact, scrub_secret_values, scrub_value
from reproit_otel.redaction.headers import header_credentials
from reproit_otel.wire import trace_log
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.exact_body import scrub_exact_bytes
from reproit_otel.wire.exception import output_with_error
from reproit_otel.wire.request_record import scrub_request_bytes
from reproit_otel.wire.trace import (
    MAX_EVENTS,
    BackendTrace,
    CaptureContext,
    Stamp,
    marked_oracle,
)
from reproit_otel.wire.trace_events import _BOUNDARY_EFFECTS

__all__ = [
    "HEAVY_MAX_EVENTS",
    "HEAVY_MAX_SPANS",
    "MAX_INCOMPLETE_REASONS",
    "MAX_SPANS_PER_OPERATION",
    "ExchangeState",
    "Operation",
    "SpanRecord",
]

MAX_SPANS_PER_OPERATION = 1024
"""Spans tracked per operation; past it new spans are not tracked and effects are incomplete."""
HEAVY_MAX_EVENTS = CAPTURE_MAX_EVENTS_CEILING
"""Events a capture operation may hold at most when heavy capture is on
(``REPROIT_CAPTURE_BUDGET``); ``REPROIT_CAPTURE_MAX_EVENTS`` may lower it."""
HEAVY_MAX_SPANS = 2 * HEAVY_MAX_EVENTS
"""Spans tracked per capture operation when heavy capture is on (a call may nest two spans)."""
MAX_INCOMPLETE_REASONS = 16
"""Distinct incompleteness reasons kept per operation (the first ones)."""


class ExchangeState(enum.Enum):
    """Where a span stands with respect to its recorded exchange."""

    NONE = "none"
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


_library_names: dict[str, str] = {}
_LIBRARY_PREFIX = "opentelemetry.instrumentation."
_MAX_LIBRARY_NAMES = 256


def library_of(scope: Any) -> str:
    """The library an instrumentation scope names (``opentelemetry.instrumentation.`` cut)."""
    name = getattr(scope, "name", None) or "unknown"
    library = _library_names.get(name)
    if library is None:
        library = name[len(_LIBRARY_PREFIX) :] if name.startswith(_LIBRARY_PREFIX) else name
        if len(_library_names) < _MAX_LIBRARY_NAMES:
            _library_names[name] = library
    return library


_DB_ATTRIBUTES = ("db.system", "db.system.name")

# Instrumentations whose statement spans are never made current: SQLAlchemy's starts its span
# in ``before_cursor_execute`` and ends it in ``after_cursor_execute``, so the driver call
# (and its recorded exchange) runs beside the span, not under it. Such a span is covered by the
# database exchange that starts on the same thread while it is open; a span with no such
# exchange (an engine on a driver reproit-otel does not record, e.g. pg8000) stays uncovered.
_BESIDE_LIBRARIES = frozenset({"sqlalchemy"})
_BESIDE_SCOPES = frozenset(
    {*_BESIDE_LIBRARIES, *(_LIBRARY_PREFIX + library for library in _BESIDE_LIBRARIES)}
)
# Recorders whose exchanges are database statements (they may cover a span open beside them).
_DATABASE_RECORDERS = frozenset({"psycopg2", "psycopg"})


def is_dependency_span(span: Any) -> bool:
    """A CLIENT span, or a span with a ``db.system`` / ``db.system.name`` attribute."""
    try:  # an SDK span's fields, read directly: each property costs a call, for every span
        kind = span._kind
        attributes = span._attributes
    except AttributeError:
        kind, attributes = span.kind, span.attributes
    if kind is SpanKind.CLIENT:
        return True
    if not attributes:
        return False
    return any(name in attributes for name in _DB_ATTRIBUTES)


def _scope_name(span: Any) -> str | None:
    """The name of the instrumentation scope that made ``span``."""
    try:
        scope = span._instrumentation_scope  # an SDK span: see is_dependency_span
    except AttributeError:
        scope = getattr(span, "instrumentation_scope", None)
    name = getattr(scope, "name", None)
    return name if isinstance(name, str) else None


class SpanRecord:
    """What the processor keeps about one span of an operation."""

    __slots__ = ("dependency", "ended", "exchange", "parent_id", "span", "span_id")

    def __init__(self, span_id: int, parent_id: int | None, span: Any, dependency: bool) -> None:
        self.span_id = span_id
        self.parent_id = parent_id
        self.span = span
        """The OpenTelemetry span: its name and library are read only for a reason."""
        self.dependency = dependency
        self.exchange = ExchangeState.NONE
        self.ended = False

    @property
    def name(self) -> str:
        """The span's name."""
        name: str = self.span.name
        return name

    @property
    def library(self) -> str:
        """The instrumentation library that made the span (``requests``, ``httpx``...)."""
        return library_of(self.span.instrumentation_scope)


class ExchangeBinding(recording.ExchangeRecorder):
    """One exchange of an operation: the recorder a recorder reports to, and its own handle
    (one object per call instead of two)."""

    __slots__ = (
        "adoptable",
        "beside",
        "counts_held",
        "issued",
        "operation",
        "span_id",
        "state",
        "target",
    )

    def __init__(
        self,
        operation: Operation,
        span_id: int | None,
        target: int | None,
        library: str = "",
        issued: int = 0,
    ) -> None:
        # recording.ExchangeRecorder's fields: its owner is the operation, its handle itself.
        self._owner: Any = operation
        self._handle = None
        self._unclaimed = [True]
        self.library = library
        self.operation = operation
        self.span_id = span_id
        """The span that was current when the exchange started (None: not a span of ours)."""
        self.target = target
        """The dependency span this exchange covers, if any."""
        self.beside: int | None = None
        """A wrapper span open beside the exchange that it also covers (see ``_BESIDE``)."""
        self.state = ExchangeState.PENDING
        self.adoptable: int | None = None
        """The first dependency span started right under ``span_id`` while the exchange was
        pending, before the operation was eager: it covers that span when it has no other."""
        self.issued = issued
        """The exchange's place in the order the operation's calls were issued (started)."""
        self.counts_held = operation._settings.budget > 0

    def finish_deferred(self, effect: str, build: DeferredExchange, held: int = 0) -> None:
        """:meth:`recording.ExchangeRecorder.finish_deferred`, handed straight to the
        operation (every recorded call of a capture passes here)."""
        if recording.collecting.active:  # a finalizer, maybe inside one of our locked sections
            recording.hand_over(functools.partial(self.finish_deferred, effect, build, held))
            return
        try:  # claimed once: see recording.ExchangeRecorder
            self._unclaimed.pop()
        except IndexError:
            return
        try:
            if effect in recording.EFFECT_KINDS:
                self.operation.exchange_deferred(self, effect, build, self.library, held)
            else:
                self.operation.exchange_failed(
                    self, f"{self.library}: unknown effect kind {effect!r}"
                )
        except Exception as exc:
            absorb(f"recording.finish[{self.library}]", exc)


_monotonic_ns = time.monotonic_ns
_time_ns = time.time_ns

_NO_FAILURES: list[str] = []  # shared and never appended to: an empty list to read


class OperationSettings:
    """What every operation a processor begins shares: its limits and its callbacks."""

    __slots__ = (
        "budget",
        "build",
        "effects_never",
        "max_events",
        "max_spans",
        "on_incomplete",
        "on_ready",
        "on_reason",
        "on_tally",
        "secrets",
    )

    def __init__(
        self,
        *,
        secrets: Callable[[], tuple[str, ...]],
        on_ready: Callable[[Operation], None],
        on_reason: Callable[[Operation, str], None],
        on_tally: Callable[[Operation], None] | None = None,
        on_incomplete: Callable[[Operation], None] | None = None,
        effects_never: bool = False,
        max_spans: int = MAX_SPANS_PER_OPERATION,
        budget: int = 0,
        build: str | None = None,
        max_events: int = MAX_EVENTS,
    ) -> None:
        """``secrets()`` gives the secret values to scrub (D8); ``on_ready(operation)`` hands
        a finished operation off, ``on_reason(operation, reason)`` counts and logs a reason
        of incompleteness, ``on_tally(operation)`` takes the exchange counters of an exchange
        settled after the hand-off, ``on_incomplete(operation)`` counts an operation found
        incomplete only after the hand-off (a failure's exchange that could not be built on
        the uploader's thread). ``effects_never``: ``REPROIT_EFFECTS_COMPLETE=never``.
        ``max_spans`` spans are tracked at most; ``budget`` is the capture budget in bytes (0:
        none); ``build`` and ``max_events`` go into a capture's trace."""
        self.secrets = secrets
        self.on_ready = on_ready
        self.on_reason = on_reason
        self.on_tally = on_tally
        self.on_incomplete = on_incomplete
        self.effects_never = effects_never
        self.max_spans = max_spans
        self.budget = budget
        self.build = build
        self.max_events = max(MAX_EVENTS, max_events)


class Operation:
    """The recording of one server operation. Created by the span processor."""

    # State every operation starts with, read from the class until an operation changes it
    # (an operation begins for every request: fewer stores each time).
    held = 0
    """Bytes of deferred exchanges held (the capture budget bounds them)."""
    pending = 0
    issued = 0
    """Exchanges started so far: the next one's place in the order of issue."""
    # Counters the processor adds to its own when it lets go of the operation (one lock per
    # operation instead of one per exchange); see take_tally().
    _started = _recorded = _lost = _failed = 0
    late = False
    # Set under the lock when finish() decides effectsComplete: from then on exchanges and
    # spans are late. ``finished`` follows once the return event is pushed.
    _closed = False
    finished = False
    span_ended = False
    handed_off = False
    evicted = False
    status: int | None = None
    error: dict[str, Any] | None = None
    """The exception the request raised (``wire.exception``), once one was noted."""
    _error_attached = False
    wanted = False
    """Whether a capture that finished with its trace not opened is a failure to upload
    (status 500 or more): the uploader opens it (see "Lazy traces")."""
    _trace: BackendTrace | None = None
    # A capture's return event while its trace is not opened (see "Lazy traces").
    _returned: tuple[Any, ...] | None = None
    # Reasons met while building deferred exchanges, taken over at the finish: a list of the
    # operation's own from the first builder on (builders append to it from any thread).
    _build_failures: list[str] = _NO_FAILURES
    # Open spans of _BESIDE_LIBRARIES by thread, innermost last (made on first use).
    _beside: dict[int, list[SpanRecord]] | None = None
    # Heavy capture's uncounted effects by kind (the trace's unheld_effects and capped_effects
    # once it is opened); made on first use.
    _unheld: dict[str, int] | None = None
    _capped: dict[str, int] | None = None

    eager = False
    """Whether span coverage is kept as spans start and end (see ``span_log``)."""

    scan = False
    """Whether this is a scan-time operation (its events leave in the response header)."""

    def __init__(
        self,
        trace: BackendTrace | None,
        settings: OperationSettings,
        otel_trace_id: int,
        root_span_id: int,
        inbound: object | None,
        *,
        name: str = "",
        input_factory: Callable[[], Any] | None = None,
        number: int = 0,
    ) -> None:
        """``trace`` is the operation's open trace (a scan-time operation); ``None`` for a
        capture, whose trace is opened only if it is wanted (see "Lazy traces"): ``name`` (the
        bounded operation name), ``input_factory`` (the deferred ``start`` input) and
        ``number`` (of its capture context ``cap-<ms>-<number>``, PROTOCOL 5.2; the replay
        seed is drawn when the trace opens) describe that trace. ``settings`` are the
        processor's, shared by every operation it begins."""
        self._settings = settings
        # Original values redaction hid from this operation's calls (a failing statement's
        # parameters its error echoes), in a box shared with the deferred builders; the
        # tuple inside is replaced whole, so it is read without the lock.
        self._echoed: list[tuple[str, ...]] = [()]
        self.otel_trace_id = otel_trace_id
        self.root_span_id = root_span_id
        # The middleware's InboundRequest when a middleware finishes this operation at response
        # start, else None. Only whether it is set matters here, so this module needs nothing
        # from inbound.py: inbound.py names Operation and imports run that one way.
        self.inbound = inbound
        # The trace's monotonic origin and its start event's stamp, taken now (as
        # BackendTrace.begin would), then each event's stamp in ``_log``.
        self._origin = _monotonic_ns()
        if trace is not None:
            self._trace = trace
            self.scan = True
            self.eager = True
            trace.capture_budget = settings.budget
            self.name = trace.operation
            self._build_failures = []
        else:
            self.name = name
            # One clock read per event: the start's wall clock now (its monotonic reading is
            # the origin); later events read the monotonic clock alone, their wall clock is
            # the start's plus the monotonic time since (``_stamp``, when the trace opens).
            self._wall = _time_ns()
            self._start: Stamp = (next(trace_log._sequence), self._wall // 1_000_000, 0)
            # (effect, build, library, (sequence, monotonic ns), issued) of each deferred
            # exchange, in the order the exchanges completed; _open puts them in the order
            # they were issued.
            self._log: list[tuple[str, DeferredExchange, str, tuple[int, int], int]] = []
            self._input_factory = input_factory
            self._number = number
        # The spans started under the server span, as ``(span id, parent id, span)`` in start
        # order, appended with no lock: a healthy request pays one append per span. Coverage
        # (which dependency span has an exchange, D4) is decided from them only when it is
        # needed (``_sync_spans_locked``): when a failing capture is opened, or at once when
        # something can only be judged while it happens (a span still running at the
        # response, a span SQLAlchemy opens beside its statement, a span past the limit, a
        # covered checkout). From then on the operation is *eager*: ``spans`` is kept up to
        # date span by span, as the exchanges start and settle.
        self.span_log: list[tuple[int, int | None, Any]] = []
        self._synced = 0
        self._bindings: list[ExchangeBinding] = []
        self.spans: dict[int, SpanRecord] = {}
        self.reasons: list[str] = []
        # Reasons met under the lock, reported to the processor once it is released.
        self._unreported: list[str] = []
        self._lock = threading.Lock()

    def note_echoed_values(self, values: tuple[str, ...]) -> None:
        """Values a call of this operation redacted that later texts may echo (a database
        error repeated in the response body, the exception): scrubbed from everything the
        operation records from now on, as configured secret values are."""
        if values:
            box = self._echoed
            box[0] = tuple(dict.fromkeys((*box[0], *values)))

    def _secrets(self) -> tuple[str, ...]:
        """The values to scrub: the configured ones and those seen in this operation."""
        return _with_echoed(self._settings.secrets, self._echoed)

    def _secrets_source(self) -> Callable[[], tuple[str, ...]]:
        """:meth:`_secrets` as a callable a deferred builder keeps (it holds the settings and
        the box of echoed values, never the operation: no reference cycle)."""
        return functools.partial(_with_echoed, self._settings.secrets, self._echoed)

    @property
    def created(self) -> float:
        """When the operation began, on the clock of ``time.monotonic()``."""
        return self._origin / 1e9

    @property
    def max_spans(self) -> int:
        """Spans tracked at most (the settings' limit)."""
        return self._settings.max_spans

    # -- the trace --------------------------------------------------------------------------

    @property
    def trace(self) -> BackendTrace:
        """The operation's trace; a capture's is opened now if it was not yet (see "Lazy
        traces"). Never read it while holding the operation's lock."""
        return self.open_trace()

    def open_trace(self) -> BackendTrace:
        """:attr:`trace`, as a callable (a sink opens a failing capture on its own thread)."""
        trace = self._trace
        return trace if trace is not None else self._open()

    @property
    def trace_opened(self) -> bool:
        """Whether the trace exists (a scan-time operation, or a capture that was wanted or
        whose events someone read)."""
        return self._trace is not None

    def _open(self) -> BackendTrace:
        """Open a capture's trace from what was stamped so far: built with no lock held, then
        published under the lock with what arrived meanwhile.

        A failing capture is opened after it finished, by the uploader's thread (see "Lazy
        traces"): its events are then built here, and what building them found (an exchange
        that cannot be recorded) makes its effects incomplete before the ``return`` event is
        pushed, as finishing it would have.
        """
        newly_incomplete = False
        with self._lock:
            if self._trace is not None:
                return self._trace
            # Coverage is decided now (see ``span_log``): a span that ended with no exchange
            # makes a finished capture's effects incomplete, counted by the processor if the
            # hand-off counted it complete.
            had_reasons = bool(self.reasons)
            added = self._sync_spans_locked()
            returned = self._returned
            if added and returned is not None:
                returned = (*returned[:3], False, *returned[4:])
                self._returned = returned
                newly_incomplete = not had_reasons and self.handed_off
            log = self._log
            count = len(log)
            if self._build_failures is _NO_FAILURES:
                self._build_failures = []
            if self._unheld is None:
                self._unheld = {}
            if self._capped is None:
                self._capped = {}
        if newly_incomplete and self._settings.on_incomplete is not None:
            self._settings.on_incomplete(self)
        start_input = _linked_input(self._input_factory or _no_input, self.note_echoed_values)
        fresh = BackendTrace.reopened(
            CaptureContext(
                f"cap-{self._start[1]}-{self._number}",  # the start's wall clock, in ms
                self._settings.build,
                os.urandom(8).hex(),
            ),
            self.name,
            input_factory=_scrubbed_input(start_input, self._secrets_source()),
            max_events=self._settings.max_events,
            origin_ns=self._origin,
            start=self._start,
        )
        fresh.capture_budget = self._settings.budget
        fresh.unheld_effects = self._unheld
        fresh.capped_effects = self._capped
        for effect, build, library, raw in _in_issue_order(log[:count]):  # not shared yet
            fresh.defer_effect(effect, self._builder(build, library), self._stamp(raw))
        attached: dict[str, Any] | None = None
        if returned is not None and returned[6]:  # finished, wanted: build it all now
            returned, attached = self._wanted_return(fresh, returned)
        with self._lock:
            if self._trace is not None:
                return self._trace  # opened meanwhile by another thread
            for effect, build, library, raw in _in_issue_order(log[count:]):
                fresh.defer_effect(effect, self._builder(build, library), self._stamp(raw))
            if returned is None:
                returned = self._returned  # finished meanwhile
            if returned is not None:
                output, status, success, complete, factory, raw, _ = returned
                fresh.finish(
                    output,
                    status,
                    success,
                    complete,
                    output_factory=None
                    if factory is None
                    else _guarded_output(factory, self._secrets_source()),
                    stamp=self._stamp(raw),
                )
            self._trace = fresh
            self._log = []
            self._returned = None
            if attached is not None:
                self._error_attached = True
            late_error = self.error if attached is None and returned is not None else None
        if self._unreported:
            self._report()
        if late_error is not None:
            self._amend_output(late_error)  # noted while the trace was being opened
        return fresh

    def _stamp(self, raw: tuple[int, int]) -> Stamp:
        """The :data:`Stamp` of an event stamped ``(sequence, monotonic ns)``: its wall clock
        is the start's plus the monotonic time since."""
        since = raw[1] - self._origin
        return (raw[0], (self._wall + since) // 1_000_000, since)

    def _wanted_return(
        self, fresh: BackendTrace, returned: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], dict[str, Any] | None]:
        """The ``return`` of a failing capture opened after it finished, built as
        :meth:`finish` builds a wanted one: the events are built (no lock held), an exchange
        that could not be recorded makes the effects incomplete, and the output is decoded,
        with the noted exception attached. Also gives that exception (None: none attached)."""
        output, status, success, complete, factory, stamp, wanted = returned
        fresh.materialize()
        if factory is not None:
            output = _guarded_output(factory, self._secrets_source())()
            factory = None
        error = self.error
        if error is not None and isinstance(status, int) and status >= 500:
            output = output_with_error(output, error)
        else:
            error = None
        newly_incomplete = False
        with self._lock:
            if self._build_failures:
                # Counted by the processor as incomplete if the hand-off already counted it
                # complete (it did, unless another reason was there).
                newly_incomplete = not self.reasons and self.handed_off
                self._take_build_failures_locked()
                complete = False
        if newly_incomplete and self._settings.on_incomplete is not None:
            self._settings.on_incomplete(self)
        return (output, status, success, complete, factory, stamp, wanted), error

    def _builder(self, build: DeferredExchange, library: str) -> Callable[[], Any]:
        """The trace's builder of a deferred exchange: scrubbed of the secret values read
        when it runs (registered ones included), as the output is. It must not hold the
        operation: the trace would then be part of a reference cycle, left to the cyclic
        garbage collector."""
        return functools.partial(
            _build, build, library, self._secrets_source(), self._build_failures
        )

    def _room_locked(self) -> bool:
        """Whether an effect pushed now still leaves room for the ``return`` event."""
        trace = self._trace
        if trace is not None:
            return trace.room_for_effect()
        return len(self._log) + 1 < self._settings.max_events - 1

    # -- spans ------------------------------------------------------------------------------

    def add_span(self, record: SpanRecord) -> bool:
        """Track a span of this operation; False when the table is full (then incomplete)."""
        try:
            with self._lock:
                self._sync_spans_locked()
                if len(self.spans) >= self._settings.max_spans:
                    self._reason_locked(
                        f"too many spans to track (limit {self._settings.max_spans})"
                    )
                    return False
                self.spans[record.span_id] = record
                if record.dependency:
                    if self._closed:
                        self._late_locked(
                            f"{record.library}: {record.name} started after the response"
                        )
                    try:  # an SDK span's scope name, read directly (see is_dependency_span)
                        scope: str | None = record.span._instrumentation_scope._name
                    except AttributeError:
                        scope = _scope_name(record.span)
                    if scope in _BESIDE_SCOPES:
                        beside = self._beside
                        if beside is None:
                            beside = self._beside = {}
                        beside.setdefault(threading.get_ident(), []).append(record)
                return True
        finally:
            if self._unreported:
                self._report()

    def make_eager(self) -> None:
        """Decide the coverage of the spans logged so far now, and keep it span by span from
        now on (see ``span_log``)."""
        try:
            with self._lock:
                self._sync_spans_locked()
        finally:
            if self._unreported:
                self._report()

    def let_go(self) -> None:
        """The operation will not be opened: drop what only coverage needs (the bindings
        refer to the operation: no reference cycle is left for the cyclic collector)."""
        self._bindings = []

    def _sync_spans_locked(self) -> bool:
        """Track the spans logged since the last call as eager records, settle the coverage
        the exchanges bound meanwhile give them, and give each dependency span that ended
        with no exchange its reason (D4); the operation is eager from then on. True when a
        reason was added."""
        log = self.span_log
        end = len(log)
        if self.eager and self._synced == end:
            return False
        self.eager = True
        spans = self.spans
        new: list[SpanRecord] = []
        for span_id, parent_id, span in log[self._synced : end]:
            record = SpanRecord(span_id, parent_id, span, is_dependency_span(span))
            try:
                record.ended = span._end_time is not None  # an SDK span (see on_start)
            except AttributeError:
                record.ended = getattr(span, "end_time", None) is not None
            spans[span_id] = record
            new.append(record)
        self._synced = end
        bindings, self._bindings = self._bindings, []
        for binding in bindings:
            self._cover_locked(binding)
        added = False
        for record in new:
            if (
                record.ended
                and record.dependency
                and record.exchange is ExchangeState.NONE
                and not self._covered(record)
            ):
                before = len(self.reasons)
                self._reason_locked(f"{record.library}: {record.name}")
                added = added or len(self.reasons) > before
        return added

    def _cover_locked(self, binding: ExchangeBinding) -> None:
        """Give the span an exchange bound before the operation was eager covers (its own,
        its nearest dependency ancestor, or the one it adopted) the exchange's state."""
        target_id = binding.target
        span_id = binding.span_id
        if target_id is None:
            target: SpanRecord | None = None
            if span_id is not None and span_id != self.root_span_id:
                target = self.spans.get(span_id)
                if target is None or not target.dependency:
                    target = self._dependency_ancestor(span_id)
            if target is None and binding.adoptable is not None:
                target = self.spans.get(binding.adoptable)
            if target is not None:
                binding.target = target_id = target.span_id
        record = None if target_id is None else self.spans.get(target_id)
        if record is None or record.exchange is ExchangeState.FAILED:
            return
        state = binding.state
        if state is not ExchangeState.PENDING or record.exchange is ExchangeState.NONE:
            record.exchange = state

    def _covered(self, record: SpanRecord) -> bool:
        if record.exchange in (ExchangeState.PENDING, ExchangeState.DONE):
            return True
        if record.exchange is ExchangeState.FAILED:
            return False
        ancestor = self._dependency_ancestor(record.parent_id)
        return ancestor is not None and ancestor.exchange in (
            ExchangeState.PENDING,
            ExchangeState.DONE,
        )

    def _dependency_ancestor(self, span_id: int | None) -> SpanRecord | None:
        """The nearest dependency span at or above ``span_id``, below the server span."""
        seen = 0
        while span_id is not None and span_id != self.root_span_id and seen < 256:
            record = self.spans.get(span_id)
            if record is None:
                return None
            if record.dependency:
                return record
            span_id = record.parent_id
            seen += 1
        return None

    def end_span(self, span_id: int, span: Any) -> None:
        """A span of this operation ended; an uncovered dependency span makes it incomplete.

        A span that was no dependency at its start is asked again (its attributes may have
        changed since).
        """
        try:
            with self._lock:
                self._sync_spans_locked()
                record = self.spans.get(span_id)
                if record is None:
                    return
                record.ended = True
                if self._beside:
                    self._close_beside_locked(record)
                if not record.dependency:
                    record.dependency = is_dependency_span(span)
                    if not record.dependency:
                        return
                # Pending or done: covered; failed: the failure already gave its reason.
                if record.exchange is not ExchangeState.NONE or self._covered(record):
                    return
                reason = f"{record.library}: {record.name}"
                self._incomplete_locked(reason)
        finally:
            if self._unreported:
                self._report()

    def _close_beside_locked(self, record: SpanRecord) -> None:
        beside = self._beside
        if beside is None:
            return
        for thread, records in list(beside.items()):
            if record in records:
                records.remove(record)
                if not records:
                    del beside[thread]
                return

    def cover_span(self, span_id: int | None) -> bool:
        """The dependency span ``span_id`` (or its nearest dependency ancestor) made no call of
        its own that needs recording; True when a span was covered.

        The SQLAlchemy hook calls this for the ``connect`` span when the pooled connection it
        checked out is one the psycopg2 recorder records: a checkout from a warm pool does no
        I/O, and what a fresh connection runs is recorded statement by statement.
        """
        with self._lock:
            self._sync_spans_locked()
            if span_id is None or span_id == self.root_span_id:
                return False
            target = self._dependency_ancestor(span_id)
            if target is None or target.exchange is not ExchangeState.NONE:
                return False
            target.exchange = ExchangeState.DONE
            return True

    # -- exchanges --------------------------------------------------------------------------

    def bind_exchange(self, span_id: int | None, library: str | None = None) -> ExchangeBinding:
        """Start an exchange of ``library`` bound to ``span_id`` (the current span), pending
        until it ends."""
        try:
            with self._lock:
                if not self.eager:
                    # Its span is found when coverage is decided (``_sync_spans_locked``).
                    binding = ExchangeBinding(self, span_id, None, library or "", self.issued)
                    self.issued += 1
                    self.pending += 1
                    self._started += 1
                    if self._closed:
                        self._late_locked("an exchange started after the response")
                    else:
                        self._bindings.append(binding)
                    return binding
                self._sync_spans_locked()
                target: SpanRecord | None = None
                if span_id is not None and span_id != self.root_span_id:
                    target = self.spans.get(span_id)  # most often the call's own span
                    if target is None or not target.dependency:
                        target = self._dependency_ancestor(span_id)
                binding = ExchangeBinding(
                    self, span_id, target.span_id if target else None, library or "", self.issued
                )
                self.issued += 1
                if target is not None and target.exchange is ExchangeState.NONE:
                    target.exchange = ExchangeState.PENDING
                beside_spans = self._beside
                if beside_spans and library in _DATABASE_RECORDERS:
                    records = beside_spans.get(threading.get_ident())
                    beside = records[-1] if records else None
                    if (
                        beside is not None
                        and beside is not target
                        and beside.exchange is ExchangeState.NONE
                    ):
                        beside.exchange = ExchangeState.PENDING
                        binding.beside = beside.span_id
                self.pending += 1
                self._started += 1
                if self._closed:
                    self._late_locked("an exchange started after the response")
                return binding
        finally:
            if self._unreported:
                self._report()

    def adopt(self, binding: ExchangeBinding, record: SpanRecord) -> None:
        """A dependency span started directly under a pending exchange with no span yet."""
        with self._lock:
            if binding.state is ExchangeState.PENDING and binding.target is None:
                binding.target = record.span_id
                record.exchange = ExchangeState.PENDING

    def _settle(self, binding: ExchangeBinding, state: ExchangeState) -> bool:
        if binding.state is not ExchangeState.PENDING:
            return False
        binding.state = state
        self.pending -= 1
        for span_id in (binding.target, binding.beside):
            if span_id is not None:
                record = self.spans.get(span_id)
                if record is not None and record.exchange is not ExchangeState.FAILED:
                    record.exchange = state
        return True

    def exchange_finished(
        self,
        binding: ExchangeBinding,
        effect: str,
        resource: str | None,
        key: str | None,
        exchange: dict[str, Any],
    ) -> None:
        """Push the exchange as an effect (secret values scrubbed first, D8).

        A capture whose trace is not opened takes it as a deferred exchange whose build gives
        it back as it is, so that it keeps the place it was issued at among the others (see
        "Lazy traces"); it is scrubbed and redacted when the trace is opened, as they are.
        """
        if not self.scan and self._trace is None:
            built = (resource, key, exchange)
            self.exchange_deferred(binding, effect, lambda: built, binding.library)
            return
        secrets = self._secrets()
        if secrets:
            exchange = scrub_exact_bytes(_scrubbed(exchange, secrets), secrets)
            resource = None if resource is None else scrub_secret_values(resource, secrets)
            key = None if key is None else scrub_secret_values(key, secrets)
        self._push_built(binding, effect, resource, key, exchange)

    def _push_built(
        self,
        binding: ExchangeBinding,
        effect: str,
        resource: str | None,
        key: str | None,
        exchange: dict[str, Any],
    ) -> None:
        """Push a built, scrubbed exchange: redacted first, pushed under the lock."""
        fields: dict[str, Any] | None = None
        error: str | None = None
        trace = self.trace  # a built exchange needs the trace open (opened with no lock held)
        try:
            fields = trace.effect_fields(
                effect,
                resource=UNSET if resource is None else resource,
                key=UNSET if key is None else key,
                exchange=exchange,
            )
        except TraceError as exc:
            error = exc.code
        try:
            with self._lock:
                if not self._arrived_locked(binding):
                    return
                if fields is not None and self._capped_locked(effect):
                    return
                if fields is not None:
                    try:
                        trace.push_effect_fields(fields)
                    except TraceError as exc:
                        error = exc.code
                if error is not None:
                    self._reason_locked(f"exchange not recorded: {error}")
                    return
                self._recorded_locked()
        finally:
            if self._unreported:
                self._report()
            if self.handed_off or self.evicted:
                self._late_tally()

    def exchange_deferred(
        self,
        binding: ExchangeBinding,
        effect: str,
        build: DeferredExchange,
        library: str,
        held: int = 0,
    ) -> None:
        """Push the exchange ``build()`` gives, built now (scan) or when wanted (capture).

        ``held`` is about the bytes ``build`` keeps. Past the capture budget the exchange is
        settled (its span is covered) but not kept: it is counted by effect kind in the
        trace's ``unheld_effects``, and the batch is ``partial`` with that count. Past the
        event cap likewise, in ``capped_effects``.
        """
        if self.scan:  # built and redacted now, before the lock
            built = _build(build, library, self._secrets(), self._build_failures)
            if built is not None:
                self._push_built(binding, effect, *built)
                return
            try:
                with self._lock:
                    if self._arrived_locked(binding):
                        self._take_build_failures_locked()
            finally:
                if self._unreported:
                    self._report()
                if self.handed_off or self.evicted:
                    self._late_tally()
            return
        try:
            with self._lock:
                # _arrived_locked(binding), inline: this runs for every exchange.
                self._lost += 1  # until it is recorded
                if binding.state is not ExchangeState.PENDING:
                    return
                binding.state = ExchangeState.DONE
                self.pending -= 1
                covered = binding.target
                if covered is not None:
                    record = self.spans.get(covered)
                    if record is not None and record.exchange is not ExchangeState.FAILED:
                        record.exchange = ExchangeState.DONE
                if binding.beside is not None:
                    record = self.spans.get(binding.beside)
                    if record is not None and record.exchange is not ExchangeState.FAILED:
                        record.exchange = ExchangeState.DONE
                if self._closed or self.evicted:
                    self._late_locked("an exchange finished after the response")
                    return
                trace = self._trace
                budget = self._settings.budget
                if budget:
                    # _capped_locked(), inline: this runs for every exchange.
                    capped = self._capped
                    if capped or not (
                        len(self._log) + 1 < self._settings.max_events - 1
                        if trace is None
                        else trace.room_for_effect()
                    ):
                        if capped is None:
                            capped = self._capped = {}
                        capped[effect] = capped.get(effect, 0) + 1
                        return  # counted as lost in the tally, as an exchange not kept
                    unheld = self._unheld
                    # The first exchanges are kept, as the batch bound keeps the first ones.
                    if unheld or self.held + held > budget:
                        if unheld is None:
                            unheld = self._unheld = {}
                        unheld[effect] = unheld.get(effect, 0) + 1
                        return  # counted as lost in the tally, as an exchange not kept
                    self.held += held
                if trace is None:  # not opened: stamp it, as defer_effect would
                    if effect not in _BOUNDARY_EFFECTS:
                        self._reason_locked("exchange not recorded: InvalidOperation")
                        return
                    if len(self._log) + 1 >= self._settings.max_events:
                        self._reason_locked("exchange not recorded: TooManyEvents")
                        return
                    self._log.append(
                        (
                            effect,
                            build,
                            library,
                            (next(trace_log._sequence), _monotonic_ns()),
                            binding.issued,
                        )
                    )
                else:
                    try:
                        trace.defer_effect(effect, self._builder(build, library))
                    except TraceError as exc:
                        self._reason_locked(f"exchange not recorded: {exc.code}")
                        return
                # _recorded_locked(), inline
                self._recorded += 1
                self._lost -= 1
        finally:
            if self._unreported:
                self._report()
            if self.handed_off or self.evicted:
                self._late_tally()

    def _capped_locked(self, effect: str) -> bool:
        """Heavy capture past the trace's event cap: count the exchange by ``effect`` kind in
        the trace's ``capped_effects`` and return True (it is settled, not kept).

        One slot stays free for the ``return`` event, so the operation can still finish and
        be sent. The first exchanges are kept, as the batch bound keeps the first ones.
        """
        if not self._settings.budget:
            return False  # not a heavy capture: TooManyEvents makes it incomplete, as before
        capped = self._capped
        if not capped and self._room_locked():
            return False
        if capped is None:
            capped = self._capped = {}
        capped[effect] = capped.get(effect, 0) + 1
        return True

    def _arrived_locked(self, binding: ExchangeBinding) -> bool:
        """An exchange finished: settle it; True when it may still be pushed as an effect."""
        self._lost += 1  # until it is recorded
        if not self._settle(binding, ExchangeState.DONE):
            return False
        if self._closed or self.evicted:
            self._late_locked("an exchange finished after the response")
            return False
        return True

    def _recorded_locked(self) -> None:
        self._recorded += 1
        self._lost -= 1

    def _late_tally(self) -> None:
        """An exchange settled after the operation was handed off or evicted: the processor
        adds its counters now (it took the others when it let go of the operation)."""
        on_tally = self._settings.on_tally
        if on_tally is not None:
            on_tally(self)

    def take_tally(self) -> tuple[int, int, int, int]:
        """The exchanges started, recorded, lost and failed since the last call (the
        processor adds them to its ``exchanges_*`` statistics)."""
        with self._lock:
            tally = (self._started, self._recorded, self._lost, self._failed)
            self._started = self._recorded = self._lost = self._failed = 0
        return tally

    def _take_build_failures_locked(self) -> None:
        while self._build_failures:
            self._reason_locked(self._build_failures.pop(0))

    def _wanted(self, status: int | None) -> bool:
        """Whether a capture finishing with ``status`` may be uploaded (its events are built)."""
        if status is not None and status >= 500:
            return True
        trace = self._trace  # a trace never opened holds no oracle marker
        if trace is None or not trace.may_hold_oracle_marker:
            return False
        return marked_oracle(trace.settled_events()) is not None

    def exchange_failed(self, binding: ExchangeBinding, reason: str) -> None:
        """The exchange could not be recorded; effects become incomplete with ``reason``."""
        try:
            with self._lock:
                self._failed += 1
                if not self._settle(binding, ExchangeState.FAILED):
                    return
                self._incomplete_locked(reason)
        finally:
            if self._unreported:
                self._report()
            if self.handed_off or self.evicted:
                self._late_tally()

    def mark_incomplete(self, reason: str) -> None:
        """An unrecordable call happened in this operation."""
        try:
            with self._lock:
                self._incomplete_locked(reason)
        finally:
            if self._unreported:
                self._report()

    # -- completeness -----------------------------------------------------------------------

    def _reason_locked(self, reason: str) -> None:
        if reason not in self.reasons and len(self.reasons) < MAX_INCOMPLETE_REASONS:
            self.reasons.append(reason)
            self._unreported.append(reason)

    def _incomplete_locked(self, reason: str) -> None:
        """``reason`` makes the effects incomplete, or, once the response started, late."""
        if self._closed:
            self._late_locked(reason)
        else:
            self._reason_locked(reason)

    def _late_locked(self, reason: str) -> None:
        if not self.late:
            self.late = True
            self._unreported.append(f"after the response: {reason}")

    def _report(self) -> None:
        """Report the reasons queued under the lock to the processor (it counts and logs
        them), with the lock released."""
        unreported = self._unreported
        while unreported:
            try:
                reason = unreported.pop(0)  # atomic: two threads never report one reason twice
            except IndexError:
                return
            self._settings.on_reason(self, reason)

    def open_dependency_reasons(self) -> list[str]:
        """Reasons from dependency spans still open (or exchanges pending) right now."""
        with self._lock:
            self._sync_spans_locked()
            return self._open_dependency_reasons_locked()

    def _open_dependency_reasons_locked(self) -> list[str]:
        reasons = [
            f"{record.library}: {record.name} still running at the response"
            for record in self.spans.values()
            if record.dependency and not record.ended
        ]
        if self.pending:
            reasons.append(f"{self.pending} exchange(s) unfinished at the response")
        return reasons

    def effects_complete(self) -> bool:
        """D4: every dependency span covered, nothing failed or pending, mode is not never."""
        with self._lock:
            self._sync_spans_locked()
            if self._settings.effects_never:
                return False
            return not self.reasons and not self._open_dependency_reasons_locked()

    # -- the failure ------------------------------------------------------------------------

    def note_error(self, build: Callable[[tuple[str, ...]], dict[str, Any] | None]) -> None:
        """Keep the exception ``build(secret values)`` gives, unless one was noted already.

        The first noted exception wins (a framework's error hook sees it before the server
        span records it). ``build`` runs without the lock. Before :meth:`finish` the
        exception is attached by it; after, a failing capture's ``return`` output is amended,
        until the operation is handed off.
        """
        if self.error is not None or self.handed_off or self.evicted:
            return
        if recording.collecting.active:  # a finalizer, maybe inside one of our locked sections
            recording.hand_over(functools.partial(self.note_error, build))
            return
        error = build(self._secrets())
        if error is None:
            return
        with self._lock:
            if self.error is not None or self.handed_off or self.evicted:
                return
            self.error = error
            if not self._closed or self._trace is None:
                return  # finish() or, for a trace not opened yet, _open() attaches it
        self._amend_output(error)

    def _amend_output(self, error: dict[str, Any]) -> None:
        """Add ``error`` to a finished failing capture's ``return`` output, once; the amended
        output is redacted with no lock held and published under the lock."""
        status = self.status
        if self.scan or status is None or status < 500 or not self.finished:
            return  # not a failure's capture, or finish() has yet to push the return event
        returned = self.trace.return_event
        if returned is None:
            return
        before = returned.get("output")
        # A failure's output was built at the finish (it is wanted), so it is final.
        amended = redact(output_with_error(before, error))
        with self._lock:
            if self._error_attached or self.handed_off or returned.get("output") is not before:
                return
            self._error_attached = True
            returned["output"] = amended

    # -- lifecycle --------------------------------------------------------------------------

    def finish(
        self,
        status: int | None,
        output: Any = None,
        *,
        output_factory: Callable[[], Any] | None = None,
    ) -> None:
        """Push the ``return`` event: the response is starting with ``status``.

        ``success`` is ``status < 500``; ``effectsComplete`` is computed (D4). A second call
        does nothing. Hands the operation off when its server span has already ended.
        ``output_factory`` gives the output instead of ``output``; a healthy capture calls it
        only if its events are read.

        Work finalizers handed over is settled first (an abandoned stream collected during
        the request is an exchange of it). What is built (deferred exchanges, the output) is
        built before the lock is taken; the lock only decides ``effectsComplete`` and closes
        the operation, and the ``return`` event is pushed after it is released.
        """
        if recording.collecting.active:  # a finalizer (a dropped request coroutine)
            recording.hand_over(
                functools.partial(self.finish, status, output, output_factory=output_factory)
            )
            return
        if recording.handed_over:
            recording.settle_handed_over()
        if self._closed or self.evicted:
            return
        if self.scan or (status is not None and status >= 500):
            wanted = True
        else:  # _wanted(), the common case inline: a trace never opened has no oracle marker
            wanted = self._trace is not None and self._wanted(status)
        # A capture whose trace is not opened keeps it so, wanted or not: a failing one is
        # opened, and its events built, on the uploader's thread (see "Lazy traces").
        lazy = self._trace is None and not self.scan
        deferred_output: Callable[[], Any] | None = None
        if output_factory is not None:
            if wanted and not lazy:
                output = _guarded_output(output_factory, self._secrets_source())()
            else:
                deferred_output = output_factory  # guarded when the return event is pushed
        elif output is not None:
            secrets = self._secrets()
            if secrets:
                output = scrub_value(output, secrets)
        failure = not self.scan and status is not None and status >= 500
        trace = self._trace
        kept = False  # the return event kept for a trace not opened (see "Lazy traces")
        try:
            while True:
                if wanted and trace is not None and trace.deferred_count:
                    trace.materialize()  # no lock held: builders redact and allocate
                with self._lock:
                    if self._closed or self.evicted:
                        return
                    if wanted and trace is not None and trace.deferred_count:
                        continue  # an exchange arrived meanwhile: build it too
                    if self._build_failures:
                        self._take_build_failures_locked()
                    if not self.eager and self.span_log:
                        # A span still running at the response is judged now, and the spans
                        # after it as they end; else coverage waits until it is needed.
                        try:
                            for entry in self.span_log:
                                if entry[2]._end_time is None:  # an SDK span (see on_start)
                                    self._sync_spans_locked()
                                    break
                        except AttributeError:
                            self._sync_spans_locked()
                    still_open: list[str] = _NO_FAILURES  # empty, as most often
                    if self.pending:
                        still_open = self._open_dependency_reasons_locked()
                    else:
                        for record in self.spans.values():
                            if record.dependency and not record.ended:
                                still_open = self._open_dependency_reasons_locked()
                                break
                    for reason in still_open:
                        self._reason_locked(reason)
                    # effects_complete(), without listing the open spans a second time.
                    complete = (
                        not self._settings.effects_never and not self.reasons and not still_open
                    )
                    self.status = status
                    self._closed = True
                    trace = self._trace
                    # The noted exception joins a failure's output now, or when _open pushes
                    # the return event of a trace not opened.
                    error = self.error if failure and trace is not None else None
                    self._error_attached = error is not None
                    if trace is None:  # a capture not opened: keep the return for _open
                        kept = True
                        if len(self._log) + 1 >= self._settings.max_events:
                            self._reason_locked("operation not finished: TooManyEvents")
                        else:
                            self._returned = (
                                output,
                                UNSET if status is None else status,
                                status is not None and status < 500,
                                complete,
                                deferred_output,  # guarded by _open
                                (next(trace_log._sequence), _monotonic_ns()),
                                wanted,
                            )
                            self.wanted = wanted
                    break
        finally:
            if self._unreported:
                self._report()
        if error is not None:
            output = output_with_error(output, error)
        try:
            if not kept:
                assert trace is not None
                trace.finish(
                    output,
                    UNSET if status is None else status,
                    status is not None and status < 500,
                    complete,
                    output_factory=None
                    if deferred_output is None
                    else _guarded_output(deferred_output, self._secrets_source()),
                )
        except TraceError as exc:
            with self._lock:
                self._reason_locked(f"operation not finished: {exc.code}")
            if self._unreported:
                self._report()
        self.finished = True
        if failure and not kept and self.error is not None and not self._error_attached:
            self._amend_output(self.error)  # noted while the return event was being pushed
        if self.span_ended:
            self._settings.on_ready(self)

    def end_root(self) -> bool:
        """The server span ended. True when the operation is now ready to hand off.

        No lock: :meth:`finish` sets ``finished`` before it reads ``span_ended``, this sets
        ``span_ended`` before it reads ``finished``, so at least one of the two sees the other
        (both may, and the processor hands an operation off once).
        """
        self.span_ended = True
        return self.finished

    def header(self) -> str | None:
        """The ``x-reproit-events`` value of a finished scan-time operation, else None."""
        if not self.scan or not self.trace.finished:
            return None
        try:
            return self.trace.header()
        except TraceError:
            return None


def _in_issue_order(
    log: list[tuple[str, DeferredExchange, str, tuple[int, int], int]],
) -> list[tuple[str, DeferredExchange, str, tuple[int, int]]]:
    """The logged exchanges in the order their calls were issued, each event with a stamp.

    The exchanges were logged as they completed, each with the raw stamp ``(sequence,
    monotonic ns)`` it got then; they
    become effects in the order they were started, so that concurrent calls of one operation
    (an ``asyncio.gather``, a stream read after a later call) keep the place the code gave
    them whatever order their answers came in, which is the order a replay issues them in.
    The stamps stay in the order they were taken, so the effects' ``sequence`` still
    increases: the k-th effect carries the k-th completion's stamp.
    """
    ordered = sorted(log, key=lambda entry: entry[4])  # stable; mostly already in order
    return [
        (effect, build, library, stamp)
        for (effect, build, library, _, _), (_, _, _, stamp, _) in zip(ordered, log, strict=True)
    ]


def _build(
    build: DeferredExchange,
    library: str,
    secrets: tuple[str, ...] | Callable[[], tuple[str, ...]],
    failures: list[str],
) -> tuple[Any, Any, Any] | None:
    """Build a deferred exchange, scrubbed with ``secrets`` (or what calling it gives); None
    when it cannot be.

    The reason goes to ``failures`` (the operation's list; ``list.append`` is atomic, so no
    lock is taken: this may run on any thread that reads the events).
    """
    failure = f"{library}: the exchange could not be recorded"
    with guarded(f"operation.build[{library}]"):
        try:
            resource, key, exchange = build()
        except Unrecordable as error:
            failure = f"{library}: {error.reason}"
        else:
            if callable(secrets):
                secrets = secrets()
            if secrets:
                exchange = scrub_exact_bytes(_scrubbed(exchange, secrets), secrets)
                resource = None if resource is None else scrub_secret_values(resource, secrets)
                key = None if key is None else scrub_secret_values(key, secrets)
            return (
                UNSET if resource is None else resource,
                UNSET if key is None else key,
                exchange,
            )
    failures.append(failure)
    return None


def _no_input() -> None:
    return None


def _scrubbed(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` redacted by its key names, then scrubbed of the secret ``secrets``.

    Redacting first lets a secret-named value become the placeholder of what it was (its type,
    length, character class and keyed identity, which replay's stand-ins are made from) before
    the scrub could turn it into the bare ``$reproit`` text; the later structural redaction
    keeps such a placeholder as it is. A string equal to a value the operation saw as a secret
    elsewhere (:class:`_Secrets` ``seen``: a credential of the inbound request, a redacted
    parameter) becomes that value's placeholder too, so its appearances share one identity.
    """
    seen = secrets.seen if isinstance(secrets, _Secrets) else ()
    return scrub_value(placehold_equal(redact(value), seen), secrets)


def _linked_input(
    source: Callable[[], Any], note_seen: Callable[[tuple[str, ...]], None]
) -> Callable[[], Any]:
    """The ``start`` input of ``source``, built now, its credentials noted as seen secrets.

    Called where a failing capture's trace is opened, before any of its exchanges is built: the
    credentials of the inbound request's headers (the token after an ``Authorization`` scheme,
    session cookies, secret-named headers) are then known when an exchange that repeats one (a
    SQL parameter looking the token up) is scrubbed.
    """
    value: Any = None
    with guarded("processor.input"):
        value = source()
        headers = value.get("headers") if isinstance(value, dict) else None
        if isinstance(headers, dict):
            found: list[str] = []
            for name, text in headers.items():
                if isinstance(name, str) and isinstance(text, str):
                    found.extend(header_credentials(name, text))
            note_seen(tuple(found))
    return lambda: value


def _scrubbed_input(source: Callable[[], Any], secrets: Callable[[], tuple[str, ...]]) -> Any:
    """The deferred ``start`` input of a capture: ``source()`` scrubbed of ``secrets()``."""

    def factory() -> Any:
        with guarded("processor.input"):
            value = source()
            secret_values = secrets()
            if not secret_values:
                return value
            return scrub_request_bytes(_scrubbed(value, secret_values), secret_values)
        return None

    return factory


def _guarded_output(
    factory: Callable[[], Any], secrets: Callable[[], tuple[str, ...]]
) -> Callable[[], Any]:
    """The operation's output from ``factory``, scrubbed of ``secrets()``; ``None`` on a defect."""

    def output() -> Any:
        with guarded("operation.output"):
            value = factory()
            if value is None:
                return None
            values = secrets()
            return scrub_value(value, values) if values else value
        return None

    return output


class _Secrets(tuple[str, ...]):
    """The secret values to scrub; ``seen`` are those the operation saw as secrets elsewhere
    (not the configured ones), whose whole-string appearances become placeholders."""

    seen: tuple[str, ...]

    def __new__(cls, configured: tuple[str, ...], seen: tuple[str, ...]) -> _Secrets:
        made = super().__new__(cls, (*configured, *seen))
        made.seen = seen
        return made


def _with_echoed(
    configured: Callable[[], tuple[str, ...]], echoed: list[tuple[str, ...]]
) -> tuple[str, ...]:
    """The configured secret values, then the values an operation saw echoed."""
    values = configured()
    seen = echoed[0]
    if not seen:
        return values
    return _Secrets(values, seen)
