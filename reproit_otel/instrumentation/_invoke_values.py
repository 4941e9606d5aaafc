"""Python values at an invoke boundary: arguments, results, ``output`` and errors.

* :func:`json_form` turns a Python value into the JSON value recorded for it: mappings,
  sequences, dataclasses, pydantic models (``model_dump(mode="json")``), enums (their value),
  dates and times (ISO 8601), ``Decimal``/``UUID``/paths (text), bytes (``{"$bytes": base64}``),
  sets (sorted by canonical JSON). Anything else (a connection, a client, ``self``) counts by
  its type only, ``{"$object": "QualName"}`` (no module), so it never makes two calls differ.
* :func:`bind_input` binds a call's arguments to the callable's signature (defaults applied)
  and gives ``{parameter: json_form(value)}``; ``**kwargs`` are merged in, ``*args`` is a list
  under its own name.
* :func:`round_trip` is the value a replay will return: the canonical JSON of the result,
  parsed again (so a tuple comes back as a list and an integer past 2**53 as JavaScript reads
  it).
* :func:`validate_output` applies ``output``: a type checks (``float`` accepts integers, a
  dataclass or pydantic model is built from the recorded object) or a callable validates and
  may convert.
* :func:`recorded_error` decides whether an exception is an outcome worth recording: a
  :class:`~reproit_otel.errors.ToolCallError`, or an exception with an HTTP-style ``status``
  (an integer 100..599). Refusals by reproit-otel itself are never recorded.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import inspect
import json
import uuid
from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

from reproit_otel.errors import ReproitError, ToolCallError
from reproit_otel.wire.canonical import canonical_json

__all__ = [
    "RecordedError",
    "bind_input",
    "json_form",
    "recorded_error",
    "round_trip",
    "validate_output",
]

_MAX_DEPTH = 256


def _type_name(value: Any) -> str:
    # The qualified name without the module: a script's classes live in ``__main__`` when run
    # directly and in their package when imported, and both must key alike.
    return type(value).__qualname__


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, enum.Enum):
        return str(key.value)
    if isinstance(key, (bool, int, float)) or key is None:
        return json.dumps(key)
    return str(key)


def json_form(value: Any, _depth: int = 0, _seen: frozenset[int] = frozenset()) -> Any:
    """The JSON value recorded for ``value`` (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if _depth > _MAX_DEPTH or id(value) in _seen:
        return {"$object": _type_name(value)}
    seen = _seen | {id(value)}
    depth = _depth + 1
    if isinstance(value, enum.Enum):
        return json_form(value.value, depth, seen)
    if isinstance(value, Mapping):
        return {_key(k): json_form(v, depth, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_form(item, depth, seen) for item in value]
    if isinstance(value, (set, frozenset)):
        items = [json_form(item, depth, seen) for item in value]
        return sorted(items, key=canonical_json)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (decimal.Decimal, uuid.UUID, PurePath)):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: json_form(getattr(value, field.name), depth, seen)
            for field in dataclasses.fields(value)
        }
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        try:
            return json_form(dump(mode="json"), depth, seen)
        except TypeError:
            pass
    return {"$object": _type_name(value)}


def bind_input(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's arguments by parameter name, as JSON (defaults applied)."""
    if signature is None:
        return {"args": json_form(list(args)), **{k: json_form(v) for k, v in kwargs.items()}}
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    result: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            for key, item in value.items():
                result[key] = json_form(item)
        else:
            result[name] = json_form(
                list(value) if kind is inspect.Parameter.VAR_POSITIONAL else value
            )
    return result


def round_trip(data: Any) -> Any:
    """``data`` after its canonical JSON is parsed again: what a replay will return."""
    return json.loads(canonical_json(data))


def _is_pydantic_model(output: type) -> bool:
    return callable(getattr(output, "model_validate", None))


def validate_output(output: type | Callable[[Any], Any] | None, value: Any, where: str) -> Any:
    """``value`` checked (and possibly built) by ``output``; raises ``TypeError`` when a type
    check fails, or whatever the validating callable raises."""
    if output is None:
        return value
    if isinstance(output, type):
        if _is_pydantic_model(output):
            return output.model_validate(value)  # type: ignore[attr-defined]
        if dataclasses.is_dataclass(output) and isinstance(value, Mapping):
            return output(**value)
        if output is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if output is tuple and isinstance(value, list):
            return tuple(value)
        if isinstance(value, output) and not (isinstance(value, bool) and output in (int, float)):
            return value
        raise TypeError(
            f"boundary {where} returned {type(value).__name__}, expected {output.__name__}; "
            "fix the callable or the boundary's output="
        )
    return output(value)


class RecordedError:
    """The parts of a failure that are recorded (and raised again in replay)."""

    __slots__ = ("cause_message", "cause_status", "code", "message", "status")

    def __init__(
        self,
        *,
        code: str | None,
        status: int | None,
        message: str,
        cause_message: str | None,
        cause_status: int | None,
    ) -> None:
        self.code = code
        self.status = status
        self.message = message
        self.cause_message = cause_message
        self.cause_status = cause_status


def _http_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _code(error: BaseException) -> str:
    code = getattr(error, "code", None)
    if isinstance(code, str) and code:
        return code
    if isinstance(code, int) and not isinstance(code, bool):
        return str(code)
    return type(error).__name__


def recorded_error(error: BaseException) -> RecordedError | None:
    """What is recorded of ``error``, or ``None`` when it says nothing about why it failed."""
    if isinstance(error, ToolCallError):
        cause_message, cause_status = error.cause_message, error.cause_status
        cause = error.__cause__
        if cause_message is None and cause_status is None and cause is not None:
            cause_message = str(cause)
            cause_status = _http_status(getattr(cause, "status", None))
        return RecordedError(
            code=error.code,
            status=error.status,
            message=error.message,
            cause_message=cause_message,
            cause_status=cause_status,
        )
    if isinstance(error, ReproitError) or not isinstance(error, Exception):
        return None  # reproit's own refusals, cancellation and interrupts
    status = _http_status(getattr(error, "status", None))
    if status is None:
        return None
    cause = error.__cause__
    return RecordedError(
        code=_code(error),
        status=status,
        message=str(error),
        cause_message=None if cause is None else str(cause),
        cause_status=None if cause is None else _http_status(getattr(cause, "status", None)),
    )
