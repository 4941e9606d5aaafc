"""The connection-scope side of a replay session: ambient answers and the request window.

:class:`ConnectionScope` is a part of :class:`~reproit_otel.wire.replay.ReplaySession`: the
answers to connection-scope statements (:mod:`reproit_otel.wire.statements`), which are
never consumed, the parameters a recorded connection carried (``setup``), and the calls made
before the recorded request, which read the recording without consuming it
(:mod:`reproit_otel.wire.replay_usage`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from reproit_otel.wire.fresh import url_shape
from reproit_otel.wire.matching import operation_key, request_matches
from reproit_otel.wire.replay_usage import ReplayUsage
from reproit_otel.wire.statements import ambient_key, recorded_parameter

__all__ = ["ConnectionScope", "setup_items"]


def setup_items(exchange: Any) -> list[Any]:
    """The ``setup`` answers a recorded ``pg`` exchange carries (``_pg_setup``)."""
    setup = exchange.get("setup") if isinstance(exchange, Mapping) else None
    return [item for item in setup if isinstance(item, Mapping)] if isinstance(setup, list) else []


class ConnectionScope:
    """Ambient answers, carried parameters and the before-request reads of a session.

    The session sets ``_ambient`` (recorded connection-scope exchanges, then the carried
    ``setup`` ones), ``_setup``, ``_entries``, ``_open`` (unconsumed data exchanges by
    protocol and key), ``_shaped`` (those waiting under their key's shape), ``_lock`` and
    ``usage``. It also finds a call's candidate (:meth:`_slots`, :meth:`_waiting`).
    """

    _ambient: list[Any]
    _setup: list[Any]
    _entries: list[Any]
    _open: dict[tuple[str, str], deque[Any]]
    _shaped: dict[tuple[str, str], deque[Any]]
    _lock: threading.Lock
    usage: ReplayUsage

    def _slots(
        self, protocol: str, probe: dict[str, Any]
    ) -> tuple[tuple[str, str], tuple[str, str] | None]:
        """Where a call's candidate waits: its exact key, and its key's shape when it has one."""
        key = operation_key(protocol, probe)
        shape = url_shape(key) if protocol == "http" and self._shaped else None
        return (protocol, key), (None if shape is None else (protocol, shape))

    def _waiting(self, slot: tuple[str, str], shaped: tuple[str, str] | None) -> deque[Any] | None:
        """The queue holding a call's candidate: its key's, else its shape's (call locked;
        allocates nothing)."""
        waiting = self._open.get(slot)
        if not waiting and shaped is not None:
            waiting = self._shaped.get(shaped)
        return waiting

    def ambient(self, probe: Mapping[str, Any]) -> Any:
        """The recorded exchange answering a connection-scope ``pg`` statement, or ``None``.

        Never consumed: the first recorded statement with the same :func:`ambient_key
        <reproit_otel.wire.statements.ambient_key>` whose values match, else the first with
        that key whatever its values (recorded exchanges first, then the answers carried
        as ``setup``). Counted in :attr:`usage` as an ambient call.
        """
        with self._lock:
            self.usage.ambient_calls += 1
        text = probe.get("text")
        if not isinstance(text, str):
            return None
        key = ambient_key(text)
        found: Any = None
        for entry in self._ambient:  # never consumed, never changed: no lock needed
            request = entry.request
            recorded = request.get("text") if isinstance(request, Mapping) else None
            if not isinstance(recorded, str) or ambient_key(recorded) != key:
                continue
            if request_matches("pg", {**request, "text": text}, probe):
                return entry.exchange
            if found is None:
                found = entry.exchange
        return found

    def recorded_parameters(self) -> dict[str, str]:
        """Server parameters a recorded connection had before the operation used it.

        Read from the ``SHOW``/``SET``/``set_config`` answers it carried as ``setup``; the
        operation's own ``SET`` statements are not included (replay runs them again).
        """
        found: dict[str, str] = {}
        for entry in self._setup:
            request = entry.request
            exchange = entry.exchange
            if entry.scope != "setting" or not isinstance(request, Mapping):
                continue
            response = exchange.get("response") if isinstance(exchange, Mapping) else None
            told = recorded_parameter(request.get("text"), request.get("values"), response)
            if told is not None:
                found[told[0]] = told[1]
        return found

    def note_before_request(self, call: dict[str, Any]) -> None:
        """Count a call answered before the recorded request began (see :attr:`usage`)."""
        with self._lock:
            self.usage.note_before_request(call)

    def begin_request(self) -> bool:
        """The recorded request has begun: strict matching from now on (True the first time)."""
        with self._lock:
            return self.usage.begin_request()

    def peek(self, protocol: str, probe: dict[str, Any]) -> Any:
        """The exchange a call made before the recorded request may be answered with.

        The first unconsumed data exchange with the call's key, when it matches; it stays
        unconsumed (the request still needs it). ``None`` when there is none.
        """
        entry = self.peek_entry(protocol, probe)
        return None if entry is None else entry.exchange

    def peek_entry(self, protocol: str, probe: dict[str, Any]) -> Any:
        """Like :meth:`peek`, returning the entry (with its prepared answer)."""
        slot, shaped = self._slots(protocol, probe)
        with self._lock:
            waiting = self._waiting(slot, shaped)
            entry = waiting[0] if waiting else None
        if entry is None:
            return None
        # The fresh-value pairs this comparison makes are not kept: nothing is consumed.
        fresh = self.usage.fresh_match(entry.index)
        return entry if request_matches(protocol, entry.request, probe, fresh) else None
