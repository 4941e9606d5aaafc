"""The ``capture-batch-v1`` body production capture mode POSTs (PROTOCOL sections 5.3 to 5.7).

A finished operation is decided on (:func:`capture_eligibility`), queued as
``{"operation", "status", "events"}`` and later turned into one batch by
:func:`build_capture_batch`. Both are pure: the clock, the batch counter and the host facts come
in through a :class:`CaptureEnvironment`, the project identity through :class:`CaptureSettings`,
so the same operation always gives the same bytes (``canonical_json(batch)`` is the POST body).

Tokens, settings and environment
    What a token is, how correlation fields become tokens, :class:`CaptureSettings`,
    :class:`CaptureEnvironment` and :func:`host_environment` live in
    :mod:`reproit_otel.wire.batch_environment`; they stay importable from here.

Eligibility (section 5.3 and decision D5)
    :func:`capture_eligibility` answers ``(True, None)`` or ``(False, reason)``; the reasons are
    stable kebab-case strings meant for stats and logs, checked in this order:

    ``unfinished``               no ``return`` event
    ``not-a-failure``            no marked agent oracle and the status is not an integer 500..65535
    ``effects-incomplete``       the return event does not say ``effectsComplete: true``
    ``no-replay-seed``           ``events[0].replaySeed`` is not 16 lowercase hex digits
    ``effect-without-exchange``  a call/read/write/delete effect carries no exchange object
    ``no-operation``             ``events[0].operation`` is not a string
    ``no-exchanges``             (D5) the failure recorded no exchange of any kind, counting
                                 no credential check (an ``invoke`` exchange of the tool
                                 ``credential``) and no cache lookup (tool ``cache``): a
                                 signed session or token the request carried, or what the
                                 process held in memory, is not data the failure exchanged

Decision D3: nothing is lost silently
    The Node reference aborts a batch holding a captured value over 64 KiB and never applies
    its 48 KiB payload bound. Here, :func:`build_capture_result`:

    * first replaces every captured value over 65536 bytes of JSON by its identity, keeping
      what fits of it (``bound_captured_values`` of :mod:`reproit_otel.wire.value_bound`);
    * then bounds the capsule-equivalent payload (``capture_payload`` of
      :mod:`reproit_otel.wire.payload` with the batch's envelope): while its canonical JSON
      exceeds 49152 bytes the last effect event is dropped. Each dropped effect is counted;
      the capability it belongs to (``network`` for calls, ``database`` for reads, writes and
      deletes, ``http`` otherwise) is then sent with ``completeness: "partial"`` and a
      ``detail`` naming the count;
    * last, replaces the value of any batch event still over 65536 bytes of JSON by its
      identity ``{"bodyBytes", "bodySha256", "truncated": true}`` carried as a ``structural``
      value (it can no longer be replayed).

    Every replaced value is counted and marks partial the capability of the event it was in
    (a ``pg`` exchange's value ``database``, a call's ``network``, the input or the output
    ``http``), as a dropped effect does. Effects an operation did not
    keep because it passed its capture budget while recorded (the queued operation's
    ``unheld`` counts by effect kind, with its ``budget``) are counted the same way, with a
    detail naming the budget; so are those it did not keep because its trace had reached its
    event cap (``capped`` counts by effect kind, with its ``eventCap``).

    The counts come back in a :class:`CaptureBuild` next to the batch, for the uploader's
    stats (``capture_dropped_effects``). :func:`build_capture_batch` returns the batch alone.

Decision D6: identities
    emitter ``{"id": "backend-python-otel", "kind": "runtime-sdk", "component": "backend",
    "runtime": "python"}``, event ids ``evt_backend-python-otel_<n>``, batch ids
    ``cb-python-otel-<epoch ms>-<n>``, envelope key ``runtime: "python X.Y.Z"`` (Node writes
    ``node``), ``tz`` the IANA zone name or absent.

The builder never looks at the host: the host facts come in through the environment.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ._js import UNSET, is_js_integer, is_unset, js_string, utf16_length
from .batch_environment import (
    CaptureEnvironment,
    CaptureSettings,
    correlation_token,
    host_environment,
    host_timezone,
    is_token,
    observed_at,
)
from .canonical import canonical_json_bytes
from .payload import MAX_CAPTURE_PAYLOAD_BYTES, capture_payload
from .trace import marked_oracle as marked_agent_oracle
from .value_bound import MAX_CAPTURED_VALUE_BYTES, bound_captured_values

__all__ = [
    "BATCH_ID_PREFIX",
    "CACHE_TOOL",
    "CAPTURE_BATCH_VERSION",
    "CREDENTIAL_TOOL",
    "EMITTER",
    "EMITTER_ID",
    "ENVELOPE_CHECKPOINT",
    "MAX_CAPTURED_VALUE_BYTES",
    "OPERATION_RETURN_SUBJECT",
    "CaptureBuild",
    "CaptureEnvironment",
    "CaptureSettings",
    "build_capture_batch",
    "build_capture_result",
    "capture_eligibility",
    "correlation_token",
    "determinism_envelope",
    "host_environment",
    "host_timezone",
    "is_token",
    "observed_at",
]

CAPTURE_BATCH_VERSION: Final = 1
EMITTER_ID: Final = "backend-python-otel"
EMITTER: Final[Mapping[str, str]] = {
    "id": EMITTER_ID,
    "kind": "runtime-sdk",
    "component": "backend",
    "runtime": "python",
}
BATCH_ID_PREFIX: Final = "cb-python-otel-"
ENVELOPE_CHECKPOINT: Final = "determinism-envelope"
OPERATION_RETURN_SUBJECT: Final = "operation-return"

_POLICY: Final[Mapping[str, str]] = {
    "consent": "application-telemetry",
    "retentionClass": "standard",
}
_NETWORK_DETAIL: Final = "outbound dependency exchanges recorded with responses"
_SEED = re.compile(r"[0-9a-f]{16}", re.ASCII)
_BOUNDARY_EFFECTS: Final = frozenset({"call", "read", "write", "delete"})
_STATE_EFFECTS: Final = frozenset({"read", "write", "delete"})
_STRUCTURAL_FIELDS: Final = ("key", "effectTenant", "event", "before", "after", "payload")
_MAX_SAFE_INTEGER: Final = 2**53 - 1


# --- eligibility ------------------------------------------------------------------------------


def _last_return(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    for event in reversed(events):
        if isinstance(event, Mapping) and event.get("kind") == "return":
            return event
    return None


def operation_status(returned: Mapping[str, Any]) -> int | None:
    """The return event's ``status`` when it is an integer 0..65535, else ``None``."""
    status = returned.get("status", UNSET)
    if is_js_integer(status) and 0 <= status <= 0xFFFF:
        return int(status)
    return None


def _has_exchange(event: Mapping[str, Any]) -> bool:
    return isinstance(event.get("exchange"), Mapping)


CREDENTIAL_TOOL: Final = "credential"
"""The invoke tool of recorded credential checks (``instrumentation/credentials.py``)."""


CACHE_TOOL: Final = "cache"
"""The invoke tool of lookups a process cache answered
(``instrumentation/django_contenttypes.py``)."""

_NOT_DATA_TOOLS: Final = frozenset({CREDENTIAL_TOOL, CACHE_TOOL})


def _has_data_exchange(event: Mapping[str, Any]) -> bool:
    """An exchange other than a credential check or a cache lookup (decision D5 counts only
    these)."""
    exchange = event.get("exchange")
    if not isinstance(exchange, Mapping):
        return False
    request = exchange.get("request")
    return not (
        exchange.get("protocol") == "invoke"
        and isinstance(request, Mapping)
        and request.get("tool") in _NOT_DATA_TOOLS
    )


def capture_eligibility(events: Sequence[Mapping[str, Any]]) -> tuple[bool, str | None]:
    """Whether a finished operation's raw events are captured, and if not, why not.

    See the module docstring for the reasons. Never raises on odd input: anything malformed is
    simply ineligible.
    """
    returned = _last_return(events)
    if returned is None:
        return False, "unfinished"
    status = operation_status(returned)
    marked = marked_agent_oracle(events)
    if marked is None and (status is None or status < 500):
        return False, "not-a-failure"
    if returned.get("effectsComplete") is not True:
        return False, "effects-incomplete"
    first = events[0]
    seed = first.get("replaySeed") if isinstance(first, Mapping) else None
    if not isinstance(seed, str) or _SEED.fullmatch(seed) is None:
        return False, "no-replay-seed"
    effects = [e for e in events if isinstance(e, Mapping) and e.get("kind") == "effect"]
    if any(e.get("effect") in _BOUNDARY_EFFECTS and not _has_exchange(e) for e in effects):
        return False, "effect-without-exchange"
    if not isinstance(first.get("operation"), str):
        return False, "no-operation"
    if not any(_has_data_exchange(e) for e in effects):
        return False, "no-exchanges"
    return True, None


# --- the batch --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureBuild:
    """A built batch and what decision D3 had to give up to build it.

    ``dropped_effects`` counts effect events left out to fit the 49152-byte payload bound;
    ``replaced_values`` counts captured values over 64 KiB sent as their identity only.
    """

    batch: dict[str, Any]
    dropped_effects: int = 0
    replaced_values: int = 0
    partial: Mapping[str, str] = field(default_factory=dict)


def _utf16_cut(text: str, limit: int) -> str:
    """``text.slice(0, limit)`` in JavaScript (may split a surrogate pair)."""
    if utf16_length(text) <= limit:
        return text
    units = text.encode("utf-16-le", "surrogatepass")[: limit * 2]
    return units.decode("utf-16-le", "surrogatepass")


def _present(event: Mapping[str, Any], name: str) -> bool:
    value = event.get(name, UNSET)
    return value is not None and not is_unset(value)


def _subject(event: Mapping[str, Any]) -> str:
    for name in ("resource", "event", "operation"):
        if _present(event, name):
            return _utf16_cut(js_string(event[name]), 256)
    return "backend-effect"


def _replayable(value: Any) -> dict[str, Any]:
    return {"representation": "replayable", "value": value, "redaction": "redacted-at-source"}


def _effect_value(event: Mapping[str, Any]) -> dict[str, Any] | None:
    if _present(event, "exchange"):
        return _replayable(dict(event))
    shape = {name: event[name] for name in _STRUCTURAL_FIELDS if name in event}
    shape = {name: value for name, value in shape.items() if not is_unset(value)}
    return {"representation": "structural", "shape": shape} if shape else None


def _monotonic(event: Mapping[str, Any], sequence: int) -> int:
    value = event.get("monoNs", UNSET)
    if is_js_integer(value) and 0 <= value <= _MAX_SAFE_INTEGER:
        return int(value)
    return sequence


def determinism_envelope(
    first: Mapping[str, Any], *, settings: CaptureSettings, environment: CaptureEnvironment
) -> dict[str, Any]:
    """The ``determinism-envelope`` checkpoint attributes (section 5.6, decision D6).

    ``observedAtMs`` is the start event's ``at`` when it is a finite number, else ``now_ms``;
    unknowable fields are absent, never null.
    """
    at = first.get("at", UNSET)
    finite = isinstance(at, (int, float)) and not isinstance(at, bool) and math.isfinite(at)
    observed = at if finite else environment.now_ms
    attributes: dict[str, Any] = {
        "observedAtMs": int(observed) if is_js_integer(observed) else observed
    }
    optional = {
        "tz": environment.tz,
        "runtime": environment.runtime,
        "os": environment.os,
        "arch": environment.arch,
        "replaySeed": first.get("replaySeed"),
        "imageDigest": settings.image_digest,
    }
    attributes.update({k: v for k, v in optional.items() if v is not None and not is_unset(v)})
    return attributes


def _capabilities(
    effects: Sequence[Mapping[str, Any]], partial: Mapping[str, str]
) -> list[dict[str, Any]]:
    claimed = ["http"]
    if any(e.get("effect") in _STATE_EFFECTS and _has_exchange(e) for e in effects):
        claimed.append("database")
    if any(e.get("effect") == "call" and _has_exchange(e) for e in effects):
        claimed.append("network")
    result: list[dict[str, Any]] = []
    for name in claimed:
        entry: dict[str, Any] = {"capability": name, "completeness": "complete"}
        if name == "network":
            entry["detail"] = _NETWORK_DETAIL
        if name in partial:
            entry = {"capability": name, "completeness": "partial", "detail": partial[name]}
        result.append(entry)
    return result


def _capability_of(event: Mapping[str, Any], claimed: set[str]) -> str:
    effect = event.get("effect")
    name = "network" if effect == "call" else "database" if effect in _STATE_EFFECTS else "http"
    return name if name in claimed else "http"


class _Events:
    """Numbers batch events densely and chains each to the previous one; counts the values
    replaced by their identity by the capability of the event they were in."""

    def __init__(self, replaced: Mapping[str, int]) -> None:
        self.events: list[dict[str, Any]] = []
        self.replaced: dict[str, int] = dict(replaced)

    @property
    def replaced_total(self) -> int:
        return sum(self.replaced.values())

    def add(
        self, body: dict[str, Any], source: Mapping[str, Any], capability: str = "http"
    ) -> None:
        sequence = len(self.events) + 1
        event_id = f"evt_{EMITTER_ID}_{sequence}"
        captured: dict[str, Any] = {
            "id": event_id,
            "sequence": sequence,
            "monotonicNs": _monotonic(source, sequence),
            "causalParentIds": [self.events[-1]["id"]] if self.events else [],
            "event": body,
        }
        for name in ("traceId", "spanId", "actor"):
            value = source.get(name, UNSET)
            if value is None or is_unset(value):
                continue
            text = value if isinstance(value, str) else js_string(value)
            if text:
                captured[name] = correlation_token(name, text)
        if self._bound(captured):
            self.replaced[capability] = self.replaced.get(capability, 0) + 1
        self.events.append(captured)

    @staticmethod
    def _bound(captured: dict[str, Any]) -> bool:
        """Replace the event's value by its identity when it is over 64 KiB (True if so)."""
        body = captured["event"]
        wrapped = body.get("value")
        if not isinstance(wrapped, dict):
            return False
        inner = wrapped.get("value" if wrapped.get("representation") == "replayable" else "shape")
        inner_bytes = canonical_json_bytes(inner)
        if (
            len(inner_bytes) <= MAX_CAPTURED_VALUE_BYTES
            and len(canonical_json_bytes(captured)) <= MAX_CAPTURED_VALUE_BYTES
        ):
            return False
        body["value"] = {
            "representation": "structural",
            "shape": {
                "bodyBytes": len(inner_bytes),
                "bodySha256": hashlib.sha256(inner_bytes).hexdigest(),
                "truncated": True,
            },
        }
        return True


def _partial_detail(
    dropped: Mapping[str, int],
    replaced: Mapping[str, int],
    unkept: Sequence[tuple[Mapping[str, int], str]] = (),
) -> dict[str, str]:
    """The ``detail`` of each partial capability. ``unkept`` pairs the counts (by capability)
    of effects an operation did not keep while recorded with what stopped them."""
    details: dict[str, str] = {}
    for name, count in dropped.items():
        details[name] = (
            f"{count} effect event(s) dropped to fit the 49152-byte capture payload bound"
        )
    for counts, limit in unkept:
        for name, count in counts.items():
            note = f"{count} effect event(s) past the {limit} not kept"
            details[name] = f"{details[name]}; {note}" if name in details else note
    for name, count in replaced.items():
        if count:
            note = f"{count} captured value(s) over 65536 bytes sent as identity only"
            details[name] = f"{details[name]}; {note}" if name in details else note
    return details


def build_capture_result(
    operation: Mapping[str, Any],
    *,
    config: CaptureSettings,
    environment: CaptureEnvironment,
    payload_limit: int = MAX_CAPTURE_PAYLOAD_BYTES,
) -> CaptureBuild:
    """Build the ``capture-batch-v1`` object for one queued operation, with D3's counts.

    ``operation`` is ``{"operation": name, "status": int | None, "events": raw events}`` as
    queued after :func:`capture_eligibility`. Never raises for well-formed raw events.
    ``payload_limit`` replaces D3's 49152-byte bound: the uploader builds the whole operation
    with its heavy-capture budget to project the capsule it sends as an artifact.
    """
    name = operation["operation"]
    status = operation.get("status")
    # Values over 64 KiB give way to their identity first, so the payload bound below drops
    # effects only for what is left (one huge input must not cost every effect).
    raw_events: list[Any] = []
    replaced_in: dict[int, int] = {}  # raw event index -> values it had replaced
    for source in operation["events"]:
        bounded_events, count = bound_captured_values([source])
        if count:
            replaced_in[len(raw_events)] = count
        raw_events.extend(bounded_events)
    first: Mapping[str, Any] = raw_events[0] if raw_events else {}
    returned = _last_return(raw_events)
    batch_id = f"{BATCH_ID_PREFIX}{environment.now_ms}-{environment.batch_number}"
    envelope = determinism_envelope(first, settings=config, environment=environment)

    all_effects = [e for e in raw_events if isinstance(e, Mapping) and e.get("kind") == "effect"]
    payload, dropped_count = capture_payload(
        {"operation": name, "status": status, "events": raw_events},
        envelope=envelope,
        limit=payload_limit,
    )
    if payload is None:
        # Even the start and return alone exceed the bound: every effect is dropped.
        dropped_count = len(all_effects)
        kept_ids: set[int] = set()
    else:
        kept_ids = {id(e) for e in payload["events"]}
    kept_effects = [e for e in all_effects if id(e) in kept_ids]
    claimed = {"http"}
    if any(e.get("effect") in _STATE_EFFECTS and _has_exchange(e) for e in all_effects):
        claimed.add("database")
    if any(e.get("effect") == "call" and _has_exchange(e) for e in all_effects):
        claimed.add("network")
    dropped_by: dict[str, int] = {}
    for event in all_effects:
        if id(event) not in kept_ids:
            capability = _capability_of(event, claimed)
            dropped_by[capability] = dropped_by.get(capability, 0) + 1
    unkept: list[tuple[Mapping[str, int], str]] = []
    for counts, limit in (
        (operation.get("unheld"), f"{operation.get('budget', 0)}-byte capture budget"),
        (operation.get("capped"), f"{operation.get('eventCap', 0)}-event capture cap"),
    ):
        by_capability: dict[str, int] = {}
        for kind, count in (counts or {}).items():
            capability = _capability_of({"effect": kind}, claimed)
            by_capability[capability] = by_capability.get(capability, 0) + int(count)
            dropped_count += int(count)
        if by_capability:
            unkept.append((by_capability, limit))

    replaced_first: dict[str, int] = {}
    for index, count in replaced_in.items():
        event = raw_events[index]
        capability = _capability_of(event, claimed) if event.get("kind") == "effect" else "http"
        replaced_first[capability] = replaced_first.get(capability, 0) + count
    chain = _Events(replaced_first)
    chain.add({"kind": "operation-start", "name": name}, first)
    trigger_input = first.get("input", None)
    chain.add(
        {
            "kind": "trigger",
            "trigger": "http-request",
            "subject": name,
            "value": _replayable(None if is_unset(trigger_input) else trigger_input),
        },
        first,
    )
    chain.add({"kind": "checkpoint", "name": ENVELOPE_CHECKPOINT, "attributes": envelope}, first)
    for event in kept_effects:
        chain.add(_effect_event(event), event, _capability_of(event, claimed))
    closing = returned if returned is not None else first
    if returned is not None:
        chain.add(
            {
                "kind": "effect",
                "effect": "operation-return",
                "subject": OPERATION_RETURN_SUBJECT,
                "value": _replayable(dict(returned)),
            },
            returned,
        )
    outcome = "succeeded" if returned is not None and returned.get("success") is True else "failed"
    chain.add({"kind": "operation-end", "name": name, "outcome": outcome}, closing)
    failure = _failure(name, status, marked_agent_oracle(raw_events))
    if failure is not None:
        chain.add({"kind": "observation", "failure": failure}, closing)

    partial = _partial_detail(dropped_by, chain.replaced, unkept)
    batch: dict[str, Any] = {
        "version": CAPTURE_BATCH_VERSION,
        "batchId": batch_id,
        "projectId": config.project_id,
        "sessionId": _session_id(first, batch_id),
        "emitter": dict(EMITTER),
        "observedAt": observed_at(environment.now_ms),
        "policy": dict(_POLICY),
        "capabilities": _capabilities(all_effects, partial),
        "events": chain.events,
        "artifacts": [],
    }
    deployment = {
        key: value
        for key, value in (("version", config.build), ("commit", config.commit))
        if value is not None
    }
    if deployment:
        batch["deployment"] = deployment
    return CaptureBuild(
        batch=batch,
        dropped_effects=dropped_count,
        replaced_values=chain.replaced_total,
        partial=partial,
    )


def build_capture_batch(
    operation: Mapping[str, Any],
    *,
    config: CaptureSettings,
    environment: CaptureEnvironment,
) -> dict[str, Any]:
    """The ``capture-batch-v1`` object for one queued operation.

    The same as ``build_capture_result(...).batch``; use :func:`build_capture_result` to learn
    what decision D3 dropped or replaced.
    """
    return build_capture_result(operation, config=config, environment=environment).batch


def _session_id(first: Mapping[str, Any], batch_id: str) -> str:
    trace_id = first.get("traceId", UNSET)
    if trace_id is None or is_unset(trace_id):
        return batch_id
    text = trace_id if isinstance(trace_id, str) else js_string(trace_id)
    return correlation_token("sessionId", text) if text else batch_id


def _effect_event(event: Mapping[str, Any]) -> dict[str, Any]:
    kind = event.get("effect")
    subject = _subject(event)
    if kind == "call":
        body: dict[str, Any] = {
            "kind": "dependency",
            "system": "service",
            "operation": "call",
            "subject": subject,
        }
    elif kind in _STATE_EFFECTS:
        body = {"kind": "state-access", "state": "database", "operation": kind, "subject": subject}
    else:
        body = {"kind": "effect", "effect": kind, "subject": subject}
    value = _effect_value(event)
    if value is not None:
        body["value"] = value
    return body


def _failure(name: str, status: int | None, marked: str | None) -> dict[str, Any] | None:
    if marked is not None:
        return {
            "observation": "contract-violation",
            "authority": "runtime-diagnosis",
            "summary": f"agent oracle {marked} fired on {name}",
            "signature": f"{marked}:{name}",
            "observationPoint": name,
            "artifactIds": [],
        }
    if status is not None and status >= 500:
        return {
            "observation": "exception",
            "authority": "runtime-diagnosis",
            "summary": f"backend operation {name} returned HTTP {status}",
            "signature": f"backend-server-error:{name}",
            "observationPoint": name,
            "artifactIds": [],
        }
    return None
