"""Who a trace belongs to: the ``x-reproit-*`` request headers, the context they make, and the
span id and common fields every event of a trace carries (PROTOCOL 2.1, 5.2, 8.2).

Long names (decision D7): the default span id is ``<traceId>:<operation>``. Where that would
exceed 128 code points the reference SDK throws and the request goes untraced; reproit-otel
instead uses ``<traceId>:sha256:<first 24 hex of SHA-256(operation)>``. Should even that exceed
128 code points (a trace id longer than 96 code points), the span id is that identity
alone, ``sha256:<first 24 hex of SHA-256(operation)>``. A span id
given explicitly is never rewritten: over-long or empty, it is still ``InvalidOperation``.

Pure functions and immutable (or never-mutated) context objects, no lock. Every public name
here stays importable from :mod:`reproit_otel.wire.trace`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from reproit_otel.errors import TraceError
from reproit_otel.wire._js import (
    UNSET,
    is_js_integer,
    js_number,
    js_string,
    js_trim,
    utf8_bytes,
    well_formed,
)
from reproit_otel.wire.trace_events import MAX_EVENTS, _absent

__all__ = [
    "CaptureContext",
    "TraceContext",
    "bounded_operation",
    "identity",
    "trace_context_from_headers",
]

TRACE_HEADER: Final = "x-reproit-trace"
ACTOR_HEADER: Final = "x-reproit-actor"
ACTION_HEADER: Final = "x-reproit-action"
BUILD_HEADER: Final = "x-reproit-build"
CONFIG_CONTRACT_HEADER: Final = "x-reproit-config-contract"
EVENTS_HEADER: Final = "x-reproit-events"

MAX_TRACE_ID: Final = 128
MAX_ACTOR: Final = 32
MAX_BUILD: Final = 128
MAX_CONFIG_CONTRACT: Final = 128
MAX_OPERATION: Final = 256
MAX_SPAN_ID: Final = 128
MAX_TENANT: Final = 128
MAX_ACTION_INDEX: Final = 0xFFFFFFFF


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
    return identity(name)


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


def bounded_operation(operation: Any) -> str:
    """The operation name as every event carries it: stringified, trimmed and bounded.

    Raises :class:`~reproit_otel.errors.TraceError` ``InvalidOperation`` for an empty or
    over-long name.
    """
    if type(operation) is str and operation.isascii() and operation.isprintable():
        # _bounded()'s common case, inline: a request's name is most often printable ASCII.
        name: str | None = operation.strip(" ")
        if name and len(name) <= MAX_OPERATION:
            return name
        raise TraceError("InvalidOperation")
    name = _bounded(js_string(operation), MAX_OPERATION)
    if name is None:
        raise TraceError("InvalidOperation")
    return name


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
