"""What a replay did with its capsule: the request window, ambient calls, fresh values, counts.

One :class:`ReplayUsage` belongs to each :class:`~reproit_otel.wire.replay.ReplaySession`
(``session.usage``). It knows

* whether the recorded request has begun in the replaying process. A session that *awaits*
  the request (:meth:`await_request`, set by the process-level replay installation when it
  can see inbound requests) answers every call made before :meth:`begin_request` without
  consuming the recording: boot-time migration checks, warm-up queries, dialect set-up and
  health checks are *before-request* calls, counted and listed (at most
  :data:`LISTED_CALLS` of them). Sessions made directly (tests, the wire vectors) start
  strict, as if the request had begun;
* how many calls the connection-scope rule answered (``ambient``);
* the state of the fresh-value rules (:mod:`reproit_otel.wire.fresh`): UUIDs of the input and
  of each recorded response (less those the application had sent first), the recorded→live
  UUID pairs, and both runs' request starts;
* which data exchanges were consumed, in the order live calls consumed them
  (:meth:`note_consumed`);
* :meth:`report`: the counts ``reproit-otel check`` reads (``dataExchanges``, ``consumed``,
  ``unused``, ``ambientExchanges``, ``ambient``, ``beforeRequest``, ``beforeRequestCalls``),
  ``consumedOrder`` (the recorded positions of the consumed data exchanges, counted among the
  data exchanges from 0, in the order they were consumed: a replay that reached the recorded
  failure point by the recorded path reads ``[0, 1, 2, ...]``) and ``unusedCalls`` (the
  recorded data exchanges no live call consumed, described like ``beforeRequestCalls``, at
  most :data:`LISTED_CALLS`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from reproit_otel.wire._js import is_js_integer
from reproit_otel.wire.fresh import CLOCK_SLACK_MS, FreshMatch, uuids_in

__all__ = ["LISTED_CALLS", "ReplayUsage", "describe_call"]

LISTED_CALLS: Final = 32
"""How many before-request or unused calls :meth:`ReplayUsage.report` lists (all are counted)."""
_CALL_TEXT: Final = 240
"""Characters of a statement text or URL kept when a call is described."""


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _CALL_TEXT:
        return value[:_CALL_TEXT] + "..."
    return value


def describe_call(protocol: Any, request: Any) -> dict[str, Any]:
    """A recorded or live call in a few fields: ``{"protocol", "method", "url"}`` for HTTP,
    ``{"protocol", "text"}`` for SQL, ``{"protocol", "tool"|"op"|...}`` for the rest."""
    described: dict[str, Any] = {"protocol": protocol if isinstance(protocol, str) else None}
    fields = request if isinstance(request, Mapping) else {}
    for name in ("method", "url", "text", "tool", "op", "address", "port"):
        value = fields.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            described[name] = _cut(value)
    return described


class _Entry(Protocol):
    consumed: bool
    scope: str | None
    exchange: Any
    at: Any


def _start_event(capsule: Mapping[str, Any]) -> Mapping[str, Any]:
    events = capsule.get("events")
    for event in events if isinstance(events, list) else []:
        if isinstance(event, Mapping) and event.get("kind") == "start":
            return event
    return {}


class ReplayUsage:
    """The per-session replay state and counts (see the module docstring)."""

    def __init__(
        self,
        capsule: Mapping[str, Any],
        entries: Sequence[_Entry],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._entries = entries
        self._clock = clock
        start = _start_event(capsule)
        envelope = capsule.get("envelope")
        observed = envelope.get("observedAtMs") if isinstance(envelope, Mapping) else None
        at = start.get("at")
        start_at: Any = at if is_js_integer(at) else observed if is_js_integer(observed) else None
        self.recorded_start_ms: float | None = None if start_at is None else float(start_at)
        # Computed once here, not under the session's lock at match time.
        self._known = self._known_sets(uuids_in(start.get("input")))
        self.bindings: dict[str, str] = {}
        self.reverse: dict[str, str] = {}
        self.awaiting = False
        self.live_start_ms: float | None = None
        self.ambient_calls = 0
        self.before_request = 0
        self.before_request_calls: list[dict[str, Any]] = []
        # Recorded position (among data exchanges) of each entry, and the consumption order,
        # allocated here so that noting a consumption under the session's lock allocates
        # nothing.
        self._data_position = {
            entry_index: position
            for position, entry_index in enumerate(
                index for index, entry in enumerate(entries) if entry.scope is None
            )
        }
        self._consumed_order: list[int] = [-1] * len(entries)
        self._consumed_count = 0

    # -- the request window

    def await_request(self) -> None:
        """Answer calls as before-request calls until :meth:`begin_request`."""
        self.awaiting = True

    def begin_request(self) -> bool:
        """The recorded request has begun: strict matching from now on. True the first time."""
        if not self.awaiting:
            if self.live_start_ms is None:
                self.live_start_ms = self._clock() * 1000.0
            return False
        self.awaiting = False
        self.live_start_ms = self._clock() * 1000.0
        return True

    def note_before_request(self, call: dict[str, Any]) -> None:
        """Count a call answered before the recorded request (listed while room is left)."""
        self.before_request += 1
        if len(self.before_request_calls) < LISTED_CALLS:
            self.before_request_calls.append(call)

    # -- consumption

    def note_consumed(self, position: int, index: int) -> None:
        """Data exchange ``index`` (among all entries) was the ``position``-th consumed.

        Called under the session's lock: it stores into a list made at load, nothing else.
        """
        if 0 <= position < len(self._consumed_order):
            self._consumed_order[position] = index
            if position >= self._consumed_count:
                self._consumed_count = position + 1

    def consumed_order(self) -> list[int]:
        """The recorded positions (among data exchanges) of the consumed ones, in order."""
        order = self._consumed_order[: self._consumed_count]
        return [self._data_position.get(index, -1) for index in order if index >= 0]

    def unused_calls(self) -> list[dict[str, Any]]:
        """The data exchanges no live call consumed (at most :data:`LISTED_CALLS`), each
        described by :func:`describe_call` plus its recorded ``position``."""
        listed: list[dict[str, Any]] = []
        for index, entry in enumerate(self._entries):
            if entry.scope is not None or entry.consumed:
                continue
            if len(listed) >= LISTED_CALLS:
                break
            exchange = entry.exchange if isinstance(entry.exchange, Mapping) else {}
            described = describe_call(exchange.get("protocol"), exchange.get("request"))
            described["position"] = self._data_position.get(index, -1)
            listed.append(described)
        return listed

    # -- fresh values

    def _known_sets(self, seen: set[str]) -> list[frozenset[str]]:
        """Per entry: the UUIDs of the input and of every response recorded before it.

        A UUID the application had sent in a request before a response carried it is its own
        value echoed back (a created row returned, a resource's location), not one it was
        given: it stays out.
        """
        known = []
        sent: set[str] = set()
        for entry in self._entries:
            known.append(frozenset(seen))
            exchange = entry.exchange
            if isinstance(exchange, Mapping):
                sent |= uuids_in(exchange.get("request"))
                seen |= uuids_in(exchange.get("response")) - sent
        return known

    def known_uuids(self, index: int) -> frozenset[str]:
        """The UUIDs of the input and of the responses recorded before entry ``index``."""
        return self._known[index] if index < len(self._known) else frozenset()

    def fresh_match(self, index: int) -> FreshMatch:
        """The fresh-value comparison for a live call against recorded entry ``index``."""
        now_ms = self._clock() * 1000.0
        if self.live_start_ms is None:
            self.live_start_ms = now_ms
        recorded_start = self.recorded_start_ms
        entry_at: Any = self._entries[index].at if index < len(self._entries) else None
        into_recorded = (
            max(0.0, float(entry_at) - recorded_start)
            if recorded_start is not None and is_js_integer(entry_at)
            else 0.0
        )
        shift = 0.0 if recorded_start is None else self.live_start_ms - recorded_start
        tolerance = into_recorded + max(0.0, now_ms - self.live_start_ms) + CLOCK_SLACK_MS
        return FreshMatch(
            self.known_uuids(index),
            self.bindings,
            self.reverse,
            shift,
            tolerance,
        )

    # -- counts

    def report(self) -> dict[str, Any]:
        """The counts of this replay so far (keys in the order the report line prints them)."""
        data = [entry for entry in self._entries if entry.scope is None]
        consumed = sum(1 for entry in data if entry.consumed)
        return {
            "dataExchanges": len(data),
            "consumed": consumed,
            "unused": len(data) - consumed,
            "ambientExchanges": len(self._entries) - len(data),
            "ambient": self.ambient_calls,
            "beforeRequest": self.before_request,
            "beforeRequestCalls": list(self.before_request_calls),
            "consumedOrder": self.consumed_order(),
            "unusedCalls": self.unused_calls(),
        }
