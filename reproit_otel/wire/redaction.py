"""Redaction: what a recorded value may not carry (PROTOCOL section 3 and decision D8).

Structural redaction (section 3)
================================

:func:`redact` walks a JSON value and replaces the value of every *secret key* with a
placeholder object, keeping the shape of everything else so a redacted capture still
replays (the matcher walks the recorded body and wildcards only the placeholder leaves)::

    redact({"user": "ada", "password": "hunter2", "lines": [{"apiKey": "k"}]})
    # {"user": "ada",
    #  "password": {"$reproit": {"redacted": True, "type": "string", "length": 7}},
    #  "lines": [{"apiKey": {"$reproit": {"redacted": True, "type": "string", "length": 1}}}]}

* Every key survives at its own depth; arrays keep their length; ``None`` stays ``None``.
* :data:`~reproit_otel.wire._js.UNSET` (JavaScript ``undefined``) becomes ``None``.
* Keys that are not strings are named as JavaScript names them (``String(key)``).
* The walk uses an explicit stack: thousands of nesting levels neither overflow the
  interpreter stack nor recurse without bound.

A key is secret (:func:`is_secret_key`) when its *folded* name contains one of the 14
:data:`SECRET_PARTS`. Folding drops every character that is not ASCII ``A-Z a-z 0-9`` and
lowercases the rest, so ``X-Api-Key``, ``Access Key``, ``user_email`` and ``tokenizer`` are
secret and ``username`` is not. The substring rule is deliberate.

The placeholder (:func:`placeholder`) is ``{"$reproit": {"redacted": true, "type": T,
"length": L}}``: ``T`` is ``string`` (``L`` = number of code points), ``array`` (``L`` =
element count), ``object``, ``boolean``, ``null`` or, for numbers, ``integer`` when
JavaScript's ``Number.isInteger`` holds (so ``1.0`` too) and ``number`` otherwise; ``L`` is
``null`` where no length applies.

Text redaction (decision D8)
============================

Key names do not reach into text, so two helpers redact strings. Both write the fixed text
placeholder :data:`TEXT_PLACEHOLDER`, the eight characters ``$reproit``:

* :func:`redact_url` replaces the value of every query parameter whose (percent-decoded)
  name is secret: ``https://api/x?token=abc&page=2`` becomes
  ``https://api/x?token=$reproit&page=2``. Everything else, including parameter order,
  empty values, the fragment and text without a query, stays byte-identical. ``$`` is legal
  in a query, so the placeholder survives URL normalization. It works on effect keys such as
  ``GET /x?token=abc`` as well.
* :func:`scrub_secret_values` replaces every occurrence of configured secret values (for
  example from ``REPROIT_SECRET_VALUES``) in a text: ``Bearer sk_live_1234`` becomes
  ``Bearer $reproit``. Values shorter than :data:`MIN_SECRET_LENGTH` code points are ignored
  (they would scrub ordinary text), and longer values win over values they contain.
  :func:`scrub_value` applies it to every string inside a JSON value (keys untouched).

The replay matcher applies the same functions to the live call before comparing, so a
redacted capture still matches the call it was recorded from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final, Literal, TypedDict
from urllib.parse import unquote_plus

from reproit_otel.wire._js import UNSET, is_js_integer, js_string, well_formed

__all__ = [
    "MIN_SECRET_LENGTH",
    "PLACEHOLDER_KEY",
    "SECRET_PARTS",
    "TEXT_PLACEHOLDER",
    "Placeholder",
    "PlaceholderBody",
    "is_secret_key",
    "placeholder",
    "redact",
    "redact_url",
    "scrub_secret_values",
    "scrub_value",
]

SECRET_PARTS: Final[tuple[str, ...]] = (
    "password",
    "passwd",
    "secret",
    "token",
    "authorization",
    "cookie",
    "email",
    "phone",
    "apikey",
    "publishablekey",
    "privatekey",
    "accesskey",
    "signingkey",
    "idempotencykey",
)
"""The 14 fragments of the capture wire; a folded key name containing one is secret."""

PLACEHOLDER_KEY: Final = "$reproit"
"""The single key of a placeholder object (also what the replay matcher wildcards on)."""

TEXT_PLACEHOLDER: Final = "$reproit"
"""What :func:`redact_url` and :func:`scrub_secret_values` write in place of a secret text."""

MIN_SECRET_LENGTH: Final = 4
"""Configured secret values shorter than this many code points are not scrubbed."""

PlaceholderType = Literal["string", "integer", "number", "boolean", "null", "array", "object"]


class PlaceholderBody(TypedDict):
    """The inside of a placeholder: what was there, without the value."""

    redacted: bool
    type: PlaceholderType
    length: int | None


Placeholder = TypedDict("Placeholder", {"$reproit": PlaceholderBody})
"""``{"$reproit": {"redacted": true, "type": ..., "length": ...}}``."""

_NOT_FOLDED = re.compile(r"[^A-Za-z0-9]+")
_SECRET_PART = re.compile("|".join(SECRET_PARTS))


@lru_cache(maxsize=4096)
def _is_secret_name(name: str) -> bool:
    return _SECRET_PART.search(_NOT_FOLDED.sub("", name).lower()) is not None


def is_secret_key(name: object) -> bool:
    """True when the folded ``name`` contains one of :data:`SECRET_PARTS`.

    A name that is not a string is first named as JavaScript would (``String(name)``).
    """
    return _is_secret_name(name if isinstance(name, str) else js_string(name))


def _number_type(value: int | float) -> PlaceholderType:
    if isinstance(value, int):
        try:
            float(value)  # JavaScript reads an integer past the double range as Infinity
        except OverflowError:
            return "number"
        return "integer"
    return "integer" if is_js_integer(value) else "number"


def placeholder(value: Any) -> Placeholder:
    """The placeholder that stands for ``value`` (its kind and length, never the value)."""
    kind: PlaceholderType
    length: int | None = None
    if isinstance(value, bool):
        kind = "boolean"
    elif isinstance(value, (int, float)):
        kind = _number_type(value)
    elif isinstance(value, str):
        kind, length = "string", len(well_formed(value))
    elif isinstance(value, (list, tuple)):
        kind, length = "array", len(value)
    elif isinstance(value, Mapping):
        kind = "object"
    else:  # None, UNSET and anything that is not a JSON value
        kind = "null"
    return {PLACEHOLDER_KEY: {"redacted": True, "type": kind, "length": length}}


def _shell(value: Any) -> tuple[Any, bool]:
    """An empty copy of a container (True: still to fill) or the scalar as it is recorded."""
    if isinstance(value, Mapping):
        return {}, True
    if isinstance(value, (list, tuple)):
        return [], True
    if value is UNSET:
        return None, False
    return value, False


def redact(value: Any) -> Any:
    """A copy of ``value`` whose secret-keyed values are placeholders (section 3.2)."""
    result, is_container = _shell(value)
    pending: list[tuple[Any, Any]] = [(value, result)] if is_container else []
    while pending:
        source, target = pending.pop()
        if isinstance(target, dict):
            for key, child in source.items():
                name = key if isinstance(key, str) else js_string(key)
                if _is_secret_name(name):
                    target[name] = placeholder(child)
                    continue
                copy, is_container = _shell(child)
                target[name] = copy
                if is_container:
                    pending.append((child, copy))
        else:
            for child in source:
                copy, is_container = _shell(child)
                target.append(copy)
                if is_container:
                    pending.append((child, copy))
    return result


def redact_url(url: str) -> str:
    """``url`` with the value of every secret-named query parameter replaced (D8).

    The query is the text between the first ``?`` and the fragment's ``#``; parameters are
    separated by ``&`` and a name is percent-decoded (``+`` as space) before the secret-key
    test. A parameter without ``=`` or with an empty value is kept as it is.
    """
    hash_at = url.find("#")
    head = url if hash_at < 0 else url[:hash_at]
    query_at = head.find("?")
    if query_at < 0:
        return url
    parts = head[query_at + 1 :].split("&")
    changed = False
    for index, part in enumerate(parts):
        name, equals, value = part.partition("=")
        if equals and value and value != TEXT_PLACEHOLDER and is_secret_key(unquote_plus(name)):
            parts[index] = name + "=" + TEXT_PLACEHOLDER
            changed = True
    if not changed:
        return url
    return head[: query_at + 1] + "&".join(parts) + url[len(head) :]


@lru_cache(maxsize=64)
def _secret_pattern(secrets: tuple[str, ...]) -> re.Pattern[str]:
    # Alternatives are tried in order, so longest first makes the longest secret win.
    return re.compile("|".join(map(re.escape, secrets)))


def _pattern_for(secrets: Iterable[str]) -> re.Pattern[str] | None:
    usable = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH}
    if not usable:
        return None
    return _secret_pattern(tuple(sorted(usable, key=lambda s: (-len(s), s))))


def scrub_secret_values(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of a configured secret value replaced (D8).

    Secrets shorter than :data:`MIN_SECRET_LENGTH` code points are ignored; where two secrets
    overlap the longer one is replaced. The replacement is :data:`TEXT_PLACEHOLDER`.
    """
    pattern = _pattern_for(secrets)
    if pattern is None:
        return text
    return pattern.sub(TEXT_PLACEHOLDER, text)


def scrub_value(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of the JSON ``value`` with :func:`scrub_secret_values` applied to every string.

    Object keys are left alone (key names are what :func:`redact` looks at). Tuples come back
    as lists. Without a usable secret the value is returned as it is. Walks iteratively.
    """
    pattern = _pattern_for(secrets)
    if pattern is None:
        return value

    def scrub(child: Any) -> tuple[Any, bool]:
        if isinstance(child, str):
            return pattern.sub(TEXT_PLACEHOLDER, child), False
        if isinstance(child, Mapping):
            return {}, True
        if isinstance(child, (list, tuple)):
            return [], True
        return child, False

    result, is_container = scrub(value)
    pending: list[tuple[Any, Any]] = [(value, result)] if is_container else []
    while pending:
        source, target = pending.pop()
        if isinstance(target, dict):
            for key, child in source.items():
                copy, is_container = scrub(child)
                target[key] = copy
                if is_container:
                    pending.append((child, copy))
        else:
            for child in source:
                copy, is_container = scrub(child)
                target.append(copy)
                if is_container:
                    pending.append((child, copy))
    return result
