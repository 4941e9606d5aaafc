"""Captured values over 64 KiB give way to their identity before the payload bound (D3).

The 48 KiB payload bound (:mod:`reproit_otel.wire.payload`) drops effects from the end until
the capsule fits. Asked first, it would see one 70 KB request input and drop every effect,
keeping a capsule that cannot replay. So :func:`bound_captured_values` runs before it: every
captured value of an event (a ``start`` event's ``input``, an ``effect``'s ``exchange`` and
``before``/``after``/``payload``, a ``return``'s ``output``) whose canonical JSON exceeds
:data:`MAX_CAPTURED_VALUE_BYTES` keeps what fits and loses only what is too large:

* in an object or array, each member over the limit is replaced by its identity, and the
  container itself only when it is still over the limit afterwards;
* a scalar (a long string) over the limit is replaced by its identity;
* the identity is ``{"bodyBytes": n, "bodySha256": <hex>, "truncated": true}`` of the
  value's canonical JSON bytes.

An exchange that lost part of its response gets ``truncated: true`` on the response, so
replay fails closed on it instead of serving a partial answer; one that lost part of its
request no longer matches a live call, which fails closed as well. The events handed in are
not changed: an event with a replaced value comes back as a new object.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .canonical import canonical_json_bytes

__all__ = ["MAX_CAPTURED_VALUE_BYTES", "bound_captured_values", "value_identity"]

MAX_CAPTURED_VALUE_BYTES: Final = 65536
"""A captured value whose canonical JSON is larger is replaced (as far as needed) by its
identity."""

_MAX_DEPTH: Final = 32  # deeper than this, an oversized container goes whole
_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "start": ("input",),
    "effect": ("exchange", "before", "after", "payload"),
    "return": ("output",),
}


def value_identity(data: bytes) -> dict[str, Any]:
    """The identity that stands for a value whose canonical JSON is ``data``."""
    return {
        "bodyBytes": len(data),
        "bodySha256": hashlib.sha256(data).hexdigest(),
        "truncated": True,
    }


def _bounded(value: Any, depth: int) -> tuple[Any, int]:
    """``value`` within the limit, and how many values were replaced to get it there."""
    data = canonical_json_bytes(value)
    if len(data) <= MAX_CAPTURED_VALUE_BYTES:
        return value, 0
    replaced = 0
    if depth < _MAX_DEPTH and isinstance(value, Mapping):
        kept: dict[str, Any] = {}
        for key, child in value.items():
            kept[key], count = _bounded(child, depth + 1)
            replaced += count
        if len(canonical_json_bytes(kept)) <= MAX_CAPTURED_VALUE_BYTES:
            return kept, replaced
    elif depth < _MAX_DEPTH and isinstance(value, Sequence) and not isinstance(value, str):
        items: list[Any] = []
        for child in value:
            bounded, count = _bounded(child, depth + 1)
            items.append(bounded)
            replaced += count
        if len(canonical_json_bytes(items)) <= MAX_CAPTURED_VALUE_BYTES:
            return items, replaced
    return value_identity(data), 1


def _bounded_exchange(exchange: Any) -> tuple[Any, int]:
    bounded, replaced = _bounded(exchange, 0)
    if replaced and isinstance(bounded, dict) and isinstance(exchange, Mapping):
        response = bounded.get("response")
        if isinstance(response, dict) and response != exchange.get("response"):
            bounded["response"] = {**response, "truncated": True}
    return bounded, replaced


def bound_captured_values(events: Sequence[Any]) -> tuple[list[Any], int]:
    """``events`` with every captured value over 64 KiB bounded, and the replacement count."""
    result: list[Any] = []
    total = 0
    for event in events:
        kind = event.get("kind") if isinstance(event, Mapping) else None
        fields = _FIELDS.get(kind) if isinstance(kind, str) else None
        changed: dict[str, Any] = {}
        for name in fields or ():
            if name not in event:
                continue
            value = event[name]
            if name == "exchange":
                bounded, count = _bounded_exchange(value)
            else:
                bounded, count = _bounded(value, 0)
            if count:
                changed[name] = bounded
                total += count
        result.append({**event, **changed} if changed else event)
    return result, total
