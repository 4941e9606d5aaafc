"""Hermetic replay: serve dependency calls from a capsule instead of the network (PROTOCOL 7).

A capsule (``reproit-backend-capture``, version 1 or 2) holds the exchanges an operation made:
each ``effect`` event with an ``exchange`` is one recorded HTTP or ``pg`` call. A
:class:`ReplaySession` loads them in file order and answers live calls from them::

    session = ReplaySession.load("capsule.json", on_divergence=report)
    served = serve_http(session, {"method": "GET", "url": "http://svc/prices"})
    rows = serve_pg(session, "SELECT 1", [1])

Matching is strict, never fuzzy. A call's *operation key* is ``METHOD path+query`` for HTTP
and the statement text for ``pg``; within one key the recorded order is enforced (the first
unconsumed exchange with that key is the only candidate), while calls of different keys and
protocols may interleave freely. An HTTP call whose recorded URL holds a UUID the recorded
run generated waits under the URL's shape instead (every UUID replaced by one token), where
the live run's own fresh UUID finds it (:mod:`reproit_otel.wire.fresh`). A call with no
candidate, or whose candidate does not match (method, path+query and body for HTTP; text and
values for ``pg``, with ``$reproit`` placeholders as wildcards, see
:mod:`reproit_otel.wire.matching`), is a *divergence*: the session is marked diverged, a
``REPROIT:DIVERGENCE {json}`` line is produced, and the call fails (HTTP status 599, or
:class:`~reproit_otel.errors.DivergedError` for ``pg``). A recorded response whose body or
stream boundaries were truncated at capture fails closed the same way
(:mod:`reproit_otel.wire.replay_answer` prepares what a call is served).

This module writes nothing anywhere. Divergence lines are kept in
:attr:`ReplaySession.divergence_lines` and handed to the optional ``on_divergence`` callback;
the caller writes them to the process's real stderr. :meth:`ReplaySession.load` reading the
capsule file is the one piece of I/O in the wire layer.

Redaction (decision D8): a capture may have had secret URL query values and configured secret
strings replaced by placeholders. Give the session a ``live_redactor`` that applies the same
redaction to each live probe (:func:`live_redactor` builds one from the secret values);
probes are redacted before matching and before they appear in a divergence line.

Locks. A session has one plain lock, held only to read the front candidate of a key, to
consume it (after checking it is still the front one) and to mark the session diverged:
nothing under it allocates, logs or calls code outside this module. The probe is compared
with the candidate between the two (a candidate consumed meanwhile by another call is looked
up again), and the divergence report, its JSON line, the served body and the
``on_divergence`` callback are built and called after it is released (appending the line to
:attr:`ReplaySession.divergence_lines` is one atomic ``list.append``). So a collection, and a
finalizer making a replayed call, can never run while it is held.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, TypedDict

from reproit_otel.errors import CapsuleError, DivergedError, RecordedPgError
from reproit_otel.redaction.core import redact, redact_url, scrub_value
from reproit_otel.wire._js import UNSET, is_js_integer, js_string
from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.connection_setup import setup_problem
from reproit_otel.wire.fresh import generated_uuid_in, url_shape
from reproit_otel.wire.matching import (
    body_delta,
    js_stringify,
    js_truthy,
    operation_key,
    request_matches,
    strict_equal,
)
from reproit_otel.wire.replay_answer import (
    DIVERGENCE_STATUS,
    ServedResponse,
    diverged_response,
    prepare_answer,
    split_chunk_bytes,
    split_chunks,
)
from reproit_otel.wire.replay_scope import ConnectionScope, setup_items
from reproit_otel.wire.replay_usage import ReplayUsage
from reproit_otel.wire.standins import StandinIndex, served_response
from reproit_otel.wire.statements import connection_scope_of

__all__ = [
    "CAPTURE_FORMAT",
    "DIVERGENCE_MARKER",
    "DIVERGENCE_STATUS",
    "PG_DIVERGED_MESSAGE",
    "DivergenceCallback",
    "LiveRedactor",
    "PgResult",
    "ReplaySession",
    "ServedResponse",
    "divergence_line",
    "divergence_report",
    "live_redactor",
    "pg_probe",
    "serve_http",
    "serve_pg",
    "split_chunk_bytes",
    "split_chunks",
]

CAPTURE_FORMAT: Final = "reproit-backend-capture"
"""The ``format`` a capsule must declare."""

DIVERGENCE_MARKER: Final = "REPROIT:DIVERGENCE "
"""The prefix that starts every divergence line (note the trailing space)."""


PG_DIVERGED_MESSAGE: Final = "reproit: pg call diverged from the capture"
"""The message of the :class:`~reproit_otel.errors.DivergedError` a diverged ``pg`` call raises."""
_RECORDED_PG_ERROR: Final = "recorded pg error"

LiveRedactor = Callable[[str, dict[str, Any]], dict[str, Any]]
"""``(protocol, probe) -> probe``: redacts a live probe the way the capture was redacted."""

DivergenceCallback = Callable[[str], None]
"""Receives each divergence line (without a trailing newline) as it is produced."""


def live_redactor(secrets: Iterable[str] | Callable[[], Iterable[str]] = ()) -> LiveRedactor:
    """A :data:`LiveRedactor` applying to live probes what capture applied to exchanges (D8).

    HTTP probes: secret query parameter values in ``url`` become ``$reproit`` and the body
    goes through key-name redaction; ``pg`` probes: named parameters (``values`` as an
    object) go through key-name redaction, as the recorded request did. Every string of the
    probe (``url``, ``body``, and for ``pg`` the statement ``text`` and ``values``) then has
    the configured secret values replaced. Other protocols (``invoke``) get only the value
    replacement: their probe is built redacted by the caller. ``secrets`` is the list of
    secret values, or a callable returning the current list (read at each call, so secrets
    registered later still apply).
    """

    def redact_probe(protocol: str, probe: dict[str, Any]) -> dict[str, Any]:
        values = list(secrets() if callable(secrets) else secrets)
        redacted = dict(probe)
        if protocol == "http":
            url = redacted.get("url", UNSET)
            if isinstance(url, str):
                redacted["url"] = redact_url(url)
            if "body" in redacted:
                redacted["body"] = redact(redacted["body"])
        elif protocol == "pg" and "values" in redacted:
            redacted["values"] = redact(redacted["values"])
        result = scrub_value(redacted, values)
        return result if isinstance(result, dict) else redacted

    return redact_probe


class PgResult(TypedDict):
    """A recorded ``pg`` result as replay serves it."""

    command: Any
    rowCount: Any
    rows: list[Any]


class _Entry:
    """One recorded exchange, whether a live call has consumed it, its prepared answer, and
    its connection scope (``None`` for a data exchange: only an exchange capture marked, or
    one ``carried`` as a connection's ``setup``, has one; see
    :func:`~reproit_otel.wire.statements.connection_scope_of`).
    """

    __slots__ = (
        "answer",
        "at",
        "consumed",
        "exchange",
        "index",
        "key",
        "protocol",
        "scope",
        "shape",
    )

    def __init__(
        self, exchange: Any, at: Any = None, index: int = 0, *, carried: bool = False
    ) -> None:
        self.exchange = _served(exchange)
        self.consumed = False
        self.index = index
        fields = self.exchange if isinstance(self.exchange, Mapping) else {}
        self.protocol: Any = fields.get("protocol", UNSET)
        request = fields.get("request", UNSET)
        self.key = operation_key(self.protocol, request)
        self.scope = connection_scope_of(exchange, carried=carried)
        # The key's shape when the recorded run generated a UUID in it (set by the session).
        self.shape: str | None = None
        self.at = at if is_js_integer(at) else None
        # Everything a served HTTP call needs is computed here, once per capsule load, so a
        # call costs the match and nothing else.
        self.answer: ServedResponse | str | None = (
            prepare_answer(fields) if strict_equal(self.protocol, "http") else None
        )

    @property
    def request(self) -> Any:
        if isinstance(self.exchange, Mapping):
            return self.exchange.get("request", UNSET)
        return UNSET


def _served(exchange: Any) -> Any:
    """``exchange`` with its response as replay serves it
    (:func:`~reproit_otel.wire.standins.served_response`).

    Done once per exchange when the capsule is loaded, so every protocol (HTTP bodies and
    headers, database rows, invoke and credential outcomes) hands the application stand-ins,
    never placeholders. The request is kept as recorded: live calls are matched against it.
    """
    if not isinstance(exchange, Mapping) or not isinstance(exchange.get("response"), Mapping):
        return exchange
    response = exchange["response"]
    served = served_response(response)
    # Nothing redacted in it (the common case): the recorded exchange itself is served.
    return exchange if served == response else {**exchange, "response": served}


def _check_capsule(capsule: Any) -> None:
    """PROTOCOL 7.1: the format must be exact and the version 1 or 2; and every connection
    ``setup`` answer servable (:func:`~reproit_otel.wire.connection_setup.setup_problem`)."""
    fields: Mapping[str, Any] = capsule if isinstance(capsule, Mapping) else {}
    if fields.get("format", UNSET) != CAPTURE_FORMAT:
        raise CapsuleError("REPROIT_REPLAY file is not a reproit-backend-capture payload")
    version = fields.get("version", UNSET)
    # The CLI reads the version as an unsigned integer in 1..=2; 2.0 and 2 are one JSON number.
    if not (is_js_integer(version) and 1 <= version <= 2):
        raise CapsuleError(f"unsupported capture version {js_string(version)}")
    events = fields.get("events", UNSET)
    if events is not UNSET and events is not None and not isinstance(events, list):
        raise CapsuleError("capsule events must be an array of trace events")
    # Connection setup answers feed every stub connection: a capsule whose answers replay
    # would misread is refused whole, never served in part (wire/connection_setup.py).
    for index, event in enumerate(events if isinstance(events, list) else []):
        exchange = event.get("exchange") if isinstance(event, Mapping) else None
        problem = setup_problem(exchange) if isinstance(exchange, Mapping) else None
        if problem is not None:
            raise CapsuleError(
                f"events[{index}].exchange.{problem[0]} {problem[1]}; "
                "replay cannot serve this connection"
            )


class ReplaySession(ConnectionScope):
    """The exchanges of one capsule and which of them live calls have consumed.

    Create it from a parsed capsule (``ReplaySession(capsule)``) or a file
    (:meth:`load`); both raise :class:`~reproit_otel.errors.CapsuleError` when the capsule's
    ``format`` is not ``reproit-backend-capture``, its ``version`` is not 1 or 2, or a ``pg``
    exchange carries connection ``setup`` answers replay would misread.

    ``live_redactor`` (optional) redacts each live probe before it is matched and reported.
    ``on_divergence`` (optional) receives every divergence line as it happens.

    State: :attr:`diverged`, :attr:`consumed`, :attr:`total`, :attr:`divergence_lines`. The
    session is safe to share between threads.
    """

    def __init__(
        self,
        capsule: Mapping[str, Any],
        *,
        live_redactor: LiveRedactor | None = None,
        on_divergence: DivergenceCallback | None = None,
    ) -> None:
        _check_capsule(capsule)
        self.capsule = capsule
        envelope = capsule.get("envelope", UNSET)
        self.envelope: Any = None if envelope is UNSET else envelope
        events = capsule.get("events", UNSET)
        recorded = [
            event
            for event in (events if isinstance(events, list) else [])
            if isinstance(event, Mapping)
            and event.get("kind", UNSET) == "effect"
            and js_truthy(event.get("exchange", UNSET))
        ]
        self._entries = [
            _Entry(event["exchange"], event.get("at", UNSET), index)
            for index, event in enumerate(recorded)
        ]
        self.usage = ReplayUsage(capsule, self._entries)
        # The unconsumed data exchanges of each (protocol, key), in recorded order: the front
        # one is the only candidate of a call, found without walking the capsule (PROTOCOL
        # 7.2). Exchanges capture marked as connection scope are never candidates: they are
        # answered by :meth:`ambient` and never consumed. Every other exchange is, whatever
        # its statement text. An HTTP exchange whose URL holds a UUID the
        # recorded run generated waits under its key's shape instead (in ``_shaped``): the
        # live run's URL holds another UUID there.
        self._open: dict[tuple[str, str], deque[_Entry]] = {}
        self._shaped: dict[tuple[str, str], deque[_Entry]] = {}
        for entry in self._entries:
            if not isinstance(entry.protocol, str) or entry.scope is not None:
                continue
            shape = url_shape(entry.key) if entry.protocol == "http" else None
            if shape is not None and generated_uuid_in(
                entry.key, self.usage.known_uuids(entry.index)
            ):
                entry.shape = shape
                self._shaped.setdefault((entry.protocol, shape), deque()).append(entry)
            else:
                self._open.setdefault((entry.protocol, entry.key), deque()).append(entry)
        # Connection-scope answers a recorded connection carried from before the operation.
        self._setup = [
            setup
            for entry in self._entries
            for item in setup_items(entry.exchange)
            if (setup := _Entry(item, carried=True)).scope is not None
        ]
        self._ambient = [entry for entry in self._entries if entry.scope is not None]
        self._ambient.extend(self._setup)
        # The stand-ins this replay hands out (the inbound request's, the served values'):
        # a live call carrying one has it written back as its placeholder before matching.
        self.standins = StandinIndex(capsule)
        self._consumed = 0
        self.diverged = False
        self.divergence_lines: list[str] = []
        self.live_redactor = live_redactor
        self.on_divergence = on_divergence
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        live_redactor: LiveRedactor | None = None,
        on_divergence: DivergenceCallback | None = None,
    ) -> ReplaySession:
        """Read and check the capsule file at ``path`` (UTF-8 JSON).

        Raises :class:`~reproit_otel.errors.CapsuleError` when the file cannot be read, is not
        JSON, or is not a version 1 or 2 ``reproit-backend-capture`` payload.
        """
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError as error:
            raise CapsuleError(
                f"cannot read the REPROIT_REPLAY file {path}: {error}; "
                "point REPROIT_REPLAY at a capsule written by reproit"
            ) from error
        return cls.from_text(
            text, live_redactor=live_redactor, on_divergence=on_divergence, source=str(path)
        )

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        live_redactor: LiveRedactor | None = None,
        on_divergence: DivergenceCallback | None = None,
        source: str = "capsule",
    ) -> ReplaySession:
        """Parse capsule JSON text (``JSON.parse`` rules) and check it as :meth:`load` does."""
        try:
            capsule = js_json_parse(text)
        except ValueError as error:
            raise CapsuleError(
                f"the REPROIT_REPLAY file {source} is not JSON ({error}); "
                "expected a reproit-backend-capture payload"
            ) from error
        if not isinstance(capsule, Mapping):
            raise CapsuleError("REPROIT_REPLAY file is not a reproit-backend-capture payload")
        return cls(capsule, live_redactor=live_redactor, on_divergence=on_divergence)

    @property
    def total(self) -> int:
        """The number of recorded exchanges, all protocols together."""
        return len(self._entries)

    @property
    def consumed(self) -> int:
        """The number of recorded exchanges live calls have consumed."""
        return self._consumed

    def redact_probe(self, protocol: str, probe: dict[str, Any]) -> dict[str, Any]:
        """``probe`` with the replay's stand-ins written back as their placeholders
        (:class:`~reproit_otel.wire.standins.StandinIndex`), then after the session's
        ``live_redactor``."""
        if len(self.standins):
            probe = self._written_back(probe)
        if self.live_redactor is None:
            return probe
        return self.live_redactor(protocol, probe)

    def _written_back(self, probe: dict[str, Any]) -> dict[str, Any]:
        # What keys a call (an HTTP URL, a statement text) gets the bare placeholder, the only
        # one a capture writes there; values (body, parameters, input) the tagged one.
        written: dict[str, Any] = {}
        for name, value in probe.items():
            if name in ("url", "text") and isinstance(value, str):
                written[name] = self.standins.placeholder_text(value, tagged=False)
            else:
                written[name] = self.standins.placeholders(value)
        return written

    def match(self, protocol: str, probe: dict[str, Any]) -> Any:
        """Consume and return the recorded exchange for a live call, or ``None`` (diverged).

        ``probe`` is used as given (call :meth:`redact_probe` first). On a divergence the
        session is marked diverged and a divergence line is produced.
        """
        exchange, _ = self.match_with_line(protocol, probe)
        return exchange

    def has_candidate(self, protocol: str, probe: dict[str, Any]) -> bool:
        """Whether an unconsumed data exchange waits under the call's key (or its shape).

        A connection-scope rule may answer a live statement only when this is false: a
        recorded data exchange is always matched (or diverged from) as the reference does.
        """
        slot, shaped = self._slots(protocol, probe)
        with self._lock:
            return bool(self._waiting(slot, shaped))

    def diverge(self, protocol: str, probe: dict[str, Any]) -> str:
        """Mark the session diverged for ``probe`` and return the divergence line."""
        slot, shaped = self._slots(protocol, probe)
        with self._lock:
            expected = self._diverge_locked(protocol, slot[1], shaped)
            consumed = self._consumed
        return self._divergence(protocol, probe, expected, consumed)

    def match_with_line(self, protocol: str, probe: dict[str, Any]) -> tuple[Any, str | None]:
        """Like :meth:`match`, also returning the divergence line when the call diverged."""
        entry, line = self.match_entry(protocol, probe)
        return (None if entry is None else entry.exchange), line

    def match_entry(self, protocol: str, probe: dict[str, Any]) -> tuple[_Entry | None, str | None]:
        """Like :meth:`match_with_line`, returning the consumed entry (with its answer)."""
        slot, shaped = self._slots(protocol, probe)
        while True:
            with self._lock:
                waiting = self._waiting(slot, shaped)
                entry = waiting[0] if waiting else None
            # Compared with no lock held (it allocates, so a collection may run here).
            fresh = None if entry is None else self.usage.fresh_match(entry.index)
            matched = entry is not None and request_matches(protocol, entry.request, probe, fresh)
            with self._lock:
                waiting = self._waiting(slot, shaped)
                if (waiting[0] if waiting else None) is not entry:
                    continue  # another call consumed the candidate meanwhile: look again
                if matched and waiting and entry is not None:
                    if fresh is not None:
                        fresh.commit()
                    waiting.popleft()
                    entry.consumed = True
                    self.usage.note_consumed(self._consumed, entry.index)
                    self._consumed += 1
                    return entry, None
                expected = self._diverge_locked(protocol, slot[1], shaped)
                consumed = self._consumed
            return None, self._divergence(protocol, probe, expected, consumed)

    def _diverge_locked(self, protocol: str, key: str, shaped: tuple[str, str] | None) -> Any:
        """Mark the session diverged; the recorded request of the candidate the report names
        (``None``: none): the first open one with the call's key or shape, else the first
        open one of its protocol. Allocates nothing."""
        self.diverged = True
        first_open: _Entry | None = None
        entries = self._entries
        index = 0
        while index < len(entries):  # by index: a list iterator would be an allocation
            entry = entries[index]
            index += 1
            if entry.consumed or entry.scope is not None:
                continue
            if not strict_equal(entry.protocol, protocol):
                continue
            if entry.key == key or (
                shaped is not None and entry.shape is not None and entry.shape == shaped[1]
            ):
                return entry.request
            if first_open is None:
                first_open = entry
        return None if first_open is None else first_open.request

    def _divergence(
        self, protocol: str, probe: dict[str, Any], expected: Any, consumed: int
    ) -> str:
        """The divergence line, kept and announced (no lock held: it is encoded here)."""
        report = divergence_report(
            protocol, probe, expected, consumed=consumed, total=len(self._entries)
        )
        line = divergence_line(report)
        self.divergence_lines.append(line)
        if self.on_divergence is not None:
            self.on_divergence(line)
        return line


def divergence_report(
    protocol: str, got: Any, expected: Any, *, consumed: int, total: int
) -> dict[str, Any]:
    """The divergence report (PROTOCOL 7.5), keys in the order the line prints them.

    ``expected`` is the candidate's recorded request, ``None`` when there is no candidate
    (:data:`~reproit_otel.wire._js.UNSET` when the candidate has no request: the key is then
    left out of the line). ``bodyDelta`` is added when the bodies of both sides differ.
    """
    report: dict[str, Any] = {
        "protocol": protocol,
        "got": got,
        "expected": expected,
        "consumed": consumed,
        "total": total,
    }
    if expected is not None and expected is not UNSET:
        expected_body = expected.get("body", UNSET) if isinstance(expected, Mapping) else UNSET
        got_body = got.get("body", UNSET) if isinstance(got, Mapping) else UNSET
        delta = body_delta(expected_body, got_body)
        if delta is not None:
            report["bodyDelta"] = delta
    return report


def divergence_line(report: Mapping[str, Any]) -> str:
    """``REPROIT:DIVERGENCE `` + ``JSON.stringify(report)`` (no trailing newline)."""
    return DIVERGENCE_MARKER + js_stringify(report)


_FAIL_CLOSED_FLAGS: Final = {
    "truncated-exchange-body": "truncated",
    "truncated-stream-boundaries": "streamBoundariesTruncated",
}


def serve_http(session: ReplaySession, probe: dict[str, Any]) -> ServedResponse:
    """Answer a live HTTP call from the session (PROTOCOL 7.4).

    ``probe`` is ``{"method", "url", "body"?}`` with the body as :func:`try_json
    <reproit_otel.wire.matching.try_json>` gives it (left out when the request has none).
    A divergence, a body truncated at capture and truncated stream boundaries are served as
    status 599 with a ``{"reproit": <reason>}`` JSON body, and produce a divergence line.
    """
    probe = session.redact_probe("http", probe)
    entry, line = session.match_entry("http", probe)
    if entry is None:
        return diverged_response("diverged", line)
    prepared = entry.answer
    if isinstance(prepared, ServedResponse):
        return prepared
    reason = prepared if isinstance(prepared, str) else "truncated-exchange-body"
    line = session.diverge("http", {**probe, _FAIL_CLOSED_FLAGS[reason]: True})
    return diverged_response(reason, line)


def pg_probe(text: Any, values: Any = UNSET) -> dict[str, Any]:
    """The probe of a ``pg`` call: ``{"text"}`` plus ``"values"`` when there are any.

    Parameters count when they are a non-empty sequence (a tuple becomes a list) or, for
    drivers with named parameters such as psycopg2, a non-empty mapping; anything else is
    left out, as the reference leaves out everything but a non-empty array.
    """
    probe: dict[str, Any] = {"text": text}
    if isinstance(values, (list, tuple)) and values:
        probe["values"] = list(values)
    elif isinstance(values, Mapping) and values:
        probe["values"] = dict(values)
    return probe


def serve_pg(session: ReplaySession, text: Any, values: Any = UNSET) -> PgResult:
    """Answer a live ``pg`` call from the session (PROTOCOL 7.4).

    Returns ``{"command", "rowCount", "rows"}`` of the recording (``None``, ``0`` and ``[]``
    when absent). Raises :class:`~reproit_otel.errors.DivergedError` (with the divergence
    line) when the call diverges, and :class:`~reproit_otel.errors.RecordedPgError` when the
    recorded call failed. Empty ``values`` count as none.
    """
    probe = session.redact_probe("pg", pg_probe(text, values))
    exchange, line = session.match_with_line("pg", probe)
    if exchange is None:
        raise DivergedError(PG_DIVERGED_MESSAGE, line=line)
    response = exchange.get("response", UNSET) if isinstance(exchange, Mapping) else UNSET
    if not isinstance(response, Mapping):
        response = {}
    error = response.get("error", UNSET)
    if js_truthy(error):
        fields: Mapping[str, Any] = error if isinstance(error, Mapping) else {}
        message = fields.get("message", UNSET)
        code = fields.get("code", UNSET)
        raise RecordedPgError(
            _RECORDED_PG_ERROR if message is None or message is UNSET else js_string(message),
            code=js_string(code) if js_truthy(code) else None,
        )
    command = response.get("command", UNSET)
    row_count = response.get("rowCount", UNSET)
    rows = response.get("rows", UNSET)
    return {
        "command": None if command is UNSET else command,
        "rowCount": 0 if row_count is None or row_count is UNSET else row_count,
        "rows": list(rows) if isinstance(rows, list) else [],
    }
