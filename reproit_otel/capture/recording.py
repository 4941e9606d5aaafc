"""The seam between the recorders and the capture pipeline.

A recorder (``instrumentation/requests.py``, ``instrumentation/psycopg2.py``, an invoke
boundary) sees one dependency call at its transport seam. It asks this module for an
:class:`ExchangeRecorder` when the call starts and hands it the finished exchange::

    from reproit_otel.capture.recording import start_exchange

    recorder = start_exchange("requests")   # None: nothing records this call
    response = send(request)                 # the real call, unchanged
    if recorder is not None:
        recorder.finish("call", resource="api:8080", key="GET /v1/rates?c=eu",
                        exchange={"protocol": "http", "request": ..., "response": ...})

:func:`start_exchange` returns ``None`` when nothing records: no operation is active in the
current context, reproit-otel is disabled or not installed, or the call is reproit-otel's own
traffic (OpenTelemetry ``suppress_instrumentation`` is set). Otherwise the exchange is bound
to the OpenTelemetry span current at that moment (the CLIENT or database span of the call when
the OpenTelemetry instrumentation of the library is active), so the span processor knows that
span has an exchange when it computes ``effectsComplete`` (PROTOCOL decision D4). The exchange
is pending until :meth:`ExchangeRecorder.finish` or :meth:`ExchangeRecorder.fail` is called;
a finish may come after the span ended (a streamed body consumed later).

What the pipeline does with a finished exchange: the effect is pushed onto the operation
(``BackendTrace.effect``) at the place :func:`start_exchange` gave it (a capture's effects
follow the order the calls were issued, not the order they completed), after configured
secret values (``REPROIT_SECRET_VALUES``, :func:`register_secret_values`) have been replaced
in every string of the exchange, the key and the resource (D8). Recorders apply the structural rules
themselves: bounded bodies and headers (``wire/bounds.py``) and ``redact_url`` for query
strings.

Deferred exchanges. Most captured operations succeed and are never uploaded, so a recorder
may hand over what it saw in raw form and let the pipeline build the exchange only when it is
wanted: :meth:`ExchangeRecorder.finish_deferred` takes the effect kind and a ``build()``
callable returning ``(resource, key, exchange)`` exactly as :meth:`ExchangeRecorder.finish`
would have received them. The exchange's place among the operation's effects and its
timestamps are fixed at that call; ``build()`` runs later, with no lock held, on whatever
thread reads the operation's events (for a failing operation: when it finishes), so it must
only read what the recorder snapshotted (never the live request, response or cursor); two
threads reading the events at the same moment may both run it, and one result is kept. ``build()``
raises :class:`Unrecordable` when the exchange cannot be recorded after all (a value with no
encoding); the operation's effects are then incomplete with that reason, as after
:meth:`ExchangeRecorder.fail`. A pipeline that does not defer (the CI plugin's) builds at once.

:func:`mark_incomplete` reports a call that cannot be recorded (``copy_expert``, a protocol we
do not speak): the operation then reports ``effectsComplete: false`` with that reason.

Nothing here raises into the caller; failures are logged through :mod:`reproit_otel._guard`.
The module holds no state of its own besides the pipeline that :func:`set_pipeline` installed
(the span processor does so when it is created), the override pipeline, the registered
secret values and the work finalizers handed over.

Finalizers (the rule every recorder and the pipeline keep). The garbage collector runs
finalizers (``__del__``, an ``io`` object's implicit ``close()``), weakref callbacks and
``gc.callbacks`` on whichever thread happens to allocate, at any allocation, including one
made inside a locked section of reproit-otel; signal handlers run between any two bytecodes
of the main thread, and ``atexit`` handlers at interpreter exit. None of those of
reproit-otel takes a lock, allocates under a lock it could re-enter, or calls into the
pipeline synchronously: a finalizer that has work for the pipeline (an abandoned streamed
response whose exchange must be finished) passes it to :func:`hand_over`, which appends to a
``collections.deque`` (``append`` and ``popleft`` are atomic and take no lock), and the work
runs at the next hook that holds no lock (:func:`settle_handed_over`: the next
:func:`start_exchange`, the next operation's begin and every operation's finish) or on the
uploader's thread, which looks for it every second while it runs, so that an idle worker does
not keep it until its next request (``uploader.py``). Whichever thread settles it holds no lock
of reproit-otel, and the work takes only the locks that finishing it takes on any thread: the
operation's, then the processor's, then the uploader's (the order ``processor.py`` audits).
Finalizers do that or nothing.

Other code's finalizers can reach our hooks too: a generator or coroutine closed by the
collector ends its OpenTelemetry span (the span processor's ``on_end``), an object's
``__del__`` closes a recorded response or makes an instrumented call. So while this thread is
collecting (:data:`collecting`, kept by a ``gc.callbacks`` entry that
:func:`watch_collections` adds once an operation is recorded; it only stores a flag), the
hooks do not take their locks: the span processor's ``on_start``/``on_end``, an operation's
finish and :class:`ExchangeRecorder`'s finish and fail hand themselves over, and
:func:`start_exchange` records nothing (the call's span, handed over, makes the operation
incomplete). A signal handler of the application that ends spans or makes instrumented calls
is not covered: it runs between bytecodes of the main thread, not inside a collection.

Locks here. ``_secrets_lock`` only orders concurrent :func:`register_secret_values` calls;
nothing under it allocates more than a tuple of the values, logs, or calls out, and readers
never take it (they read the tuple that is replaced whole). A finalizer, signal or logging
handler that re-entered :func:`register_secret_values` on a thread inside it is the only way
it could block on itself, and none of ours does.

An *override* pipeline (:func:`set_override_pipeline`) is consulted before the installed one:
the CI pytest plugin installs one so that, while a test runs, every exchange belongs to that
test's trace even when a span processor is also recording in the same process. While the
override has no live operation (between tests) the installed pipeline is asked as before.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from opentelemetry import context as otel_context

from reproit_otel._guard import absorb, guarded

__all__ = [
    "EFFECT_KINDS",
    "DeferredExchange",
    "ExchangeOwner",
    "ExchangeRecorder",
    "RecordingPipeline",
    "Unrecordable",
    "clear_override_pipeline",
    "clear_pipeline",
    "collecting",
    "cover_current_span",
    "current_pipeline",
    "echoed_values",
    "hand_over",
    "handed_over",
    "is_suppressed",
    "mark_incomplete",
    "note_echoed_values",
    "recording_enabled",
    "register_secret_values",
    "registered_secret_values",
    "set_override_pipeline",
    "set_pipeline",
    "settle_handed_over",
    "start_exchange",
    "watch_collections",
]

EFFECT_KINDS = frozenset({"read", "write", "delete", "emit", "call"})
"""The effect kinds an exchange may be recorded as (PROTOCOL section 2.4)."""

# OpenTelemetry sets this context key around its exporters' own HTTP calls and around code
# wrapped in ``suppress_instrumentation()``; reproit-otel's uploader sets it too.
_SUPPRESS_KEY: str = otel_context._SUPPRESS_INSTRUMENTATION_KEY


DeferredExchange = Callable[[], tuple[str | None, str | None, dict[str, Any]]]
"""``build()`` of :meth:`ExchangeRecorder.finish_deferred`: ``(resource, key, exchange)``."""


class Unrecordable(Exception):
    """Raised by a deferred ``build()``: the exchange cannot be recorded, for ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ExchangeOwner(Protocol):
    """What an :class:`ExchangeRecorder` reports to (the span processor's operation)."""

    def exchange_finished(
        self,
        handle: object,
        effect: str,
        resource: str | None,
        key: str | None,
        exchange: dict[str, Any],
    ) -> None:
        """Push the exchange as an effect of the owning operation."""

    def exchange_failed(self, handle: object, reason: str) -> None:
        """The exchange bound to ``handle`` could not be recorded."""


class RecordingPipeline(Protocol):
    """What :func:`set_pipeline` accepts (implemented by the span processor)."""

    def start_exchange(self, library: str) -> ExchangeRecorder | None:
        """Bind a new exchange to the current span's operation, or return None."""

    def mark_incomplete(self, reason: str) -> None:
        """Make the current operation's effects incomplete with ``reason``."""

    def has_live_operations(self) -> bool:
        """True while at least one operation is being recorded."""


class ExchangeRecorder:
    """One dependency call being recorded; created by :func:`start_exchange`.

    Exactly one of :meth:`finish` or :meth:`fail` takes effect; later calls are ignored.
    Both are safe to call from any thread and never raise.
    """

    __slots__ = ("_handle", "_owner", "_unclaimed", "library")

    counts_held: bool = False
    """Whether the owner reads :meth:`finish_deferred`'s ``held`` (an operation with a capture
    budget). When false a recorder passes 0 instead of counting what a call keeps, which for
    a large result costs more than the rest of the call's recording."""

    def __init__(self, owner: ExchangeOwner, handle: object, library: str) -> None:
        """``handle`` is what ``owner``'s methods are called with (``None``: this recorder
        itself, for an owner whose handle class is a subclass of this one)."""
        self._owner = owner
        self._handle = handle
        # One token: whoever pops it finishes the exchange (list.pop is atomic, and unlike a
        # lock costs nothing to create).
        self._unclaimed = [True]
        self.library = library

    @property
    def owner(self) -> object:
        """The operation this exchange belongs to: one object for all of its exchanges."""
        handle = self if self._handle is None else self._handle
        return getattr(handle, "operation", handle)

    @property
    def done(self) -> bool:
        """True once :meth:`finish` or :meth:`fail` was called."""
        return not self._unclaimed

    def _claim(self) -> bool:
        try:
            self._unclaimed.pop()
        except IndexError:
            return False
        return True

    def finish(
        self,
        effect: str,
        *,
        resource: str | None,
        key: str | None,
        exchange: dict[str, Any],
    ) -> None:
        """Record the exchange as an effect of kind ``effect`` on the owning operation.

        ``effect`` is ``call`` for HTTP, ``read``/``write`` for SQL (PROTOCOL 4.1, 4.4).
        ``exchange`` is the bounded exchange object (``protocol``, ``request``, ``response``).
        An unknown ``effect`` kind makes the exchange fail instead.
        """
        if collecting.active:  # a finalizer, maybe inside one of our locked sections
            hand_over(lambda: self.finish(effect, resource=resource, key=key, exchange=exchange))
            return
        if not self._claim():
            return
        with guarded(f"recording.finish[{self.library}]"):
            if effect not in EFFECT_KINDS:
                self._owner.exchange_failed(
                    self if self._handle is None else self._handle,
                    f"{self.library}: unknown effect kind {effect!r}",
                )
                return
            self._owner.exchange_finished(
                self if self._handle is None else self._handle, effect, resource, key, exchange
            )

    def finish_deferred(self, effect: str, build: DeferredExchange, held: int = 0) -> None:
        """Like :meth:`finish`, with the exchange built by ``build()`` only when wanted.

        See "Deferred exchanges" in the module docstring. ``build()`` returns
        ``(resource, key, exchange)`` or raises :class:`Unrecordable`. ``held`` is about how
        many bytes of the call ``build`` keeps (bodies, statement text, rows): an operation
        holds exchanges up to its capture budget (``REPROIT_CAPTURE_BUDGET``) and only counts
        those past it.
        """
        if collecting.active:  # a finalizer, maybe inside one of our locked sections
            hand_over(lambda: self.finish_deferred(effect, build, held))
            return
        try:  # _claim(), inline: this runs for every recorded call
            self._unclaimed.pop()
        except IndexError:
            return
        try:
            if effect not in EFFECT_KINDS:
                self._owner.exchange_failed(
                    self if self._handle is None else self._handle,
                    f"{self.library}: unknown effect kind {effect!r}",
                )
                return
            # The span processor defers (exchange_deferred); the CI pipeline builds at once.
            deferred = getattr(self._owner, "exchange_deferred", None)
            if deferred is not None:
                deferred(
                    self if self._handle is None else self._handle,
                    effect,
                    build,
                    self.library,
                    held,
                )
                return
            try:
                resource, key, exchange = build()
            except Unrecordable as error:
                self._owner.exchange_failed(
                    self if self._handle is None else self._handle,
                    f"{self.library}: {error.reason}",
                )
                return
            self._owner.exchange_finished(
                self if self._handle is None else self._handle, effect, resource, key, exchange
            )
        except Exception as exc:
            absorb(f"recording.finish[{self.library}]", exc)

    def fail(self, reason: str) -> None:
        """The exchange could not be recorded: the operation's effects become incomplete."""
        if collecting.active:  # a finalizer, maybe inside one of our locked sections
            hand_over(lambda: self.fail(reason))
            return
        if not self._claim():
            return
        with guarded(f"recording.fail[{self.library}]"):
            self._owner.exchange_failed(
                self if self._handle is None else self._handle, f"{self.library}: {reason}"
            )


_pipeline: RecordingPipeline | None = None
# The installed pipeline's start_exchange when it makes every check itself (live operations,
# suppression: ``checks_suppression``), so start_exchange() calls it straight away.
_direct: Callable[[str], ExchangeRecorder | None] | None = None
_override: RecordingPipeline | None = None
_secrets: list[str] = []
_secrets_view: tuple[str, ...] = ()
_secrets_lock = threading.Lock()


def set_pipeline(pipeline: RecordingPipeline) -> None:
    """Make ``pipeline`` the receiver of every exchange (the latest call wins)."""
    global _pipeline, _direct
    _pipeline = pipeline
    _direct = pipeline.start_exchange if _checks_everything(pipeline) else None


def _checks_everything(pipeline: RecordingPipeline) -> bool:
    return getattr(pipeline, "checks_suppression", False) is True


def clear_pipeline(pipeline: RecordingPipeline | None = None) -> None:
    """Remove the installed pipeline (only if it is ``pipeline``, when one is given)."""
    global _pipeline, _direct
    if pipeline is None or _pipeline is pipeline:
        _pipeline = None
        _direct = None


def current_pipeline() -> RecordingPipeline | None:
    """The installed pipeline, if any."""
    return _pipeline


def set_override_pipeline(pipeline: RecordingPipeline) -> None:
    """Consult ``pipeline`` before the installed one while it has live operations.

    The CI pytest plugin uses this so a test's trace wins over a span processor.
    """
    global _override
    _override = pipeline


def clear_override_pipeline(pipeline: RecordingPipeline | None = None) -> None:
    """Remove the override pipeline (only if it is ``pipeline``, when one is given)."""
    global _override
    if pipeline is None or _override is pipeline:
        _override = None


def _live_override() -> RecordingPipeline | None:
    override = _override
    if override is not None and override.has_live_operations():
        return override
    return None


def is_suppressed() -> bool:
    """True when OpenTelemetry instrumentation is suppressed in the current context.

    That is how reproit-otel's own traffic (uploads, CLI calls) and exporters' traffic is
    recognised: it is never recorded.
    """
    return bool(otel_context.get_current().get(_SUPPRESS_KEY))


def recording_enabled() -> bool:
    """Cheap check: could :func:`start_exchange` return a recorder?

    Recorders need not call it first: :func:`start_exchange` makes the same checks first.
    """
    pipeline = _pipeline
    override = _override
    if pipeline is None and override is None:
        return False
    try:
        live = (override is not None and override.has_live_operations()) or (
            pipeline is not None and pipeline.has_live_operations()
        )
        return live and not is_suppressed()
    except Exception as exc:
        absorb("recording.recording_enabled", exc)
    return False


class _Collecting(threading.local):
    active = False


collecting = _Collecting()
"""``collecting.active`` is true on a thread while the garbage collector runs on it (while
finalizers and weakref callbacks run); set by :func:`watch_collections`'s GC callback."""
_watching = False


def _collection_phase(phase: str, info: dict[str, int]) -> None:
    # A GC callback: one attribute store, no lock, no call into the pipeline.
    collecting.active = phase == "start"


def watch_collections() -> None:
    """Keep :data:`collecting` up to date from now on (idempotent; the span processor calls
    it when it begins an operation, the CI plugin when it attaches a test)."""
    global _watching
    if not _watching:
        _watching = True
        gc.callbacks.append(_collection_phase)


# Only append and popleft are used on it: both are atomic under the GIL and take no lock.
handed_over: collections.deque[Callable[[], object]] = collections.deque()
"""The work finalizers handed over (see "Finalizers" in the module docstring), oldest first.

Read-only for callers: a hook tests ``if handed_over:`` (no call) before it calls
:func:`settle_handed_over`."""


def hand_over(work: Callable[[], object]) -> None:
    """Run ``work()`` later, at the next hook that holds no lock; for finalizers.

    Takes no lock and never blocks, so it is safe from a finalizer, a weakref callback or a
    signal handler running on a thread that is inside a locked section of reproit-otel.
    ``work`` must not raise (what it raises is logged by the guard).
    """
    handed_over.append(work)


def settle_handed_over() -> None:
    """Run the work finalizers handed over, oldest first, on this thread.

    Callers: the pipeline's hooks and the uploader's thread, at a point where this thread
    holds no lock of reproit-otel (the work takes the locks of the operation it finishes).
    Only the work there is when it starts runs: work handed over again meanwhile waits for
    the next hook.
    """
    if collecting.active:  # inside a collection: the next hook settles it
        return
    for _ in range(len(handed_over)):
        try:
            work = handed_over.popleft()
        except IndexError:  # another thread took the last one
            return
        try:
            work()
        except Exception as exc:
            absorb("recording.handed_over", exc)


def start_exchange(library: str) -> ExchangeRecorder | None:
    """Begin recording one call of ``library`` (``"requests"``, ``"psycopg2"``, ...).

    Returns ``None`` when nothing records this call (see the module docstring); that answer
    costs a few attribute reads when no operation is being recorded. Work that finalizers
    handed over (:func:`hand_over`) is settled first.
    """
    if handed_over:
        settle_handed_over()
    if collecting.active:  # a finalizer's call, maybe inside one of our locked sections
        return None
    pipeline = _pipeline
    override = _override
    try:
        if override is None and _direct is not None:
            return _direct(library)  # it checks for live operations and suppression itself
        if override is not None and override.has_live_operations():
            if is_suppressed():
                return None
            recorder = override.start_exchange(library)
            if recorder is not None:
                return recorder
        if pipeline is None or not pipeline.has_live_operations():
            return None
        if getattr(pipeline, "checks_suppression", False) is not True and is_suppressed():
            return None
        return pipeline.start_exchange(library)
    except Exception as exc:
        absorb(f"recording.start_exchange[{library}]", exc)
    return None


def mark_incomplete(reason: str) -> None:
    """Report an unrecordable call in the current operation; its effects become incomplete."""
    pipeline = _pipeline
    if pipeline is None and _override is None:
        return
    if collecting.active:  # the current span is unknown later: its span reports it instead
        return
    with guarded("recording.mark_incomplete"):
        if is_suppressed():
            return
        target = _live_override() or pipeline
        if target is not None:
            target.mark_incomplete(reason)


def cover_current_span() -> None:
    """Report that the current dependency span made no call that needs an exchange of its own.

    For a wrapper whose work is recorded elsewhere (SQLAlchemy's ``connect`` span around a pool
    checkout of a recorded psycopg2 connection). Pipelines without the notion ignore it.
    """
    pipeline = _pipeline
    if pipeline is None and _override is None:
        return
    if collecting.active:  # a finalizer's call, maybe inside one of our locked sections
        return
    with guarded("recording.cover_current_span"):
        if is_suppressed():
            return
        target = _live_override() or pipeline
        cover = getattr(target, "cover_current_span", None)
        if callable(cover):
            cover()


def register_secret_values(values: Iterable[str]) -> None:
    """Add values to be replaced wherever they appear in recorded strings (D8).

    Empty strings are ignored. ``REPROIT_SECRET_VALUES`` is added by the pipeline itself.
    """
    global _secrets_view
    with _secrets_lock:
        for value in values:
            if isinstance(value, str) and value and value not in _secrets:
                _secrets.append(value)
        _secrets_view = tuple(_secrets)


def registered_secret_values() -> tuple[str, ...]:
    """Every value registered through :func:`register_secret_values`, in registration order."""
    return _secrets_view  # replaced whole under the lock, so always a consistent tuple


# The original values a failing call's redaction hid, by the exception the call raised (a
# database error echoes its parameters: ``Failing row contains (5, a@b.c, hunter2)``). Weak
# keys: an exception the application drops takes its entry with it.
_echoed: weakref.WeakKeyDictionary[BaseException, tuple[str, ...]] = weakref.WeakKeyDictionary()
_MAX_CHAIN_WALK = 16


def note_echoed_values(error: BaseException, values: Iterable[str]) -> None:
    """Remember the original ``values`` redaction hid from the call that raised ``error``, so
    every text made of ``error`` (the exception record, its causes) is scrubbed of them."""
    kept = tuple(v for v in values if isinstance(v, str) and v)
    if not kept:
        return
    with contextlib.suppress(TypeError):  # an exception class that is not hashable
        _echoed[error] = _echoed.get(error, ()) + kept


def echoed_values(error: BaseException) -> tuple[str, ...]:
    """The values :func:`note_echoed_values` kept for ``error`` and the exceptions it chains."""
    found: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending and len(seen) < _MAX_CHAIN_WALK:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        with contextlib.suppress(TypeError):
            found.extend(_echoed.get(current, ()))
        for linked in (current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)
    return tuple(dict.fromkeys(found))
