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

Long names (decision D7): a default span id that would pass 128 code points is shortened with
a SHA-256 identity instead of leaving the request untraced; the rule and the names of the
trace context live in :mod:`reproit_otel.wire.trace_context`.

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

Where the parts live. This module is the trace's API: :class:`BackendTrace`'s ``begin``,
effects, oracle markers, ``finish`` and ``header``. The trace context, the request headers and
the span-id rules are in :mod:`reproit_otel.wire.trace_context`; what an ``effect`` event holds
and the oracle names in :mod:`reproit_otel.wire.trace_events`; the event list, the deferred
events' materialisation and the trace's lock in
:mod:`reproit_otel.wire.trace_log`, whose docstring holds the lock audit (this module takes no
lock of its own, and every lock a trace takes is taken there), along with the process-wide
sequence counter that :func:`reset_sequence` restarts. Callers keep importing from this
module: ``__all__`` lists every public name of the four.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable, Mapping
from typing import Any, Final

from reproit_otel.errors import TraceError
from reproit_otel.redaction.core import redact
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.canonical import canonical_json_bytes
from reproit_otel.wire.trace_context import (
    ACTION_HEADER,
    ACTOR_HEADER,
    BUILD_HEADER,
    CONFIG_CONTRACT_HEADER,
    EVENTS_HEADER,
    MAX_ACTION_INDEX,
    MAX_ACTOR,
    MAX_BUILD,
    MAX_CONFIG_CONTRACT,
    MAX_OPERATION,
    MAX_SPAN_ID,
    MAX_TENANT,
    MAX_TRACE_ID,
    TRACE_HEADER,
    CaptureContext,
    TraceContext,
    _common_fields,
    bounded_operation,
    identity,
    trace_context_from_headers,
)
from reproit_otel.wire.trace_events import (
    _BOUNDARY_EFFECTS,
    AGENT_ORACLES,
    EFFECT_KINDS,
    MAX_EFFECT_FIELD,
    MAX_EVENTS,
    ORACLE_MARKER_RESOURCE,
    SERVER_ERROR_ORACLE,
    DeferredEffect,
    TraceEvent,
    _absent,
    _effect_fields,
    marked_oracle,
)
from reproit_otel.wire.trace_log import EventLog, Stamp, reset_sequence, stamp_now

# The names that moved to trace_context, trace_events and trace_log are listed too, so
# they stay importable from here.
__all__ = [
    "ACTION_HEADER",
    "ACTOR_HEADER",
    "AGENT_ORACLES",
    "BUILD_HEADER",
    "CONFIG_CONTRACT_HEADER",
    "EFFECT_KINDS",
    "EVENTS_HEADER",
    "MAX_ACTION_INDEX",
    "MAX_ACTOR",
    "MAX_BUILD",
    "MAX_CONFIG_CONTRACT",
    "MAX_EFFECT_FIELD",
    "MAX_EVENTS",
    "MAX_HEADER_LENGTH",
    "MAX_OPERATION",
    "MAX_SPAN_ID",
    "MAX_TENANT",
    "MAX_TRACE_ID",
    "ORACLE_MARKER_RESOURCE",
    "SERVER_ERROR_ORACLE",
    "TRACE_HEADER",
    "BackendTrace",
    "CaptureContext",
    "DeferredEffect",
    "Stamp",
    "TraceContext",
    "TraceEvent",
    "bounded_operation",
    "identity",
    "marked_oracle",
    "reset_sequence",
    "stamp_now",
    "trace_context_from_headers",
]

MAX_HEADER_LENGTH: Final = 60000
"""Longest ``x-reproit-events`` value, in base64url characters."""


class BackendTrace(EventLog):
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
        origin_ns: int | None = None,
    ) -> None:
        """``common`` are the fields every event carries; ``None`` with ``common_factory``
        (internal) builds them when an event first needs them. ``origin_ns`` (internal) is the
        monotonic origin of ``monoNs`` when the trace is opened after its first event."""
        super().__init__(
            common,
            capture_envelope=capture_envelope,
            wall_ms=wall_ms,
            mono_ns=mono_ns,
            common_factory=common_factory,
            max_events=max_events,
            origin_ns=origin_ns,
        )
        self._return_status: Any = UNSET
        self._finished = False
        self._marker_pushed = False
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
        name = bounded_operation(operation)
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

    @classmethod
    def reopened(
        cls,
        context: CaptureContext,
        name: str,
        *,
        input_factory: Callable[[], Any],
        max_events: int,
        origin_ns: int,
        start: Stamp,
    ) -> BackendTrace:
        """The trace :meth:`begin` would have opened for a capture at ``start`` (internal).

        The capture pipeline stamps a request's events as they happen and opens its trace
        only when the operation is wanted (``capture/operation.py``, "Lazy traces"): ``name``
        is already bounded, ``origin_ns`` is the monotonic clock when the request began and
        ``start`` the ``start`` event's stamp. Later events are added with the stamps they got
        (``defer_effect(..., stamp=)``, ``finish(..., stamp=)``), so every byte is what a trace
        opened at the start records.
        """
        trace = cls(
            None,
            capture_envelope=True,
            common_factory=functools.partial(_common_fields, context, name),
            max_events=max_events,
            origin_ns=origin_ns,
        )
        factory = input_factory
        trace._defer("start", lambda: {"input": redact(factory())}, stamp=start)
        return trace

    # -- reading (the event list itself is read through EventLog) ----------------------------

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

    def defer_effect(self, kind: str, build: DeferredEffect, stamp: Stamp | None = None) -> None:
        """Push a ``call``/``read``/``write``/``delete`` effect whose fields are built later.

        Internal (the capture pipeline's recorders). Takes the event's place, ``sequence``,
        ``at`` and ``monoNs`` now; ``build()`` gives ``(resource, key, exchange)`` when the
        events are first read, and the fields are then exactly those :meth:`effect` would have
        recorded. A ``build`` returning ``None`` leaves the event out. ``stamp`` (a trace
        opened late, see :meth:`reopened`) is the stamp the event got when it happened. Raises
        like :meth:`effect` (``AlreadyFinished``, ``InvalidOperation``, ``TooManyEvents``).
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

        self._defer("effect", fields, stamp)

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
        stamp: Stamp | None = None,
    ) -> None:
        """Push the ``return`` event and mark the trace finished (PROTOCOL 2.4).

        ``output`` is redacted (``null`` when absent); ``status`` is recorded as given and
        left out when absent; ``success`` and ``effects_complete`` are ``true`` only for
        ``True``. ``stamp`` (internal, see :meth:`reopened`) is the stamp the event got when
        the operation finished. Raises ``TraceError`` ``AlreadyFinished`` or ``TooManyEvents``
        (the trace then stays unfinished).
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
            self._push_unjoined_return(fields, stamp)
        else:
            event = self._push("return", fields, stamp)
            self._returned = event
        self._return_status = status
        if output_factory is not None:
            self._defer_output(event, output_factory)
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
