"""The 48 KiB replayable capture payload (PROTOCOL section 5.10, decision D3).

:func:`capture_payload` turns a queued operation (``{"operation", "status", "events"}``) into a
``reproit-backend-capture`` object (a capsule) and keeps its canonical JSON within 49152 bytes:
while it is larger, the last event of kind ``effect`` is left out and counted. When no effect
is left and it still does not fit, there is no payload (``None``) and the count says how many
effects were tried away.

The payload::

    {"format": "reproit-backend-capture", "version": 1 or 2, "operation": <name>,
     "oracle": <first marked agent oracle, else "backend-server-error">,
     "events": [<raw events, effects dropped from the end>], "envelope": <when given>}

``version`` is 2 when a kept event carries an ``exchange`` or an ``at``/``monoNs`` key, else 1.
The reference SDK always wrote 1 and never an envelope; reproit-otel writes what a replayer
needs to know (decision D3 applies the bound to what is POSTed, so the batch builder calls this
with the batch's determinism envelope).

The returned events are the caller's own event objects (not copies), in their original order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ._js import UNSET, UnsetType, is_unset
from .canonical import canonical_json_bytes
from .capsule import CAPTURE_FORMAT, capsule_version
from .trace import SERVER_ERROR_ORACLE, marked_oracle

__all__ = ["MAX_CAPTURE_PAYLOAD_BYTES", "capture_payload"]

MAX_CAPTURE_PAYLOAD_BYTES: Final = 49152


def _payload(
    operation: Mapping[str, Any],
    oracle: str,
    events: list[Any],
    envelope: Mapping[str, Any] | UnsetType,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "format": CAPTURE_FORMAT,
        "version": capsule_version(events),
        "operation": operation["operation"],
        "oracle": oracle,
        "events": events,
    }
    if not is_unset(envelope):
        payload["envelope"] = envelope
    return payload


def capture_payload(
    operation: Mapping[str, Any],
    *,
    envelope: Mapping[str, Any] | UnsetType = UNSET,
    limit: int = MAX_CAPTURE_PAYLOAD_BYTES,
) -> tuple[dict[str, Any] | None, int]:
    """``(payload, dropped_effects)`` for a queued operation; ``payload`` is ``None`` when even
    the events without any effect exceed 49152 bytes of canonical JSON.

    ``limit`` replaces the 49152-byte bound (the heavy-capture artifact is built with its budget).
    """
    events: list[Any] = list(operation["events"])
    oracle = marked_oracle(events) or SERVER_ERROR_ORACLE
    # The size is computed once per event instead of re-encoding the whole payload after each
    # drop: the canonical JSON of the payload is the one with no events plus each event's
    # encoding plus the commas between them (the version digit never changes the length).
    base = len(canonical_json_bytes(_payload(operation, oracle, [], envelope)))
    sizes = [len(canonical_json_bytes(event)) for event in events]
    total = base + sum(sizes) + max(len(events) - 1, 0)
    dropped = 0
    while total > limit:
        last = next(
            (
                index
                for index in range(len(events) - 1, -1, -1)
                if isinstance(events[index], Mapping) and events[index].get("kind") == "effect"
            ),
            -1,
        )
        if last < 0:
            return None, dropped
        total -= sizes[last] + (1 if len(events) > 1 else 0)
        del events[last]
        del sizes[last]
        dropped += 1
    return _payload(operation, oracle, events, envelope), dropped
