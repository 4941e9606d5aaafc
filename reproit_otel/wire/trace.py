"""The scan-time trace: request headers in, ``x-reproit-events`` out (PROTOCOL sections 2 and 6).

A traced request carries ``x-reproit-trace`` (and optionally actor, action, build and config
contract headers). :func:`trace_context_from_headers` turns those into a :class:`TraceContext`;
capture mode and CI mode build one themselves with ``capture_envelope=True``.

:meth:`BackendTrace.begin` opens a trace for one operation and pushes its ``start`` event.
The application (or a recorder) adds ``effect`` events, an agent may mark an oracle, and
:meth:`BackendTrace.finish` pushes the ``return`` event. :meth:`BackendTrace.header` is the
``x-reproit-events`` response header: unpadded base64url of the canonical JSON of the events::

    context = trace_context_from_headers(request_headers.get)
    if context is not None:
        trace = BackendTrace.begin(context, "POST /projects", input=http_input(body=body))
        trace.effect("write", resource="projects", key="42")
        trace.finish({"id": 42}, 201, True, True)
        response_headers["x-reproit-events"] = trace.header()

Every event starts with the trace's common envelope (``traceId``, ``spanId``, ``actionIndex``,
``operation``, then ``actor``, ``build``, ``configContract``, ``replaySeed``, ``tenant``,
``idempotencyKey``, ``selections`` when present), then ``sequence`` and ``kind``, then the
fields of its kind, then (capture and CI traces only) ``at`` and ``monoNs``. Inputs, effect
details, exchanges and outputs are structurally redacted before they are stored.

Limits, all raising :class:`~reproit_otel.errors.TraceError` with a ``code``:

* ``InvalidOperation``: an operation that is empty or longer than 256 code points after
  trimming, an explicit span id that is empty or longer than 128 code points, an unknown
  effect kind or oracle id;
* ``AlreadyFinished``: ``effect``/``oracle``/``finish`` after ``finish``, or ``header`` before;
* ``TooManyEvents``: a push past 256 events (a failing ``finish`` leaves the trace open);
* ``HeaderTooLarge``: an encoded header longer than 60000 characters.

Long names (decision D7): the default span id is ``<traceId>:<operation>``. Where that would
exceed 128 code points the reference SDK throws and the request goes untraced; reproit-otel
instead uses ``<traceId>:sha256:<first 24 hex of SHA-256(operation)>``. Should even that exceed
128 code points (a trace id longer than 96 code points), the span id is the identity of the
whole default span id, ``sha256:<first 24 hex of SHA-256(traceId:operation)>``. A span id
given explicitly is never rewritten: over-long or empty, it is still ``InvalidOperation``.

Sequence numbers come from one process-wide counter shared by every trace (thread-safe);
:func:`reset_sequence` restarts it for tests. A trace itself is meant for one request, but its
pushes are serialized so a recorder finishing an exchange on another thread is safe.

Deferred events (the capture pipeline's fast path). In capture mode most operations succeed
and are never uploaded, so building, bounding and redacting their events would be wasted
work. Three internal entry points let the pipeline push an event whose *fields* are built
later: ``BackendTrace.begin(..., input_factory=f)`` (the ``start`` event's input is ``f()``),
:meth:`BackendTrace.defer_effect`, and ``finish(..., output_factory=f)`` (the ``return`` event
is pushed at once, its ``output`` is ``f()`` once built). The event's place in the trace, its
``sequence``, ``at`` and ``monoNs`` are taken at the push, exactly as an eager push takes
them; its fields are built (and redacted) the first time anything reads the events
(:attr:`~BackendTrace.events`, :meth:`~BackendTrace.header`) or the pipeline calls
:meth:`~BackendTrace.materialize`, after which the trace is exactly the one eager pushes
would have built. Every limit counts deferred events as events (256 in all), so a long
operation holds at most 256 unbuilt events.
:meth:`~BackendTrace.settled_events` lists the events built so far without building the rest
(there, a ``return`` event whose output is still deferred shows ``output: null``). A deferred
effect must never be an agent oracle marker (recorders' effects never are), so the ``return``
event and any oracle marker are always among the settled events.

Locks. A trace has one plain lock, taken by every push and every read of its event list.
Under it a push stamps the entry (sequence, clocks) and appends it; a read copies the list.
Nothing under it builds, redacts, encodes or logs: fields are built before a push takes it,
and deferred events are built with no lock held and published under it afterwards (an entry
published meanwhile by another reader is left as that reader built it, so two threads reading
at the same moment may both build it, and one result is kept). The lock is never held while
code outside this module runs, so no finalizer, logging handler or nested instrumentation can
run our hooks on a thread that holds it except through a collection landing on one of those
few small allocations, and reproit-otel's own finalizers never push (they hand over, see
``reproit_otel/recording.py``). The clocks read under it are ``time.time_ns`` and
``time.monotonic_ns`` (pinned by a replay's envelope, they still take no lock of ours) or
the ``wall_ms``/``mono_ns`` callables given to :meth:`BackendTrace.begin`, which must not
touch the trace.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

from reproit_otel.errors import TraceError
from reproit_otel.wire._js import (
    UNSET,
    code_point_cut,
    is_js_integer,
    js_number,
    js_string,
    js_trim,
    utf8_bytes,
    well_formed,
)
from reproit_otel.wire.canonical import canonical_json_bytes
from reproit_otel.wire.redaction import redact

__all__ = [
    "AGENT_ORACLES",
    "EFFECT_KINDS",
    "MAX_EVENTS",
    "MAX_HEADER_LENGTH",
    "ORACLE_MARKER_RESOURCE",
    "SERVER_ERROR_ORACLE",
    "BackendTrace",
    "TraceContext",
    "TraceEvent",
    "identity",
    "marked_oracle",
    "reset_sequence",
    "trace_context_from_headers",
]

TraceEvent = dict[str, Any]
"""One trace event as a JSON object (key order as the reference builds it)."""

TRACE_HEADER: Final = "x-reproit-trace"
ACTOR_HEADER: Final = "x-reproit-actor"
ACTION_HEADER: Final = "x-reproit-action"
BUILD_HEADER: Final = "x-reproit-build"
CONFIG_CONTRACT_HEADER: Final = "x-reproit-config-contract"
EVENTS_HEADER: Final = "x-reproit-events"

MAX_EVENTS: Final = 256
"""Events per trace (start, effects and return together); also the selections kept."""
MAX_HEADER_LENGTH: Final = 60000
"""Longest ``x-reproit-events`` value, in base64url characters."""
MAX_TRACE_ID: Final = 128
MAX_ACTOR: Final = 32
MAX_BUILD: Final = 128
MAX_CONFIG_CONTRACT: Final = 128
MAX_OPERATION: Final = 256
MAX_SPAN_ID: Final = 128
MAX_TENANT: Final = 128
MAX_EFFECT_FIELD: Final = 256
MAX_ACTION_INDEX: Final = 0xFFFFFFFF

EFFECT_KINDS: Final = ("read", "write", "delete", "emit", "call")
"""The effect kinds :meth:`BackendTrace.effect` accepts."""

SERVER_ERROR_ORACLE: Final = "backend-server-error"
"""The oracle of an operation that returned HTTP 5xx."""
AGENT_ORACLES: Final = (
    "agent-response-content",
    "agent-guardrail-violation",
    "agent-loop-bound-exceeded",
)
"""The agent oracle ids :meth:`BackendTrace.oracle` accepts, in registry order."""
ORACLE_MARKER_RESOURCE: Final = "reproit-oracle"
"""The ``resource`` of the ``emit`` effect that marks an agent oracle."""


# --- the process-wide sequence counter -------------------------------------------------------

# ``next()`` on an ``itertools.count`` is one C call that the GIL keeps atomic: no lock needed.
_sequence = itertools.count(1)


def reset_sequence(start: int = 1) -> None:
    """Restart the process-wide event sequence counter at ``start`` (a test hook)."""
    global _sequence
    _sequence = itertools.count(start)


# --- JavaScript-flavoured helpers ------------------------------------------------------------


def _bounded(text: str, maximum: int) -> str | None:
    """Trimmed text of 1..``maximum`` code points, else ``None`` (never truncated)."""
    if text.isascii() and text.isprintable():
        # Printable ASCII holds no lone surrogate, and its only JavaScript white space is " ".
        trimmed = text.strip(" ")
    else:
        trimmed = js_trim(well_formed(text))
    if not trimmed or len(trimmed) > maximum:
        return None
    return trimmed


def _absent(value: object) -> bool:
    """JavaScript ``value == null``: ``undefined`` or ``null``."""
    return value is UNSET or value is None


def _truthy(value: object) -> bool:
    """JavaScript truthiness for the values a context may hold."""
    if _absent(value) or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not math.isnan(value)
    if isinstance(value, str):
        return value != ""
    return True


def _header_text(value: object) -> str:
    """``String(value)`` of a header value; raw header bytes are read as ISO-8859-1."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return js_string(value)


def identity(value: str) -> str:
    """``sha256:`` and the first 12 bytes of SHA-256 of the UTF-8 text, as 24 lowercase hex."""
    return "sha256:" + hashlib.sha256(utf8_bytes(value)).hexdigest()[:24]


# --- trace context ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceContext:
    """Who and what a trace belongs to (PROTOCOL 2.1, 5.2, 8.2).

    ``capture_envelope`` marks capture and CI traces: their events carry ``at`` and
    ``monoNs``, and ``replaySeed`` when ``replay_seed`` is a string.
    """

    trace_id: str
    actor: str | None = None
    action_index: int = 0
    build: str | None = None
    config_contract: str | None = None
    capture_envelope: bool = False
    replay_seed: str | None = None

    @classmethod
    def from_wire(cls, context: Mapping[str, Any]) -> TraceContext:
        """A context from its JSON spelling (``traceId``, ``actionIndex``, ...), values as given."""
        return cls(
            trace_id=context.get("traceId", UNSET),
            actor=context.get("actor"),
            action_index=context.get("actionIndex", UNSET),
            build=context.get("build"),
            config_contract=context.get("configContract"),
            capture_envelope=context.get("captureEnvelope") is True,
            replay_seed=context.get("replaySeed"),
        )

    def to_wire(self) -> dict[str, Any]:
        """The JSON spelling; ``captureEnvelope``/``replaySeed`` only for capture contexts."""
        wire: dict[str, Any] = {
            "traceId": self.trace_id,
            "actor": self.actor,
            "actionIndex": self.action_index,
            "build": self.build,
            "configContract": self.config_contract,
        }
        if self.capture_envelope:
            wire["captureEnvelope"] = True
            wire["replaySeed"] = self.replay_seed
        return wire


def _action_index(value: object) -> int:
    if _absent(value):
        return 0
    number = js_number(js_trim(_header_text(value)))
    if is_js_integer(number) and 0 <= number <= MAX_ACTION_INDEX:
        return int(number)
    return 0


def trace_context_from_headers(get: Callable[[str], Any]) -> TraceContext | None:
    """Read the trusted ``x-reproit-*`` request headers (PROTOCOL 2.1).

    ``get(name)`` returns the value of the lowercase header ``name``, or ``None`` (or
    :data:`UNSET`) when the request has none. Values that are not strings are stringified as
    JavaScript would (a list of repeated values becomes ``"a,b"``). Returns ``None`` when there
    is no usable ``x-reproit-trace`` (empty, or over 128 code points after trimming): the
    request is then not traced. Other over-long or empty fields become ``None``; an action
    index that is not an integer in 0..4294967295 (JavaScript ``Number`` syntax) becomes 0.
    """

    def field(name: str, maximum: int) -> str | None:
        value = get(name)
        return None if _absent(value) else _bounded(_header_text(value), maximum)

    trace_id = field(TRACE_HEADER, MAX_TRACE_ID)
    if trace_id is None:
        return None
    return TraceContext(
        trace_id=trace_id,
        actor=field(ACTOR_HEADER, MAX_ACTOR),
        action_index=_action_index(get(ACTION_HEADER)),
        build=field(BUILD_HEADER, MAX_BUILD),
        config_contract=field(CONFIG_CONTRACT_HEADER, MAX_CONFIG_CONTRACT),
    )


# --- the trace -------------------------------------------------------------------------------


_BOUNDARY_EFFECTS: Final = ("call", "read", "write", "delete")


def _effect_fields(
    kind: str,
    *,
    resource: Any = UNSET,
    key: Any = UNSET,
    tenant: Any = UNSET,
    event: Any = UNSET,
    detail: Any = UNSET,
    exchange: Any = UNSET,
) -> dict[str, Any]:
    """The fields of an ``effect`` event (see :meth:`BackendTrace.effect`)."""
    fields: dict[str, Any] = {"effect": kind}
    for name, value in (
        ("resource", resource),
        ("key", key),
        ("effectTenant", tenant),
        ("event", event),
    ):
        if not _absent(value):
            fields[name] = code_point_cut(js_string(value), MAX_EFFECT_FIELD)
    if not _absent(detail):
        redacted = redact(detail)
        if isinstance(redacted, dict):
            for part in ("before", "after", "payload"):
                if part in redacted:
                    fields[part] = redacted[part]
    if not _absent(exchange):
        redacted = redact(exchange)
        if isinstance(redacted, dict):
            fields["exchange"] = redacted
    return fields


class _Deferred:
    """A pushed event whose fields are built later (see "Deferred events" above)."""

    __slots__ = ("at", "build", "kind", "mono_ns", "sequence")

    def __init__(
        self,
        kind: str,
        build: Callable[[], Mapping[str, Any] | None],
        sequence: int,
        at: int | None,
        mono_ns: int | None,
    ) -> None:
        self.kind = kind
        self.build = build
        self.sequence = sequence
        self.at = at
        self.mono_ns = mono_ns


class _Unjoined(_Deferred):
    """A ``return`` event whose fields are known but not yet joined to the common fields.

    Only a trace whose common fields are themselves deferred holds one (see
    :meth:`BackendTrace._join_return_locked`); it counts as settled, never as deferred.
    """

    __slots__ = ("fields",)

    def __init__(
        self, fields: dict[str, Any], sequence: int, at: int | None, mono_ns: int | None
    ) -> None:
        super().__init__("return", _no_fields, sequence, at, mono_ns)
        self.fields = fields


def _no_fields() -> None:
    return None


DeferredEffect = Callable[[], "tuple[Any, Any, Any] | None"]
"""Builds a deferred effect's ``(resource, key, exchange)`` (each may be :data:`UNSET`), or
returns ``None`` when it cannot: the effect is then left out of the trace."""


def _default_span_id(trace_id: object, name: str) -> str:
    """The default span id, shortened as decision D7 says when it would be too long (already
    trimmed and bounded, as :func:`_bounded` leaves it)."""
    prefix = js_string(trace_id)
    span_id = _bounded(prefix + ":" + name, MAX_SPAN_ID)
    if span_id is not None:
        return span_id
    span_id = _bounded(prefix + ":" + identity(name), MAX_SPAN_ID)
    if span_id is not None:
        return span_id
    return identity(prefix + ":" + name)


class CaptureContext:
    """A capture context (PROTOCOL 5.2) read exactly like a :class:`TraceContext` by
    :meth:`BackendTrace.begin`: ``actionIndex`` 0, no actor or config contract, capture
    envelope on. Internal to the capture pipeline, which begins one per request and so uses
    a plain object rather than a frozen dataclass (whose constructor costs several calls).
    """

    __slots__ = ("build", "replay_seed", "trace_id")

    action_index = 0
    actor = None
    config_contract = None
    capture_envelope = True

    def __init__(self, trace_id: str, build: str | None, replay_seed: str) -> None:
        self.trace_id = trace_id
        self.build = build
        self.replay_seed = replay_seed


def _common_fields(
    context: TraceContext | CaptureContext,
    name: str,
    *,
    span_id: Any = UNSET,
    tenant: Any = UNSET,
    idempotency_key: Any = UNSET,
    selections: Any = UNSET,
) -> dict[str, Any]:
    """The fields every event of a trace carries (see :meth:`BackendTrace.begin`).

    ``name`` is the bounded operation name. Raises ``TraceError`` ``InvalidOperation`` for an
    explicit span id that is empty or too long.
    """
    if _absent(span_id):
        span: str | None = _default_span_id(context.trace_id, name)
    else:
        span = _bounded(js_string(span_id), MAX_SPAN_ID)
    if span is None:
        raise TraceError("InvalidOperation")
    common: dict[str, Any] = {"traceId": context.trace_id, "spanId": span}
    action_index: Any = context.action_index
    if action_index is not UNSET:  # a context read from JSON may lack it
        common["actionIndex"] = action_index
    common["operation"] = name
    if _truthy(context.actor):
        common["actor"] = context.actor
    if _truthy(context.build):
        common["build"] = context.build
    if _truthy(context.config_contract):
        common["configContract"] = context.config_contract
    if context.capture_envelope is True and isinstance(context.replay_seed, str):
        common["replaySeed"] = context.replay_seed
    bounded_tenant = None if _absent(tenant) else _bounded(js_string(tenant), MAX_TENANT)
    if bounded_tenant is not None:
        common["tenant"] = bounded_tenant
    if not _absent(idempotency_key):
        common["idempotencyKey"] = identity(js_string(idempotency_key))
    if isinstance(selections, (list, tuple)) and selections:
        common["selections"] = list(selections[:MAX_EVENTS])
    return common


class BackendTrace:
    """The events of one traced operation. Open one with :meth:`begin`."""

    def __init__(
        self,
        common: Mapping[str, Any] | None,
        *,
        capture_envelope: bool = False,
        wall_ms: Callable[[], int] | None = None,
        mono_ns: Callable[[], int] | None = None,
        common_factory: Callable[[], dict[str, Any]] | None = None,
        max_events: int = MAX_EVENTS,
    ) -> None:
        """``common`` are the fields every event carries; ``None`` with ``common_factory``
        (internal) builds them when an event first needs them."""
        self._max_events = max(MAX_EVENTS, max_events)
        self._common: dict[str, Any] | None = None if common is None else dict(common)
        self._common_factory = common_factory
        self._events: list[TraceEvent | _Deferred] = []
        self._deferred = 0
        self._pending_output: tuple[TraceEvent | None, Callable[[], Any]] | None = None
        self._unjoined: _Unjoined | None = None
        self._return_status: Any = UNSET
        self._finished = False
        self._lock = threading.Lock()
        self._capture_envelope = capture_envelope
        # None: the real clocks, read inline (looked up at call time, so a pinned clock is seen).
        self._wall_ms = wall_ms
        self._mono_ns = mono_ns
        self._origin_ns = 0
        if capture_envelope:
            self._origin_ns = time.monotonic_ns() if mono_ns is None else mono_ns()
        self._marker_pushed = False
        self._returned: TraceEvent | None = None
        self.unheld_effects: dict[str, int] = {}
        """Effects not kept, by effect kind, because the operation had passed its capture
        budget (capture pipeline, heavy operations); the batch counts them as dropped."""
        self.capture_budget = 0
        """That budget in bytes (0: none)."""
        self.capped_effects: dict[str, int] = {}
        """Effects not kept, by effect kind, because the trace had reached its event cap
        (capture pipeline, heavy operations: room is left for the ``return`` event); the
        batch counts them as dropped."""

    @classmethod
    def begin(
        cls,
        context: TraceContext | CaptureContext | Mapping[str, Any],
        operation: Any,
        *,
        span_id: Any = UNSET,
        tenant: Any = UNSET,
        idempotency_key: Any = UNSET,
        input: Any = UNSET,
        selections: Any = UNSET,
        wall_ms: Callable[[], int] | None = None,
        mono_ns: Callable[[], int] | None = None,
        input_factory: Callable[[], Any] | None = None,
        max_events: int = MAX_EVENTS,
    ) -> BackendTrace:
        """Open a trace and push its ``start`` event (PROTOCOL 2.2).

        ``context`` is a :class:`TraceContext` or its JSON spelling. ``operation`` is
        stringified and trimmed; ``span_id`` defaults to ``<traceId>:<operation>`` (shortened
        per decision D7); an over-long ``tenant`` is dropped; ``idempotency_key`` is recorded
        only as its :func:`identity`; ``input`` is redacted; at most 256 ``selections`` are
        kept. For capture-envelope contexts ``wall_ms`` (epoch milliseconds) and ``mono_ns``
        (a monotonic nanosecond clock) replace the real clocks behind ``at`` and ``monoNs``.
        ``input_factory`` (internal, capture pipeline) replaces ``input``: it is called, and its
        result redacted, only when the events are first read (see "Deferred events").
        ``max_events`` (capture pipeline, heavy operations) lifts the 256-event limit of a
        capture trace; it never applies to scan-time traces, whose events travel in a header.

        Raises :class:`~reproit_otel.errors.TraceError` ``InvalidOperation`` for an empty or
        over-long operation or explicit span id.
        """
        if not isinstance(context, (TraceContext, CaptureContext)):
            context = TraceContext.from_wire(context)
        name = _bounded(js_string(operation), MAX_OPERATION)
        if name is None:
            raise TraceError("InvalidOperation")
        envelope = context.capture_envelope is True
        if (
            input_factory is not None
            and span_id is UNSET
            and tenant is UNSET
            and idempotency_key is UNSET
            and selections is UNSET
        ):
            # The capture pipeline's case: nothing left can fail (a default span id is always
            # valid), so the common fields are built only if an event is read.
            trace = cls(
                None,
                capture_envelope=envelope,
                wall_ms=wall_ms,
                mono_ns=mono_ns,
                common_factory=functools.partial(_common_fields, context, name),
                max_events=max_events if envelope else MAX_EVENTS,
            )
            factory = input_factory
            trace._defer("start", lambda: {"input": redact(factory())})
            return trace
        common = _common_fields(
            context,
            name,
            span_id=span_id,
            tenant=tenant,
            idempotency_key=idempotency_key,
            selections=selections,
        )
        trace = cls(
            common,
            capture_envelope=envelope,
            wall_ms=wall_ms,
            mono_ns=mono_ns,
            max_events=max_events if envelope else MAX_EVENTS,
        )
        if input_factory is None:
            trace._push("start", {"input": redact(None if input is UNSET else input)})
        else:
            factory = input_factory
            trace._defer("start", lambda: {"input": redact(factory())})
        return trace

    # -- reading ----------------------------------------------------------------------------

    @property
    def events(self) -> list[TraceEvent]:
        """The events in push order (a new list; the event objects are the trace's own).

        Builds any deferred event first.
        """
        while True:
            with self._lock:
                if self._unjoined is not None:
                    self._join_return_locked()
                if not self._deferred:
                    return cast(list[TraceEvent], list(self._events))  # none is deferred
            self._materialize()

    def settled_events(self) -> list[TraceEvent]:
        """The events built so far, in push order, leaving deferred events unbuilt.

        The ``return`` event and agent oracle markers are never deferred, so whether a
        finished trace is a failure can be read from these alone.
        """
        with self._lock:
            if self._unjoined is not None:
                self._join_return_locked()
            return [event for event in self._events if not isinstance(event, _Deferred)]

    @property
    def return_event(self) -> TraceEvent | None:
        """The ``return`` event once :meth:`finish` pushed it (its ``output`` may be deferred)."""
        with self._lock:
            if self._unjoined is not None:
                self._join_return_locked()
            return self._returned

    @property
    def return_status(self) -> Any:
        """The ``status`` :meth:`finish` recorded (:data:`UNSET` when none, or unfinished);
        read without building any event."""
        return self._return_status

    @property
    def may_hold_oracle_marker(self) -> bool:
        """False when no pushed event can be an agent oracle marker (a cheap check first)."""
        return self._marker_pushed

    @property
    def deferred_count(self) -> int:
        """How many pushed events still wait to be built."""
        return self._deferred

    def materialize(self) -> None:
        """Build every deferred event now (the capture pipeline calls it for a failure).

        The builders and the redaction run outside the trace's lock (see "Locks" above), so
        an event deferred meanwhile by another thread may still be deferred on return.
        """
        with self._lock:
            if self._unjoined is not None:
                self._join_return_locked()
            if not self._deferred:
                return
        self._materialize()

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` succeeded."""
        return self._finished

    @property
    def trace_id(self) -> Any:
        """The trace id every event carries."""
        return self._common_now()["traceId"]

    @property
    def span_id(self) -> str:
        """The span id every event carries."""
        span: str = self._common_now()["spanId"]
        return span

    @property
    def operation(self) -> str:
        """The bounded operation name every event carries."""
        name: str = self._common_now()["operation"]
        return name

    @property
    def max_events(self) -> int:
        """The most events this trace holds (256, or a heavy capture's cap)."""
        return self._max_events

    def room_for_effect(self) -> bool:
        """Whether an effect pushed now still leaves room for the ``return`` event."""
        return len(self._events) < self._max_events - 1

    @property
    def capture_envelope(self) -> bool:
        """Whether events carry ``at``/``monoNs`` (capture and CI traces)."""
        return self._capture_envelope

    # -- writing ----------------------------------------------------------------------------

    def effect(
        self,
        kind: Any,
        *,
        resource: Any = UNSET,
        key: Any = UNSET,
        tenant: Any = UNSET,
        event: Any = UNSET,
        detail: Any = UNSET,
        exchange: Any = UNSET,
    ) -> None:
        """Push an ``effect`` event (PROTOCOL 2.4).

        ``resource``, ``key``, ``tenant`` (recorded as ``effectTenant``) and ``event`` are
        stringified and cut to 256 code points. ``detail`` is redacted and contributes only
        its ``before``, ``after`` and ``payload`` keys; ``exchange`` is redacted and kept when
        it is an object. Raises ``TraceError`` ``AlreadyFinished``, ``InvalidOperation`` (kind
        not one of :data:`EFFECT_KINDS`) or ``TooManyEvents``.
        """
        if self._finished:
            raise TraceError("AlreadyFinished")
        self.push_effect_fields(
            self.effect_fields(
                kind,
                resource=resource,
                key=key,
                tenant=tenant,
                event=event,
                detail=detail,
                exchange=exchange,
            )
        )

    def effect_fields(
        self,
        kind: Any,
        *,
        resource: Any = UNSET,
        key: Any = UNSET,
        tenant: Any = UNSET,
        event: Any = UNSET,
        detail: Any = UNSET,
        exchange: Any = UNSET,
    ) -> dict[str, Any]:
        """The fields :meth:`effect` would push, redacted, without pushing them.

        Internal: the capture pipeline redacts with no lock held, then pushes the fields with
        :meth:`push_effect_fields` under its own lock. Raises ``TraceError``
        ``InvalidOperation`` for a kind not in :data:`EFFECT_KINDS`.
        """
        if not isinstance(kind, str) or kind not in EFFECT_KINDS:
            raise TraceError("InvalidOperation")
        return _effect_fields(
            kind,
            resource=resource,
            key=key,
            tenant=tenant,
            event=event,
            detail=detail,
            exchange=exchange,
        )

    def push_effect_fields(self, fields: dict[str, Any]) -> None:
        """Push an ``effect`` event with ``fields`` from :meth:`effect_fields` (internal).

        Raises ``TraceError`` ``AlreadyFinished`` or ``TooManyEvents`` as :meth:`effect`.
        """
        if self._finished:
            raise TraceError("AlreadyFinished")
        if fields.get("resource") == ORACLE_MARKER_RESOURCE:
            self._marker_pushed = True
        self._push("effect", fields)

    def defer_effect(self, kind: str, build: DeferredEffect) -> None:
        """Push a ``call``/``read``/``write``/``delete`` effect whose fields are built later.

        Internal (the capture pipeline's recorders). Takes the event's place, ``sequence``,
        ``at`` and ``monoNs`` now; ``build()`` gives ``(resource, key, exchange)`` when the
        events are first read, and the fields are then exactly those :meth:`effect` would have
        recorded. A ``build`` returning ``None`` leaves the event out. Raises like
        :meth:`effect` (``AlreadyFinished``, ``InvalidOperation``, ``TooManyEvents``).
        """
        if self._finished:
            raise TraceError("AlreadyFinished")
        if kind not in _BOUNDARY_EFFECTS:
            raise TraceError("InvalidOperation")

        def fields() -> dict[str, Any] | None:
            built = build()
            if built is None:
                return None
            resource, key, exchange = built
            made = _effect_fields(kind, resource=resource, key=key, exchange=exchange)
            if made.get("resource") == ORACLE_MARKER_RESOURCE and made.get("key") in AGENT_ORACLES:
                return None  # would be an oracle marker, which is never deferred
            return made

        self._defer("effect", fields)

    def oracle(self, oracle_id: Any, detail: Any = UNSET) -> None:
        """Mark an agent oracle: an ``emit`` effect on ``reproit-oracle`` keyed by the id.

        ``oracle_id`` must be one of :data:`AGENT_ORACLES` (else ``InvalidOperation``);
        ``detail``, when given and not ``None``, is recorded (redacted) as ``payload``.
        """
        if not isinstance(oracle_id, str) or oracle_id not in AGENT_ORACLES:
            raise TraceError("InvalidOperation")
        self.effect(
            "emit",
            resource=ORACLE_MARKER_RESOURCE,
            key=oracle_id,
            detail=UNSET if _absent(detail) else {"payload": detail},
        )

    def finish(
        self,
        output: Any = UNSET,
        status: Any = UNSET,
        success: Any = UNSET,
        effects_complete: Any = UNSET,
        *,
        output_factory: Callable[[], Any] | None = None,
    ) -> None:
        """Push the ``return`` event and mark the trace finished (PROTOCOL 2.4).

        ``output`` is redacted (``null`` when absent); ``status`` is recorded as given and
        left out when absent; ``success`` and ``effects_complete`` are ``true`` only for
        ``True``. Raises ``TraceError`` ``AlreadyFinished`` or ``TooManyEvents`` (the trace then
        stays unfinished).
        """
        if self._finished:
            raise TraceError("AlreadyFinished")
        if output is None or output is UNSET:
            fields: dict[str, Any] = {"output": None}  # what redact() makes of it, without a walk
        else:
            fields = {"output": redact(output)}
        if status is not UNSET:
            fields["status"] = status
        fields["success"] = success is True
        fields["effectsComplete"] = effects_complete is True
        event: TraceEvent | None = None
        if self._common is None:
            # Common fields not built yet: keep it so; the event is joined when it is read.
            with self._lock:
                entry = self._stamp_locked("return", fields=fields)
                assert isinstance(entry, _Unjoined)
                self._unjoined = entry
        else:
            event = self._push("return", fields)
            self._returned = event
        self._return_status = status
        if output_factory is not None:
            with self._lock:
                self._pending_output = (event, output_factory)
                self._deferred += 1
        self._finished = True

    def header(self) -> str:
        """The ``x-reproit-events`` value: unpadded base64url of the events' canonical JSON.

        Raises ``TraceError`` ``AlreadyFinished`` while the trace is not finished (the
        reference reuses that code) and ``HeaderTooLarge`` past 60000 characters.
        """
        if not self._finished:
            raise TraceError("AlreadyFinished")
        encoded = base64.urlsafe_b64encode(canonical_json_bytes(self.events)).rstrip(b"=")
        if len(encoded) > MAX_HEADER_LENGTH:
            raise TraceError("HeaderTooLarge")
        return encoded.decode("ascii")

    def _push(self, kind: str, fields: Mapping[str, Any]) -> TraceEvent:
        common = self._common_now()  # built, if deferred, before the lock
        with self._lock:
            if len(self._events) >= self._max_events:
                raise TraceError("TooManyEvents")
            event: TraceEvent = dict(common)
            event["sequence"] = next(_sequence)
            event["kind"] = kind
            event.update(fields)
            if self._capture_envelope:
                wall, mono = self._wall_ms, self._mono_ns
                event["at"] = time.time_ns() // 1_000_000 if wall is None else wall()
                event["monoNs"] = (
                    time.monotonic_ns() if mono is None else mono()
                ) - self._origin_ns
            self._events.append(event)
            return event

    def _defer(self, kind: str, build: Callable[[], Mapping[str, Any] | None]) -> None:
        """Push ``kind`` now (place, sequence, stamps); its fields come from ``build()`` later."""
        with self._lock:
            self._stamp_locked(kind, build)
            self._deferred += 1

    def _common_now(self) -> dict[str, Any]:
        """The common fields, built now if they were deferred (idempotent, so no lock)."""
        common = self._common
        if common is None:
            factory = self._common_factory
            assert factory is not None
            common = self._common = factory()
        return common

    def _stamp_locked(
        self,
        kind: str,
        build: Callable[[], Mapping[str, Any] | None] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> _Deferred:
        """Append an entry stamped now (place, sequence, ``at``, ``monoNs``): a deferred event
        built by ``build()`` later, or (with ``fields``) a ``return`` joined when it is read."""
        if len(self._events) >= self._max_events:
            raise TraceError("TooManyEvents")
        sequence = next(_sequence)
        at: int | None = None
        mono: int | None = None
        if self._capture_envelope:
            wall, clock = self._wall_ms, self._mono_ns
            at = time.time_ns() // 1_000_000 if wall is None else wall()
            mono = (time.monotonic_ns() if clock is None else clock()) - self._origin_ns
        entry: _Deferred
        if fields is not None:
            entry = _Unjoined(fields, sequence, at, mono)
        else:
            assert build is not None
            entry = _Deferred(kind, build, sequence, at, mono)
        self._events.append(entry)
        return entry

    def _event_of(self, entry: _Deferred, fields: Mapping[str, Any]) -> TraceEvent:
        """The event of a stamped entry with ``fields`` (as an eager push builds it)."""
        event: TraceEvent = dict(self._common_now())
        event["sequence"] = entry.sequence
        event["kind"] = entry.kind
        event.update(fields)
        if entry.at is not None:
            event["at"] = entry.at
            event["monoNs"] = entry.mono_ns
        return event

    def _join_return_locked(self) -> None:
        """Turn the unjoined ``return`` into its event, in its place."""
        entry = self._unjoined
        if entry is None:
            return
        event = self._event_of(entry, entry.fields)
        events = self._events
        for index in range(len(events) - 1, -1, -1):
            if events[index] is entry:
                events[index] = event
                break
        self._unjoined = None
        self._returned = event
        pending = self._pending_output
        if pending is not None and pending[0] is None:
            self._pending_output = (event, pending[1])

    def _materialize(self) -> None:
        """Build the events deferred so far and put them in their places; a ``None`` build
        drops its event.

        The entries are listed under the lock, built (and redacted) with no lock held, and
        published under it again: an entry another reader published meanwhile is left as
        that reader built it, one deferred meanwhile stays deferred. Builders must not raise
        (the pipeline guards its own); if one does, the exception propagates and the trace is
        left as it was.
        """
        with self._lock:
            self._join_return_locked()
            entries = [entry for entry in self._events if type(entry) is _Deferred]
            pending = self._pending_output
        built: dict[int, TraceEvent | None] = {}
        for entry in entries:
            fields = entry.build()
            built[id(entry)] = None if fields is None else self._event_of(entry, fields)
        output: Any = UNSET
        if pending is not None:
            output = redact(pending[1]())
        with self._lock:
            events: list[TraceEvent | _Deferred] = []
            deferred = 0
            for item in self._events:
                # ``entries`` keeps every listed entry alive, so an id names one of them.
                if type(item) is _Deferred:
                    if id(item) in built:
                        event = built[id(item)]
                        if event is not None:
                            events.append(event)
                        continue
                    deferred += 1
                events.append(item)
            if pending is not None and self._pending_output is pending:
                returned = pending[0]
                assert returned is not None  # joined above
                returned["output"] = output  # same key, so the same place
                self._pending_output = None
            self._events = events
            self._deferred = deferred + (self._pending_output is not None)


def marked_oracle(events: Iterable[Any]) -> str | None:
    """The agent oracle id of the first oracle marker among ``events``, else ``None``.

    A marker is an ``effect`` event on resource ``reproit-oracle`` whose ``key`` is one of
    :data:`AGENT_ORACLES` (PROTOCOL 6).
    """
    for event in events:
        if not isinstance(event, Mapping):
            continue
        key = event.get("key")
        if (
            event.get("kind") == "effect"
            and event.get("resource") == ORACLE_MARKER_RESOURCE
            and isinstance(key, str)
            and key in AGENT_ORACLES
        ):
            return key
    return None
