"""A trace's event list: stamping, deferred events and their materialisation, and its lock.

:class:`EventLog` is the part of :class:`~reproit_otel.wire.trace.BackendTrace` that holds
events. A push stamps an entry (its place, ``sequence`` and, for capture and CI traces, ``at``
and ``monoNs``) and appends it; a deferred push stamps the same way and leaves the fields to a
builder called the first time anything reads the events (see "Deferred events" in
:mod:`reproit_otel.wire.trace`). What the fields are is decided by the caller: this module
knows nothing of effect kinds, oracles or headers.

Sequence numbers come from one process-wide counter shared by every trace (thread-safe);
:func:`reset_sequence` restarts it for tests. A trace itself is meant for one request, but its
pushes are serialized so a recorder finishing an exchange on another thread is safe.

Locks. A trace has one plain lock, held only by the methods of this module: every push and
every read of its event list takes it. Under it a push stamps the entry (sequence, clocks) and
appends it; a read copies the list. Nothing under it redacts, encodes or logs: fields are
built before a push takes it, and deferred events are built with no lock held and published
under it afterwards (an entry published meanwhile by another reader is left as that reader
built it, so two threads reading at the same moment may both build it, and one result is
kept). The one build under it is that of the common fields, when a ``return`` pushed before
they existed is joined on first read: the ``common_factory`` given to :class:`EventLog`
(the trace's own, :func:`reproit_otel.wire.trace_context._common_fields`: trimming, a
SHA-256, a small dict; no lock, no I/O, no logging). No other code outside this module runs
under it, so no finalizer, logging handler or nested instrumentation can run our hooks on a
thread that holds it except through a collection landing on one of those few small
allocations, and reproit-otel's own finalizers never push (they hand over, see
``reproit_otel/capture/recording.py``). The clocks read under it are ``time.time_ns`` and
``time.monotonic_ns`` (pinned by a replay's envelope, they still take no lock of ours) or the
``wall_ms``/``mono_ns`` callables given to
:meth:`~reproit_otel.wire.trace.BackendTrace.begin`, which must not touch the trace.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from reproit_otel.errors import TraceError
from reproit_otel.redaction.core import redact
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.trace_events import MAX_EVENTS, TraceEvent

__all__ = ["EventLog", "Stamp", "reset_sequence", "stamp_now"]

Stamp = tuple[int, int, int]
"""An event's ``sequence``, ``at`` and ``monoNs`` (relative to the trace's origin), taken
when it happened. The capture pipeline stamps a request's events as they happen and opens the
trace itself only if the operation is wanted (``capture/operation.py``, "Lazy traces"); the
trace then takes each event with the stamp it got, so its bytes are those of a trace opened
at the start."""


# --- the process-wide sequence counter -------------------------------------------------------

# ``next()`` on an ``itertools.count`` is one C call that the GIL keeps atomic: no lock needed.
_sequence = itertools.count(1)


def stamp_now(origin_ns: int) -> Stamp:
    """A :data:`Stamp` taken now with the real clocks (as a capture trace stamps), for a
    trace whose monotonic origin is ``origin_ns``."""
    return (next(_sequence), time.time_ns() // 1_000_000, time.monotonic_ns() - origin_ns)


def reset_sequence(start: int = 1) -> None:
    """Restart the process-wide event sequence counter at ``start`` (a test hook)."""
    global _sequence
    _sequence = itertools.count(start)


class _Deferred:
    """A pushed event whose fields are built later (see "Deferred events" in ``trace.py``)."""

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
    :meth:`EventLog._join_return_locked`); it counts as settled, never as deferred.
    """

    __slots__ = ("fields",)

    def __init__(
        self, fields: dict[str, Any], sequence: int, at: int | None, mono_ns: int | None
    ) -> None:
        super().__init__("return", _no_fields, sequence, at, mono_ns)
        self.fields = fields


def _no_fields() -> None:
    return None


class EventLog:
    """The stamped events of one trace and the lock that guards them (see "Locks" above)."""

    def __init__(
        self,
        common: Mapping[str, Any] | None,
        *,
        capture_envelope: bool,
        wall_ms: Callable[[], int] | None,
        mono_ns: Callable[[], int] | None,
        common_factory: Callable[[], dict[str, Any]] | None,
        max_events: int,
        origin_ns: int | None = None,
    ) -> None:
        self._max_events = max(MAX_EVENTS, max_events)
        self._common: dict[str, Any] | None = None if common is None else dict(common)
        self._common_factory = common_factory
        self._events: list[TraceEvent | _Deferred] = []
        self._deferred = 0
        self._pending_output: tuple[TraceEvent | None, Callable[[], Any]] | None = None
        self._unjoined: _Unjoined | None = None
        self._lock = threading.Lock()
        self._capture_envelope = capture_envelope
        # None: the real clocks, read inline (looked up at call time, so a pinned clock is seen).
        self._wall_ms = wall_ms
        self._mono_ns = mono_ns
        self._origin_ns = 0
        if origin_ns is not None:
            self._origin_ns = origin_ns  # a trace opened late (see Stamp)
        elif capture_envelope:
            self._origin_ns = time.monotonic_ns() if mono_ns is None else mono_ns()
        self._returned: TraceEvent | None = None

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
    def max_events(self) -> int:
        """The most events this trace holds (256, or a heavy capture's cap)."""
        return self._max_events

    def room_for_effect(self) -> bool:
        """Whether an effect pushed now still leaves room for the ``return`` event."""
        return len(self._events) < self._max_events - 1

    # -- pushing ----------------------------------------------------------------------------

    def _push(self, kind: str, fields: Mapping[str, Any], stamp: Stamp | None = None) -> TraceEvent:
        common = self._common_now()  # built, if deferred, before the lock
        with self._lock:
            if len(self._events) >= self._max_events:
                raise TraceError("TooManyEvents")
            event: TraceEvent = dict(common)
            if stamp is not None:  # taken when it happened, before the trace was opened
                event["sequence"] = stamp[0]
                event["kind"] = kind
                event.update(fields)
                if self._capture_envelope:
                    event["at"] = stamp[1]
                    event["monoNs"] = stamp[2]
                self._events.append(event)
                return event
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

    def _defer(
        self,
        kind: str,
        build: Callable[[], Mapping[str, Any] | None],
        stamp: Stamp | None = None,
    ) -> None:
        """Push ``kind`` now (place, sequence, stamps: ``stamp`` when given); its fields come
        from ``build()`` later."""
        with self._lock:
            self._stamp_locked(kind, build, stamp=stamp)
            self._deferred += 1

    def _push_unjoined_return(self, fields: dict[str, Any], stamp: Stamp | None = None) -> None:
        """Stamp a ``return`` with ``fields`` whose common fields are not built yet; it is
        joined to them when the events are first read."""
        with self._lock:
            entry = self._stamp_locked("return", fields=fields, stamp=stamp)
            assert isinstance(entry, _Unjoined)
            self._unjoined = entry

    def _defer_output(self, event: TraceEvent | None, factory: Callable[[], Any]) -> None:
        """Leave the ``output`` of the ``return`` event (``None``: the unjoined one) to
        ``factory()``, built and redacted when the events are first read."""
        with self._lock:
            self._pending_output = (event, factory)
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
        stamp: Stamp | None = None,
    ) -> _Deferred:
        """Append an entry stamped now (place, sequence, ``at``, ``monoNs``; or as ``stamp``
        says): a deferred event built by ``build()`` later, or (with ``fields``) a ``return``
        joined when it is read."""
        if len(self._events) >= self._max_events:
            raise TraceError("TooManyEvents")
        at: int | None = None
        mono: int | None = None
        if stamp is not None:
            sequence = stamp[0]
            if self._capture_envelope:
                at, mono = stamp[1], stamp[2]
        else:
            sequence = next(_sequence)
        if stamp is None and self._capture_envelope:
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
