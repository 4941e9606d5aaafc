"""The ``invoke`` exchange: a dependency call recorded at its invoke boundary, as an outcome.

An invoke boundary (``reproit_otel.boundary``) records calls that are neither HTTP nor SQL
(IMAP, gRPC, Redis, a local model) as what was asked and what came back::

    exchange = {
        "protocol": "invoke",
        "request":  {"tool": "imap", "op": "fetch", "input": {"folder": "INBOX", "uid": 7}},
        "response": {"ok": True, "data": {...}},
    }
    # or, for a failure with an HTTP-style status:
    #   "response": {"ok": False, "error": {"code": "NotFound", "status": 404,
    #                "message": "no such message", "cause": {"message": "...", "status": None}}}

``input`` is the JSON form of the call's arguments by parameter name; replay keys on its
canonical JSON (:func:`reproit_otel.wire.matching.operation_key`), so key order does not
matter and two calls differing in one argument never share a recording.

Bounds (the exchange budget of PROTOCOL 4.2): an ``input`` or ``data`` whose canonical JSON
exceeds :data:`~reproit_otel.wire.bounds.MAX_BODY_BYTES` bytes is kept by identity only,
``inputBytes``/``inputSha256`` or ``dataBytes``/``dataSha256`` (SHA-256 of the canonical JSON)
plus ``truncated: true``; replay of a truncated outcome fails closed. Error messages are cut
to :data:`MAX_MESSAGE_CODE_POINTS` code points.

Fixture keys (:func:`fixture_key`) name one outcome per ``(tool, op, input)`` in a fixtures
directory. Everything here is pure: no I/O, no OpenTelemetry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final, Literal, TypedDict

from reproit_otel.wire._js import code_point_cut, utf8_bytes
from reproit_otel.wire.bounds import MAX_BODY_BYTES
from reproit_otel.wire.canonical import canonical_json
from reproit_otel.wire.matching import wildcards_as_one

__all__ = [
    "INVOKE_PROTOCOL",
    "MAX_MESSAGE_CODE_POINTS",
    "ErrorFields",
    "Outcome",
    "failure_response",
    "fixture_key",
    "invoke_request",
    "read_outcome",
    "success_response",
]

INVOKE_PROTOCOL: Final = "invoke"
"""The ``protocol`` of an invoke-boundary exchange."""
MAX_MESSAGE_CODE_POINTS: Final = 1024
"""Error and cause messages are cut to this many code points."""


class CauseFields(TypedDict):
    """What is kept of the exception that caused a recorded failure."""

    message: str | None
    status: int | None


class ErrorFields(TypedDict):
    """``response.error`` of a recorded failure."""

    code: str | None
    status: int | None
    message: str
    cause: CauseFields | None


def _bounded(name: str, value: Any) -> dict[str, Any]:
    text = canonical_json(value)
    data = utf8_bytes(text)
    if len(data) <= MAX_BODY_BYTES:
        return {name: value}
    return {
        f"{name}Bytes": len(data),
        f"{name}Sha256": hashlib.sha256(data).hexdigest(),
        "truncated": True,
    }


def invoke_request(tool: str, op: str, input_value: Any) -> dict[str, Any]:
    """``{tool, op, input}``, or ``input`` by identity when it is over the budget."""
    return {"tool": tool, "op": op, **_bounded("input", input_value)}


def success_response(data: Any) -> dict[str, Any]:
    """``{ok: true, data}``, or ``data`` by identity when it is over the budget."""
    return {"ok": True, **_bounded("data", data)}


def _cut(text: str | None) -> str | None:
    return None if text is None else code_point_cut(text, MAX_MESSAGE_CODE_POINTS)


def failure_response(
    *,
    code: str | None,
    status: int | None,
    message: str,
    cause_message: str | None = None,
    cause_status: int | None = None,
) -> dict[str, Any]:
    """``{ok: false, error: {code, status, message, cause}}`` (``cause`` null when none)."""
    cause: CauseFields | None = None
    if cause_message is not None or cause_status is not None:
        cause = {"message": _cut(cause_message), "status": cause_status}
    error: ErrorFields = {
        "code": code,
        "status": status,
        "message": _cut(message) or "",
        "cause": cause,
    }
    return {"ok": False, "error": dict(error)}


class Outcome(TypedDict):
    """A recorded response read back: a value, a failure, or a truncated (unusable) record."""

    kind: Literal["data", "error", "truncated", "invalid"]
    data: Any
    error: ErrorFields | None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _status(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_outcome(response: Any) -> Outcome:
    """What a recorded ``response`` says the call returned or raised."""
    if not isinstance(response, Mapping):
        return {"kind": "invalid", "data": None, "error": None}
    if response.get("truncated") is True:
        return {"kind": "truncated", "data": None, "error": None}
    if response.get("ok") is True:
        return {"kind": "data", "data": response.get("data"), "error": None}
    error = response.get("error")
    if response.get("ok") is False and isinstance(error, Mapping):
        cause = error.get("cause")
        cause_fields: CauseFields | None = None
        if isinstance(cause, Mapping):
            cause_fields = {
                "message": _text(cause.get("message")),
                "status": _status(cause.get("status")),
            }
        fields: ErrorFields = {
            "code": _text(error.get("code")),
            "status": _status(error.get("status")),
            "message": _text(error.get("message")) or "recorded tool call error",
            "cause": cause_fields,
        }
        return {"kind": "error", "data": None, "error": fields}
    return {"kind": "invalid", "data": None, "error": None}


def fixture_key(tool: str, op: str, input_value: Any) -> str:
    """The 24 lowercase hex digits that name the fixture of one ``(tool, op, input)``.

    SHA-256 of the canonical JSON of ``{tool, op, input}``, placeholders counted as one value
    (:func:`~reproit_otel.wire.matching.wildcards_as_one`), first 12 bytes.
    """
    text = canonical_json({"tool": tool, "op": op, "input": wildcards_as_one(input_value)})
    return hashlib.sha256(utf8_bytes(text)).hexdigest()[:24]
