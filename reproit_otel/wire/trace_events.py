"""What a trace event is made of: effect fields, effect kinds and agent oracles (PROTOCOL 2.4, 6).

Pure construction, no state and no lock: :mod:`reproit_otel.wire.trace` builds an ``effect``
event's fields here before its push, and :func:`marked_oracle` reads a finished trace's events.
Every name here stays importable from :mod:`reproit_otel.wire.trace`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from reproit_otel.redaction.core import redact
from reproit_otel.wire._js import UNSET, code_point_cut, js_string

__all__ = [
    "AGENT_ORACLES",
    "EFFECT_KINDS",
    "MAX_EFFECT_FIELD",
    "MAX_EVENTS",
    "ORACLE_MARKER_RESOURCE",
    "SERVER_ERROR_ORACLE",
    "DeferredEffect",
    "TraceEvent",
    "marked_oracle",
]

TraceEvent = dict[str, Any]
"""One trace event as a JSON object (key order as the reference builds it)."""

MAX_EVENTS: Final = 256
"""Events per trace (start, effects and return together); also the selections kept."""
MAX_EFFECT_FIELD: Final = 256

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


def _absent(value: object) -> bool:
    """JavaScript ``value == null``: ``undefined`` or ``null``."""
    return value is UNSET or value is None


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


DeferredEffect = Callable[[], "tuple[Any, Any, Any] | None"]
"""Builds a deferred effect's ``(resource, key, exchange)`` (each may be :data:`UNSET`), or
returns ``None`` when it cannot: the effect is then left out of the trace."""


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
