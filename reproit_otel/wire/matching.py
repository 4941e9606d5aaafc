"""How replay compares a live call with a recorded one (PROTOCOL 7.2, 7.3, 7.6).

The rules are the reference's JavaScript rules, spelled in Python:

``matches(recorded, live)``
    A recorded ``null`` or absent value accepts anything; a recorded object with a truthy
    ``$reproit`` key (a redaction placeholder) accepts anything at its position; a recorded
    array needs an array of the same length, element by element; a recorded object needs a
    live object holding a matching value for every recorded key (extra live keys are
    ignored); anything else compares with JavaScript ``===``, so ``1`` does not match
    ``True`` or ``"1"``, while ``1`` matches ``1.0``. Text placeholders compare without
    their identity tags (``$reproit.alnum.7.<id>`` equals ``$reproit``), except that two
    tagged ones must name the same identity (:mod:`reproit_otel.wire.standins`).

``operation_key(protocol, request)``
    What orders the exchanges of one operation: ``METHOD path+query`` for HTTP (host and
    scheme left out, see :mod:`reproit_otel.wire.urls`); for an invoke boundary
    (``invoke``) ``tool op <canonical JSON of the input>``, so two calls that differ in one
    argument never share a key (redaction placeholders count as one value whatever they
    describe, and an input kept only by its identity keys on ``sha256:<inputSha256>``); the
    statement text otherwise.

``body_delta(recorded, live)``
    Where a live body first drifts from the recording, for the divergence report: the index
    of the first differing chat message when both bodies carry a ``messages`` array, else
    the offset of the first differing byte of their JSON text.

``request_matches(protocol, recorded, probe)``
    The whole request comparison: HTTP compares method, path+query and body; ``invoke``
    compares tool, op and input (recorded ``$reproit`` placeholders still wildcard); ``pg``
    (and any other protocol) compares the statement text and its values.

``try_json(text, content_type)``
    The body of a live request as the recorder would have stored it.

:data:`~reproit_otel.wire._js.UNSET` stands for an absent value (JavaScript ``undefined``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from reproit_otel.wire._js import UNSET, js_string, utf8_bytes, well_formed
from reproit_otel.wire._jsparse import js_json_parse
from reproit_otel.wire.canonical import canonical_json, js_items, ordered_json
from reproit_otel.wire.fresh import url_matches
from reproit_otel.wire.standins import same_identities
from reproit_otel.wire.urls import url_path_and_query

__all__ = [
    "PLACEHOLDER_KEY",
    "body_delta",
    "js_items",
    "js_stringify",
    "js_truthy",
    "matches",
    "operation_key",
    "request_matches",
    "strict_equal",
    "try_json",
    "wildcards_as_one",
]

PLACEHOLDER_KEY: Final = "$reproit"
"""The key of a redaction placeholder object; a truthy value there is a wildcard."""

_TWO_53: Final = 2**53

FreshComparison = Callable[[Any, Any], "bool | None"]
"""``(recorded, live) -> True | False | None``: a fresh-value judgement (None: compare as usual)."""


class _Function:
    """Stands for an inherited JavaScript method (``live.constructor``, ``live.map``...)."""


_FUNCTION: Final = _Function()

# What ``obj[key]`` finds on Object.prototype when an object lacks an own property ``key``.
_OBJECT_PROTOTYPE_METHODS: Final = frozenset(
    {
        "constructor",
        "hasOwnProperty",
        "isPrototypeOf",
        "propertyIsEnumerable",
        "toLocaleString",
        "toString",
        "valueOf",
        "__defineGetter__",
        "__defineSetter__",
        "__lookupGetter__",
        "__lookupSetter__",
    }
)
_ARRAY_PROTOTYPE_METHODS: Final = _OBJECT_PROTOTYPE_METHODS | frozenset(
    {
        "at",
        "concat",
        "copyWithin",
        "entries",
        "every",
        "fill",
        "filter",
        "find",
        "findIndex",
        "findLast",
        "findLastIndex",
        "flat",
        "flatMap",
        "forEach",
        "includes",
        "indexOf",
        "join",
        "keys",
        "lastIndexOf",
        "map",
        "pop",
        "push",
        "reduce",
        "reduceRight",
        "reverse",
        "shift",
        "slice",
        "some",
        "sort",
        "splice",
        "toReversed",
        "toSorted",
        "toSpliced",
        "unshift",
        "values",
        "with",
    }
)


class _ObjectPrototype(dict[str, Any]):
    """``Object.prototype`` as a live value: what ``live.__proto__`` reads on a plain object."""


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness: false for absent, ``null``, ``false``, ``0``, ``NaN`` and ``""``."""
    if value is UNSET or value is None or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def _as_double(value: int | float) -> float:
    if isinstance(value, int) and not -_TWO_53 < value < _TWO_53:
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return float(value)


def strict_equal(left: Any, right: Any) -> bool:
    """JavaScript ``left === right`` for JSON values (a boolean is never equal to a number)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        if (
            isinstance(left, int)
            and isinstance(right, int)
            and -_TWO_53 < left < _TWO_53
            and -_TWO_53 < right < _TWO_53
        ):
            return left == right
        return _as_double(left) == _as_double(right)
    if isinstance(left, str) and isinstance(right, str):
        return left == right or well_formed(left) == well_formed(right)
    if left is None or left is UNSET:
        return right is left
    # Objects and arrays are equal only when they are the same object.
    return left is right


def _is_object(value: Any) -> bool:
    """``typeof value === "object" && value !== null`` (arrays are objects)."""
    return isinstance(value, (Mapping, list, tuple))


def _array_index(key: str, length: int) -> int | None:
    if key == "0" or (key[:1] in "123456789" and key.isdigit() and key.isascii()):
        index = int(key)
        return index if index < length else None
    return None


def _member(container: Any, key: str) -> Any:
    """``container[key]`` in JavaScript, for a live object or array (inherited members too)."""
    if isinstance(container, (list, tuple)):
        index = _array_index(key, len(container)) if key else None
        if index is not None:
            return container[index]
        if key == "length":
            return len(container)
        if key == "__proto__":
            return []  # Array.prototype: an empty array with the array methods
        return _FUNCTION if key in _ARRAY_PROTOTYPE_METHODS else UNSET
    if key in container:
        return container[key]
    if isinstance(container, _ObjectPrototype):
        if key == "__proto__":
            return None
    elif key == "__proto__":
        return _ObjectPrototype()
    return _FUNCTION if key in _OBJECT_PROTOTYPE_METHODS else UNSET


def matches(recorded: Any, live: Any, fresh: FreshComparison | None = None) -> bool:
    """Whether a live value satisfies a recorded one (PROTOCOL 7.3).

    ``None`` and :data:`~reproit_otel.wire._js.UNSET` on the recorded side, and recorded
    ``{"$reproit": <truthy>}`` placeholders at any depth, accept any live value. ``fresh``
    (optional, :class:`reproit_otel.wire.fresh.FreshMatch`) first judges each pair of values
    that may be new on every run: ``True``/``False`` decide, ``None`` compares as usual.
    """
    # An explicit stack keeps deeply nested bodies from exhausting the interpreter stack.
    pending: list[tuple[Any, Any]] = [(recorded, live)]
    while pending:
        want, got = pending.pop()
        if want is None or want is UNSET:
            continue
        if fresh is not None:
            verdict = fresh(want, got)
            if verdict is not None:
                if not verdict:
                    return False
                continue
        if isinstance(want, Mapping):
            if js_truthy(want.get(PLACEHOLDER_KEY, UNSET)):
                continue
            if not _is_object(got):
                return False
            for key, value in want.items():
                pending.append((value, _member(got, key if isinstance(key, str) else str(key))))
            continue
        if isinstance(want, (list, tuple)):
            if not isinstance(got, (list, tuple)) or len(got) != len(want):
                return False
            pending.extend(zip(want, got, strict=True))
            continue
        if not strict_equal(want, got) and not _same_but_identities(want, got):
            return False
    return True


def _same_but_identities(want: Any, got: Any) -> bool:
    """Two texts equal once text placeholders drop their identity tags, with no identity
    disagreeing (:func:`~reproit_otel.wire.standins.same_identities`).

    A capture tags a text placeholder with the secret's identity (``password=$reproit.alnum.
    7.<id>``); the live call replay redacts carries the bare ``$reproit`` there, or, where it
    holds a stand-in the replay handed out, that stand-in's own tagged placeholder.
    """
    if not isinstance(want, str) or not isinstance(got, str) or PLACEHOLDER_KEY not in want:
        return False
    return same_identities(want, got)


def operation_key(protocol: Any, request: Any) -> str:
    """The key that orders exchanges of one operation (PROTOCOL 7.2).

    HTTP: ``String(method ?? "") + " " + url_path_and_query(url)``; ``invoke``:
    ``tool + " " + op + " " + canonical_json(input)`` with every placeholder object written
    as ``{"$reproit":true}`` (or ``sha256:<inputSha256>`` in place of an input kept only by
    its identity); any other protocol: ``String(text ?? "")``. A missing request counts as
    an empty one.
    """
    fields: Mapping[str, Any] = request if isinstance(request, Mapping) else {}
    if protocol == "http":
        return (
            _string_or_empty(fields.get("method", UNSET))
            + " "
            + url_path_and_query(fields.get("url", UNSET))
        )
    if protocol == "invoke":
        return (
            _string_or_empty(fields.get("tool", UNSET))
            + " "
            + _string_or_empty(fields.get("op", UNSET))
            + " "
            + _invoke_input_key(fields)
        )
    return _string_or_empty(fields.get("text", UNSET))


_WILDCARD: Final = {PLACEHOLDER_KEY: True}


def _invoke_input_key(fields: Mapping[str, Any]) -> str:
    value = fields.get("input", UNSET)
    if value is UNSET:
        digest = fields.get("inputSha256", UNSET)
        return "" if digest is UNSET or digest is None else "sha256:" + js_string(digest)
    return canonical_json(wildcards_as_one(value))


def wildcards_as_one(value: Any) -> Any:
    """A copy of ``value`` where every placeholder object reads ``{"$reproit": true}``.

    A placeholder says what was redacted (its type and length); two recordings of one call
    made with secrets of different lengths must still share an operation key.
    """
    if not isinstance(value, (Mapping, list, tuple)):
        return value
    if isinstance(value, Mapping) and js_truthy(value.get(PLACEHOLDER_KEY, UNSET)):
        return dict(_WILDCARD)
    root: Any = {} if isinstance(value, Mapping) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        source, target = stack.pop()
        pairs = source.items() if isinstance(source, Mapping) else enumerate(source)
        for key, child in pairs:
            copy = child
            if isinstance(child, Mapping) and js_truthy(child.get(PLACEHOLDER_KEY, UNSET)):
                copy = dict(_WILDCARD)
            elif isinstance(child, (Mapping, list, tuple)):
                copy = {} if isinstance(child, Mapping) else []
                stack.append((child, copy))
            if isinstance(target, dict):
                target[key] = copy
            else:
                target.append(copy)
    return root


def _string_or_empty(value: Any) -> str:
    return "" if value is None or value is UNSET else js_string(value)


def request_matches(
    protocol: Any, recorded: Any, probe: Any, fresh: FreshComparison | None = None
) -> bool:
    """Whether a live request ``probe`` matches a recorded request (PROTOCOL 7.3).

    HTTP: ``method`` strictly equal, path+query equal (with ``fresh``, equal but for UUIDs it
    accepts, :func:`~reproit_otel.wire.fresh.url_matches`), ``matches(recorded.body,
    probe.body)`` (headers are never compared). Otherwise: ``text`` strictly equal and
    ``matches(recorded.values, probe.values)``.
    """
    want: Mapping[str, Any] = recorded if isinstance(recorded, Mapping) else {}
    got: Mapping[str, Any] = probe if isinstance(probe, Mapping) else {}
    if protocol == "http":
        if not strict_equal(want.get("method", UNSET), got.get("method", UNSET)):
            return False
        want_url = url_path_and_query(want.get("url", UNSET))
        got_url = url_path_and_query(got.get("url", UNSET))
        if want_url != got_url and (fresh is None or not url_matches(want_url, got_url, fresh)):
            return False
        return matches(want.get("body", UNSET), got.get("body", UNSET), fresh)
    if protocol == "invoke":
        for name in ("tool", "op"):
            if not strict_equal(want.get(name, UNSET), got.get(name, UNSET)):
                return False
        if "input" in want or "inputSha256" not in want:
            return "input" in got and matches(want.get("input", UNSET), got["input"])
        return strict_equal(want["inputSha256"], got.get("inputSha256", UNSET))
    if not strict_equal(want.get("text", UNSET), got.get("text", UNSET)):
        return False
    return matches(want.get("values", UNSET), got.get("values", UNSET), fresh)


def _body_bytes(value: Any) -> bytes:
    return utf8_bytes(value if isinstance(value, str) else js_stringify(value))


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)``: the same text as :func:`ordered_json`."""
    return ordered_json(value)


def _chat_messages(value: Any) -> list[Any] | None:
    if isinstance(value, Mapping):
        messages = value.get("messages", UNSET)
        if isinstance(messages, (list, tuple)):
            return list(messages)
    return None


def body_delta(recorded: Any, live: Any) -> dict[str, Any] | None:
    """Where ``live`` first drifts from ``recorded`` (PROTOCOL 7.6), or ``None``.

    ``None`` when either side is absent (:data:`~reproit_otel.wire._js.UNSET`) or the bodies
    match. Chat bodies (both objects with a ``messages`` array) report
    ``{"kind": "message", "firstDifferingMessage", "recordedMessages", "liveMessages"}`` when
    a message differs or the conversations differ in length; everything else reports
    ``{"kind": "byte", "offset"}``, the first differing byte of the UTF-8 text (the string
    itself, or its insertion-order JSON), or the shorter length when one is a prefix.
    """
    if recorded is UNSET or live is UNSET:
        return None
    if matches(recorded, live):
        return None
    recorded_messages = _chat_messages(recorded)
    live_messages = _chat_messages(live)
    if recorded_messages is not None and live_messages is not None:
        shorter = min(len(recorded_messages), len(live_messages))
        index: int | None = next(
            (i for i in range(shorter) if not matches(recorded_messages[i], live_messages[i])),
            None,
        )
        if index is None and len(recorded_messages) != len(live_messages):
            index = shorter
        if index is not None:
            return {
                "kind": "message",
                "firstDifferingMessage": index,
                "recordedMessages": len(recorded_messages),
                "liveMessages": len(live_messages),
            }
    left = _body_bytes(recorded)
    right = _body_bytes(live)
    offset = next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
        min(len(left), len(right)),
    )
    return {"kind": "byte", "offset": offset}


def try_json(text: Any, content_type: Any) -> Any:
    """A live request body as recorded: parsed JSON when ``content_type`` says JSON.

    When ``content_type`` is a string containing ``application/json`` and ``text`` parses as
    JSON (``JSON.parse`` rules: no ``NaN``/``Infinity`` tokens, every number a double), the
    parsed value; otherwise
    ``text`` unchanged.
    """
    if isinstance(content_type, str) and "application/json" in content_type:
        source = text if isinstance(text, str) else js_string(text)
        try:
            return js_json_parse(source)
        except ValueError:
            return text
    return text
