"""The ``reproit-backend-capture`` capsule: checking, loading, writing and projecting one
(PROTOCOL sections 5.9 and 5.10).

A capsule is what replay serves from and what ``reproit-otel check`` re-runs::

    {"format": "reproit-backend-capture", "version": 1 | 2, "operation": "POST /orders",
     "oracle": "backend-server-error", "events": [<raw trace events>], "envelope": {...}}

:func:`validate_capsule` checks a parsed capsule and returns it; :func:`load_capsule` parses
capsule text (or reads a capsule file: the one place this module touches the disk) and checks
it. Both raise :class:`~reproit_otel.errors.CapsuleError` with a message naming the field.
Two strengths:

``strict=True`` (default)
    the consumer constraints of the ReproIt CLI: ``operation`` and ``oracle`` strings, a
    non-empty event list, every event with an unsigned ``sequence``, string ``traceId``,
    ``spanId`` and ``operation``, ``kind`` in ``start``/``effect``/``return`` (or
    ``protocol``), typed optional fields, and no field outside the event shapes of section 2.4.
    ``replaySeed`` is accepted on events although the CLI's event type does not list it
    (PROTOCOL 14, item 5): production capture events carry it.
``strict=False``
    what the replayers need: the format, the version and a list of event objects.

Both refuse an ``envelope`` replay could not pin (a NUL or a control character in ``tz``, a
clock beyond year 9999, a seed that is not hexadecimal: :func:`~reproit_otel.wire.assessment.
envelope_problem`, the rule the ingest applies to a batch's ``determinism-envelope``), and
connection ``setup`` answers replay would misread (:func:`~reproit_otel.wire.connection_setup.
setup_problem`, the rule the ingest applies to a batch's ``pg`` exchanges).

:func:`capsule_from_batch` inverts a ``capture-batch-v1`` into a capsule (section 5.9) and
:func:`capsule_text` writes one: canonical JSON, to be stored as UTF-8 without a byte order
mark and without a trailing newline (:func:`capsule_bytes`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

from reproit_otel.errors import CapsuleError

from ._js import UNSET, is_unset
from .assessment import envelope_problem
from .canonical import canonical_json
from .connection_setup import setup_problem

__all__ = [
    "CAPSULE_VERSIONS",
    "CAPTURE_FORMAT",
    "CAPTURE_VERSION",
    "capsule_bytes",
    "capsule_from_batch",
    "capsule_text",
    "capsule_version",
    "load_capsule",
    "validate_capsule",
]

CAPTURE_FORMAT: Final = "reproit-backend-capture"
CAPTURE_VERSION: Final = 1
"""The capture batch version (``capture-batch-v1``); the reference SDK's constant of that name."""
CAPSULE_VERSIONS: Final = (1, 2)
"""Capsule versions replayers accept: 1 (plain events), 2 (exchanges or ``at``/``monoNs``)."""

_SERVER_ERROR_ORACLE: Final = "backend-server-error"
_OPERATION_RETURN: Final = "operation-return"
_ENVELOPE_CHECKPOINT: Final = "determinism-envelope"
_U64_MAX: Final = 2**64 - 1
_COMMON_FIELDS: Final = frozenset(
    {
        "traceId",
        "spanId",
        "parentSpanId",
        "actionIndex",
        "operation",
        "build",
        "configContract",
        "actor",
        "tenant",
        "idempotencyKey",
        "selections",
        "replaySeed",
        "at",
        "monoNs",
        "sequence",
        "kind",
    }
)
_KIND_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "start": frozenset({"input"}),
    "return": frozenset({"output", "status", "success", "effectsComplete"}),
    "effect": frozenset(
        {
            "effect",
            "resource",
            "key",
            "effectTenant",
            "event",
            "before",
            "after",
            "payload",
            "exchange",
        }
    ),
}
_EFFECT_KINDS: Final = frozenset({"read", "write", "delete", "emit", "call"})
_OPTIONAL_TEXT: Final = (
    "parentSpanId",
    "build",
    "configContract",
    "actor",
    "tenant",
    "idempotencyKey",
    "replaySeed",
)
_ENVELOPE_FIELDS: Final = (
    "traceId",
    "spanId",
    "actionIndex",
    "operation",
    "build",
    "configContract",
    "actor",
    "tenant",
    "idempotencyKey",
    "selections",
)


def capsule_version(events: Sequence[Any]) -> int:
    """2 when an event has a non-null ``exchange`` or an ``at``/``monoNs`` key, else 1."""
    for event in events:
        if not isinstance(event, Mapping):
            continue
        exchange = event.get("exchange", UNSET)
        if exchange is not None and not is_unset(exchange):
            return 2
        if "at" in event or "monoNs" in event:
            return 2
    return 1


# --- checking ---------------------------------------------------------------------------------


def _unsigned(value: object, maximum: int = _U64_MAX) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= maximum


def _check_event(event: object, where: str) -> None:
    if not isinstance(event, Mapping):
        raise CapsuleError(f"{where} is not a JSON object; every capsule event must be one")
    kind = event.get("kind")
    if kind not in ("start", "effect", "return", "protocol"):
        raise CapsuleError(f"{where}.kind is {kind!r}; expected one of 'start', 'effect', 'return'")
    if not _unsigned(event.get("sequence")):
        raise CapsuleError(f"{where}.sequence must be an unsigned integer")
    for name in ("traceId", "spanId", "operation"):
        if not isinstance(event.get(name), str):
            raise CapsuleError(f"{where}.{name} must be a string")
    if kind == "protocol":
        return
    allowed = _COMMON_FIELDS | _KIND_FIELDS[kind]
    unknown = sorted(str(name) for name in event if name not in allowed)
    if unknown:
        raise CapsuleError(
            f"{where} has field(s) {', '.join(unknown)} that a {kind} event cannot carry"
        )
    if "actionIndex" in event and not _unsigned(event["actionIndex"], 0xFFFFFFFF):
        raise CapsuleError(f"{where}.actionIndex must be an integer 0..4294967295")
    for name in _OPTIONAL_TEXT:
        if event.get(name) is not None and not isinstance(event[name], str):
            raise CapsuleError(f"{where}.{name} must be a string or null")
    for name in ("at", "monoNs"):
        if event.get(name) is not None and not _unsigned(event[name]):
            raise CapsuleError(f"{where}.{name} must be an unsigned integer or null")
    if event.get("selections") is not None and not isinstance(event["selections"], list):
        raise CapsuleError(f"{where}.selections must be an array or null")
    if kind == "return":
        if event.get("status") is not None and not _unsigned(event["status"], 0xFFFF):
            raise CapsuleError(f"{where}.status must be an integer 0..65535 or null")
        for name in ("success", "effectsComplete"):
            if event.get(name) is not None and not isinstance(event[name], bool):
                raise CapsuleError(f"{where}.{name} must be a boolean")
    elif kind == "effect":
        if event.get("effect") not in _EFFECT_KINDS:
            raise CapsuleError(
                f"{where}.effect is {event.get('effect')!r}; expected one of "
                "'read', 'write', 'delete', 'emit', 'call'"
            )
        for name in ("resource", "key", "effectTenant", "event"):
            if event.get(name) is not None and not isinstance(event[name], str):
                raise CapsuleError(f"{where}.{name} must be a string or null")
        exchange = event.get("exchange")
        if exchange is not None and not isinstance(exchange, Mapping):
            raise CapsuleError(f"{where}.exchange must be an object or null")


def _shown(value: object) -> str:
    """A JSON value as a message quotes it (text cut at 60 characters)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else type(value).__name__


def validate_capsule(obj: object, *, strict: bool = True) -> dict[str, Any]:
    """Check a parsed capsule and return it (see the module docstring for ``strict``).

    Raises :class:`~reproit_otel.errors.CapsuleError` naming the first unusable field.
    """
    if not isinstance(obj, dict):
        raise CapsuleError("a capsule must be a JSON object; got " + type(obj).__name__)
    if "format" not in obj:
        raise CapsuleError(
            f'the capsule has no "format" field; expected "format": "{CAPTURE_FORMAT}" '
            '(a capture batch has a "batchId" instead)'
        )
    if obj["format"] != CAPTURE_FORMAT:
        raise CapsuleError(
            f'the capsule\'s "format" is {_shown(obj["format"])}; expected "{CAPTURE_FORMAT}". '
            "Is this a capture batch? Project it with capsule_from_batch first."
        )
    if "version" not in obj:
        raise CapsuleError('the capsule has no "version" field; expected "version": 1 or 2')
    version = obj["version"]
    if not _unsigned(version) or version not in CAPSULE_VERSIONS:
        raise CapsuleError(
            f'the capsule\'s "version" is {_shown(version)}, which is not supported; expected 1 '
            "or 2. Upgrade reproit-otel if the capsule comes from a newer SDK."
        )
    if "events" not in obj:
        raise CapsuleError('the capsule has no "events" field; expected an array of trace events')
    events = obj["events"]
    if not isinstance(events, list):
        raise CapsuleError(
            f'the capsule\'s "events" is {_json_kind(events)}; expected an array of trace events'
        )
    _check_envelope(obj.get("envelope", UNSET))
    if not strict:
        for index, event in enumerate(events):
            if not isinstance(event, Mapping):
                raise CapsuleError(f"events[{index}] is not a JSON object")
            _check_setup(event, f"events[{index}]")
        return obj
    for name in ("operation", "oracle"):
        if not isinstance(obj.get(name), str):
            raise CapsuleError(f"capsule {name} must be a string")
    if not events:
        raise CapsuleError("capsule has no events; a capture holds at least its start event")
    for index, event in enumerate(events):
        where = f"events[{index}]"
        _check_event(event, where)
        _check_setup(event, where)
    return obj


def _check_envelope(envelope: object) -> None:
    """Refuse an envelope replay could not pin (the rule of the ingest, ``envelope_problem``)."""
    if is_unset(envelope):
        return
    if not isinstance(envelope, Mapping):
        raise CapsuleError("capsule envelope must be an object when present")
    problem = envelope_problem(envelope, complete=False)
    if problem is not None:
        raise CapsuleError(f"capsule envelope: {problem}; replay cannot pin it")


def _check_setup(event: Mapping[str, Any], where: str) -> None:
    """Refuse connection setup answers replay would misread (``connection_setup``)."""
    exchange = event.get("exchange")
    if not isinstance(exchange, Mapping):
        return
    problem = setup_problem(exchange)
    if problem is not None:
        raise CapsuleError(
            f"{where}.exchange.{problem[0]} {problem[1]}; replay cannot serve this connection"
        )


def load_capsule(source: str | bytes | os.PathLike[str], *, strict: bool = True) -> dict[str, Any]:
    """Parse and check a capsule.

    ``source`` is the capsule's JSON text (``str`` or UTF-8 ``bytes``, a byte order mark is
    refused) or a path (``os.PathLike``) to a capsule file, which is read. Raises
    :class:`~reproit_otel.errors.CapsuleError`.
    """
    if isinstance(source, os.PathLike):
        path = os.fspath(source)
        try:
            with open(path, "rb") as handle:
                source = handle.read()
        except OSError as error:
            raise CapsuleError(f"cannot read capsule file {path}: {error}") from error
    if isinstance(source, bytes):
        if source.startswith(b"\xef\xbb\xbf"):
            raise CapsuleError(
                "capsule file starts with a byte order mark; write UTF-8 without one"
            )
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as error:
            raise CapsuleError(f"capsule is not UTF-8: {error}") from error
    if source.startswith("\ufeff"):
        raise CapsuleError("capsule text starts with a byte order mark; write UTF-8 without one")
    try:
        parsed = json.loads(source)
    except ValueError as error:
        raise CapsuleError(f"capsule is not JSON: {error}") from error
    return validate_capsule(parsed, strict=strict)


def capsule_text(capsule: Mapping[str, Any]) -> str:
    """The capsule's file text: canonical JSON, no trailing newline."""
    return canonical_json(capsule)


def capsule_bytes(capsule: Mapping[str, Any]) -> bytes:
    """The capsule's file bytes: UTF-8 canonical JSON, no byte order mark (first byte ``{``)."""
    return capsule_text(capsule).encode("utf-8", "surrogatepass")


# --- projection of a capture batch --------------------------------------------------------------


def _replayable(value: object) -> Any:
    """The value of a replayable captured value, else UNSET."""
    if isinstance(value, Mapping) and value.get("representation") == "replayable":
        return value.get("value")
    return UNSET


def capsule_from_batch(batch: Mapping[str, Any]) -> dict[str, Any] | None:
    """Project a ``capture-batch-v1`` back to a capsule (PROTOCOL 5.9), or ``None``.

    ``None`` when the batch has no ``operation-start``, no observation with a signature, or no
    trigger: it is then not a replayable backend failure. Structural effects (oracle markers
    included) are not replayable and do not come back. The batch is trusted to be valid.
    """
    operation: str | None = None
    trigger: tuple[Any, Any] | None = None
    oracle: str | None = None
    envelope: Any = UNSET
    effects: list[Any] = []
    returned: Any = UNSET
    for captured in batch.get("events") or []:
        if not isinstance(captured, Mapping):
            continue
        body = captured.get("event")
        if not isinstance(body, Mapping):
            continue
        kind = body.get("kind")
        if kind == "operation-start" and operation is None:
            operation = body.get("name")
        elif kind == "trigger" and trigger is None:
            value = _replayable(body.get("value"))
            trigger = (captured.get("traceId"), None if is_unset(value) else value)
        elif kind == "effect" and body.get("subject") == _OPERATION_RETURN:
            if is_unset(returned):
                returned = _replayable(body.get("value"))
        elif kind in ("effect", "dependency", "state-access"):
            value = _replayable(body.get("value"))
            if not is_unset(value):
                effects.append(value)
        elif kind == "observation" and oracle is None:
            failure = body.get("failure")
            signature = failure.get("signature") if isinstance(failure, Mapping) else None
            if isinstance(signature, str):
                oracle = signature.split(":", 1)[0]
        elif (
            kind == "checkpoint" and body.get("name") == _ENVELOPE_CHECKPOINT and is_unset(envelope)
        ):
            envelope = body.get("attributes")
    if operation is None or oracle is None or trigger is None:
        return None
    trace_hint, start_input = trigger
    reference = returned if not is_unset(returned) else (effects[0] if effects else None)
    trace = trace_hint if trace_hint is not None else batch.get("sessionId")
    common: dict[str, Any] = {
        "traceId": trace,
        "spanId": f"{trace}:{operation}",
        "actionIndex": 0,
        "operation": operation,
    }
    if isinstance(reference, Mapping):
        common.update({name: reference[name] for name in _ENVELOPE_FIELDS if name in reference})
    first_sequence = _sequence_of(reference, 2)
    start = {
        **common,
        "sequence": max(first_sequence - 1, 0),
        "kind": "start",
        "input": start_input,
    }
    if is_unset(returned):
        if oracle != _SERVER_ERROR_ORACLE:
            return None
        last_sequence = _sequence_of(effects[-1] if effects else None, first_sequence)
        returned = {
            **common,
            "sequence": last_sequence + 1,
            "kind": "return",
            "status": 500,
            "success": False,
            "effectsComplete": True,
        }
    events = [start, *effects, returned]
    capsule: dict[str, Any] = {
        "format": CAPTURE_FORMAT,
        "version": capsule_version(events),
        "operation": operation,
        "oracle": oracle,
        "events": events,
    }
    if isinstance(envelope, Mapping):
        capsule["envelope"] = dict(envelope)
    return capsule


def _sequence_of(raw: object, default: int) -> int:
    if isinstance(raw, Mapping) and _unsigned(raw.get("sequence")):
        return int(raw["sequence"])
    return default
