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
* The value of a secret key is replaced whatever it is, a placeholder that came in as data
  included (section 3.2 makes no exception): it becomes the placeholder of an object, as the
  reference makes it. A placeholder an earlier rule of this process (text, form, SQL) made
  from the secret itself is kept, with its type, length and identity. A placeholder under a
  key that is not secret is walked like any object and stays as it is.
* :data:`~reproit_otel.wire._js.UNSET` (JavaScript ``undefined``) becomes ``None``.
* Keys that are not strings are named as JavaScript names them (``String(key)``).
* The walk uses an explicit stack: thousands of nesting levels neither overflow the
  interpreter stack nor recurse without bound.

A key is secret (:func:`is_secret_key`) when its *folded* name contains one of the 14
:data:`SECRET_PARTS` of the capture wire or one of the :data:`SERVICE_SECRET_PARTS` that
services use beyond them (``pwd``, ``jwt``, ``sessionid``, ``credentials``, ...), or is
exactly one of the short :data:`SERVICE_SECRET_NAMES` (``otp``, ``sig``, ...; too short to
test as substrings). Folding drops every character that is not ASCII ``A-Z a-z 0-9`` and
lowercases the rest, so ``X-Api-Key``, ``Access Key``, ``user_email`` and ``tokenizer`` are
secret and ``username`` is not. The substring rule is deliberate. Redacting more keys than
the reference keeps every batch valid: a placeholder is a placeholder wherever it sits.

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
  ``https://api/x?token=$reproit&page=2``. The fragment is treated the same way
  (``#access_token=abc&state=1``, an OAuth implicit-grant redirect). In the URL's user info a
  user name alone is how tokens ride in URLs (``https://ghp_abc@host`` becomes
  ``https://$reproit@host``), and beside a password only the password goes
  (``https://ada:pw@host`` becomes ``https://ada:$reproit@host``). Everything else, including
  parameter order, empty values and text without a query, stays byte-identical. ``$`` is
  legal in a query, so the placeholder survives URL normalization. It works on effect keys
  such as ``GET /x?token=abc`` as well.
* :func:`redact_urls_in_text` does the same to every URL inside a free text (a transport
  error's message names the URL it failed on).
* :func:`redact_form` does the same to an ``application/x-www-form-urlencoded`` body
  (``grant_type=password&password=hunter2``).
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
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Final, Literal, TypedDict
from urllib.parse import unquote_plus

from reproit_otel.wire._js import UNSET, is_js_integer, js_string, well_formed
from reproit_otel.wire.standins import (
    TEXT_TOKEN,
    current_identity_key,
    placeholder_fields,
    text_placeholder,
)

__all__ = [
    "MIN_SECRET_LENGTH",
    "PLACEHOLDER_KEY",
    "SECRET_PARTS",
    "SERVICE_SECRET_NAMES",
    "SERVICE_SECRET_PARTS",
    "TEXT_PLACEHOLDER",
    "Placeholder",
    "PlaceholderBody",
    "is_placeholder",
    "is_secret_key",
    "placehold_equal",
    "placeholder",
    "redact",
    "redact_form",
    "redact_url",
    "redact_urls_in_text",
    "scrub_keys_and_values",
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

SERVICE_SECRET_PARTS: Final[tuple[str, ...]] = (
    "pwd",
    "passphrase",
    "passcode",
    "jwt",
    "sessionid",
    "sessid",
    "sessionkey",
    "sessiondata",
    "credential",
    "authkey",
    "subscriptionkey",
    "encryptionkey",
    "masterkey",
    "clientkey",
    "csrf",
    "xsrf",
    "signature",
    "bearer",
    "connectionstring",
)
"""Fragments services use for secrets beyond the capture wire's 14 (``x-auth-key``,
``ocp-apim-subscription-key``, ``PHPSESSID``, ``X-Amz-Signature``, ``client_credentials``...);
a folded key name containing one is secret too."""

SERVICE_SECRET_NAMES: Final[frozenset[str]] = frozenset({"otp", "sig", "pin", "cvv", "cvc"})
"""Folded key names that are secret only as a whole name (as substrings they would match
ordinary words: ``footprint``, ``spinner``)."""

PLACEHOLDER_KEY: Final = "$reproit"
"""The single key of a placeholder object (also what the replay matcher wildcards on)."""

TEXT_PLACEHOLDER: Final = "$reproit"
"""What :func:`redact_url` and :func:`scrub_secret_values` write in place of a secret text."""

MIN_SECRET_LENGTH: Final = 4
"""Configured secret values shorter than this many code points are not scrubbed."""

PlaceholderType = Literal["string", "integer", "number", "boolean", "null", "array", "object"]


class PlaceholderBody(TypedDict):
    """The inside of a placeholder: what was there, without the value.

    While a capture key is set (:func:`reproit_otel.wire.standins.set_identity_key`) a
    placeholder of a string also names its character ``class`` and every placeholder of a
    scalar carries the keyed ``id`` of the value (see :mod:`reproit_otel.wire.standins`).
    """

    redacted: bool
    type: PlaceholderType
    length: int | None
    # Only with a capture key (reproit_otel.wire.standins):
    # "class": str  -- the character class of a string
    # "id": str     -- HMAC-SHA256 of the value under the per-process key, 24 hex


Placeholder = TypedDict("Placeholder", {"$reproit": PlaceholderBody})
"""``{"$reproit": {"redacted": true, "type": ..., "length": ...}}``."""

_NOT_FOLDED = re.compile(r"[^A-Za-z0-9]+")
_SECRET_PART = re.compile("|".join((*SECRET_PARTS, *SERVICE_SECRET_PARTS)))


@lru_cache(maxsize=4096)
def _is_secret_name(name: str) -> bool:
    folded = _NOT_FOLDED.sub("", name).lower()
    return folded in SERVICE_SECRET_NAMES or _SECRET_PART.search(folded) is not None


def is_secret_key(name: object) -> bool:
    """True when the folded ``name`` contains one of :data:`SECRET_PARTS` or
    :data:`SERVICE_SECRET_PARTS`, or is one of :data:`SERVICE_SECRET_NAMES`.

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
    body: PlaceholderBody = {"redacted": True, "type": kind, "length": length}
    if current_identity_key() is not None:
        body.update(placeholder_fields(value))  # type: ignore[typeddict-item]
    made: Placeholder = _MadeHere({PLACEHOLDER_KEY: body})  # type: ignore[assignment]
    return made


class _MadeHere(dict):  # type: ignore[type-arg]
    """A placeholder this process made from the value it stands for.

    :func:`redact` keeps such a placeholder as it is under a secret key: an earlier rule
    (a text or form body, a SQL parameter) already replaced the secret, and placing it again
    would lose its type, length and identity. A placeholder that came in as data (an
    application value that happens to look like one) is a plain ``dict`` and is replaced like
    any other value, as section 3.2 says. It encodes and compares as the dict it is.
    """

    __slots__ = ()


def is_placeholder(value: Any) -> bool:
    """True when ``value`` is a placeholder object already (a value redacted earlier)."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return False
    body = value.get(PLACEHOLDER_KEY)
    return isinstance(body, Mapping) and body.get("redacted") is True


def _shell(value: Any) -> tuple[Any, bool]:
    """An empty copy of a container (True: still to fill) or the scalar as it is recorded."""
    if type(value) is _MadeHere:  # a placeholder of this process is kept whole
        return value, False
    if isinstance(value, Mapping):
        return {}, True
    if isinstance(value, (list, tuple)):
        return [], True
    if value is UNSET:
        return None, False
    return value, False


# Values of these exact types are recorded as they are (what ``_shell`` gives them); testing
# the type first spares a call per value on the failing path, which redacts every row and body.
_PLAIN = frozenset({str, int, float, bool, type(None)})


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
                    target[name] = child if type(child) is _MadeHere else placeholder(child)
                    continue
                if type(child) in _PLAIN:
                    target[name] = child
                    continue
                copy, is_container = _shell(child)
                target[name] = copy
                if is_container:
                    pending.append((child, copy))
        else:
            for child in source:
                if type(child) in _PLAIN:
                    target.append(child)
                    continue
                copy, is_container = _shell(child)
                target.append(copy)
                if is_container:
                    pending.append((child, copy))
    return result


def _redact_pairs(text: str, *, tagged: bool = False) -> str | None:
    """``name=value&...`` with every secret-named value replaced; None when nothing was.

    ``tagged``: the replacement is :func:`~reproit_otel.wire.standins.text_placeholder` of the
    decoded value (carrying its identity while a capture key is set).
    """
    parts = text.split("&")
    changed = False
    for index, part in enumerate(parts):
        name, equals, value = part.partition("=")
        if (
            equals
            and value
            and value != TEXT_PLACEHOLDER
            and is_secret_key(unquote_plus(name))
            and TEXT_TOKEN.fullmatch(value) is None
        ):
            replacement = text_placeholder(unquote_plus(value)) if tagged else TEXT_PLACEHOLDER
            parts[index] = name + "=" + replacement
            changed = True
    return "&".join(parts) if changed else None


def redact_form(text: str) -> str:
    """An ``application/x-www-form-urlencoded`` text with secret-named values replaced.

    Names are percent-decoded (``+`` as space) before the secret-key test; every other byte
    stays as it was. While a capture key is set the replacement carries the value's identity
    (``password=$reproit.alnum.7.<id>``, :func:`~reproit_otel.wire.standins.text_placeholder`).
    """
    return _redact_pairs(text, tagged=True) or text


def _redact_user_info(url: str) -> str:
    """``url`` with the user name (and password) of its authority replaced."""
    scheme_end = url.find("://")
    if scheme_end <= 0:
        return url
    start = scheme_end + 3
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if 0 <= found < end:
            end = found
    at = url.rfind("@", start, end)
    if at <= start:
        return url
    user, colon, password = url[start:at].partition(":")
    if colon:  # a user name beside a password names someone: only the password goes
        info = user + colon + (TEXT_PLACEHOLDER if password else "")
    else:  # a user name alone is how tokens ride in URLs (https://ghp_...@github.com)
        info = TEXT_PLACEHOLDER if user else ""
    return url[:start] + info + url[at:]


@lru_cache(maxsize=1024)  # replay redacts each live URL twice: the probe, then the matcher
def redact_url(url: str) -> str:
    """``url`` with secret-named query and fragment values and its user info replaced (D8).

    The query is the text between the first ``?`` and the fragment's ``#``; parameters in the
    query and in the fragment are separated by ``&`` and a name is percent-decoded (``+`` as
    space) before the secret-key test. A parameter without ``=`` or with an empty value is
    kept as it is. In the user info before the host of ``scheme://`` a password is replaced,
    and so is a user name that has no password beside it (a token).
    """
    url = _redact_user_info(url)
    hash_at = url.find("#")
    head = url if hash_at < 0 else url[:hash_at]
    fragment = "" if hash_at < 0 else url[hash_at + 1 :]
    query_at = head.find("?")
    query = None if query_at < 0 else _redact_pairs(head[query_at + 1 :])
    if query is not None:
        head = head[: query_at + 1] + query
    redacted_fragment = _redact_pairs(fragment) if fragment else None
    if query is None and redacted_fragment is None:
        return url
    if hash_at < 0:
        return head
    return head + "#" + (fragment if redacted_fragment is None else redacted_fragment)


# A ``name=value`` pair of a query or fragment inside free text; the value stops at what
# ends a URL in prose or in a Python repr (quotes, brackets, white space, comma).
_TEXT_PAIR = re.compile(r"(?<=[?&#;])([^=&#;\s'\"?<>()]+)=([^&#;\s'\"<>(),]+)")
_TEXT_USER_INFO = re.compile(r"(?<=://)([^/?#@\s'\"<>()]+)@")


def _text_pair(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    if value == TEXT_PLACEHOLDER or not is_secret_key(unquote_plus(name)):
        return match.group(0)
    tail = value[len(value.rstrip(".:")) :]  # the end of a sentence is not part of the URL
    return f"{name}={TEXT_PLACEHOLDER}{tail}"


def redact_urls_in_text(text: str) -> str:
    """``text`` with every URL in it redacted as :func:`redact_url` would (D8).

    For prose that names URLs (``Max retries exceeded with url: /v1?api_key=...``): a
    ``name=value`` after ``?``, ``&``, ``#`` or ``;`` whose name is secret has its value
    replaced, and the user info after ``://`` becomes ``$reproit``.
    """
    if "=" in text:
        text = _TEXT_PAIR.sub(_text_pair, text)
    if "://" in text:
        text = _TEXT_USER_INFO.sub(TEXT_PLACEHOLDER + "@", text)
    return text


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


def _strings_mapped(
    value: Any, leaf: Callable[[str], Any], key: Callable[[str], str] | None = None
) -> Any:
    """A copy of the JSON ``value`` with ``leaf`` applied to every string (and ``key`` to
    every string key, when given). A placeholder this process made holds no value and is kept
    as it is. Tuples come back as lists. Walks iteratively (deep values do not recurse)."""

    def copy(child: Any) -> tuple[Any, bool]:
        if isinstance(child, str):
            return leaf(child), False
        if type(child) is _MadeHere:
            return child, False
        if isinstance(child, Mapping):
            return {}, True
        if isinstance(child, (list, tuple)):
            return [], True
        return child, False

    root, is_container = copy(value)
    pending: list[tuple[Any, Any]] = [(value, root)] if is_container else []
    while pending:
        source, target = pending.pop()
        items = source.items() if isinstance(source, Mapping) else enumerate(source)
        for name, child in items:
            duplicate, nested = copy(child)
            if nested:
                pending.append((child, duplicate))
            if isinstance(target, dict):
                renamed = key(name) if key is not None and isinstance(name, str) else name
                target[renamed] = duplicate
            else:
                target.append(duplicate)
    return root


def scrub_value(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of the JSON ``value`` with :func:`scrub_secret_values` applied to every string.

    Object keys are left alone (key names are what :func:`redact` looks at). Tuples come back
    as lists. Without a usable secret the value is returned as it is. Walks iteratively.
    """
    pattern = _pattern_for(secrets)
    if pattern is None:
        return value
    return _strings_mapped(value, lambda text: pattern.sub(TEXT_PLACEHOLDER, text))


def placehold_equal(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of the JSON ``value`` where every string equal to one of ``secrets`` is its
    :func:`placeholder` (with its keyed identity while a capture key is set).

    A capture links this way the other appearances of a credential it redacted elsewhere (the
    token of an ``Authorization`` header that the application looks up as a SQL parameter of a
    column whose name says nothing): replay's stand-in for the header then meets a recorded
    placeholder of the same identity. Strings that only *contain* a secret are left to
    :func:`scrub_value`. Without a secret the value is returned as it is.
    """
    wanted = frozenset(secret for secret in secrets if len(secret) >= MIN_SECRET_LENGTH)
    if not wanted:
        return value
    return _strings_mapped(value, lambda text: placeholder(text) if text in wanted else text)


def scrub_keys_and_values(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of the JSON ``value`` with secret values replaced in every string, keys too.

    Uses :func:`scrub_secret_values` (values shorter than four
    code points are ignored). Tuples come back as lists.
    """
    usable = tuple(secrets)
    if not usable:
        return value

    def scrub(text: str) -> str:
        return scrub_secret_values(text, usable)

    return _strings_mapped(value, scrub, scrub)
