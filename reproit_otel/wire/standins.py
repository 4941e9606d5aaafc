"""Stand-ins: what replay sends where production had a secret, and how capture links secrets.

A redacted value is recorded as a placeholder (:mod:`reproit_otel.redaction.core`); replaying
the placeholder itself (a ``{"$reproit": ...}`` object where a string was, or the text
``$reproit`` in a cookie) makes the application fail somewhere production did not. Replay sends a
*stand-in* instead: a value of the same type and shape, made up deterministically.

Identity (capture)
==================

While a capture key is set (:func:`set_identity_key`, a per-process random key the capture
draws at start), every placeholder also carries a keyed *identity* of the secret:
HMAC-SHA256 of the secret's UTF-8 bytes under that key, first 12 bytes as 24 lowercase hex.
The same secret gives the same identity wherever it is redacted in the process (a cookie, an
``Authorization`` header, a form or JSON field, a SQL parameter, an outbound header), so
replay gives all its appearances the same stand-in. The key never leaves the process and is
never derived from a secret: without it an identity tells nothing about the secret and cannot
be used to confirm a guess. Placeholders also name the *character class* of the string they
stand for (:func:`string_class`), so an e-mail address stays an e-mail address::

    {"$reproit": {"redacted": true, "type": "string", "length": 17,
                  "class": "email", "id": "5d0c1f..."}}

In text (headers, form bodies, configured secret values) the placeholder is ``$reproit``; with
an identity it is followed by ``.<class>.<length>.<id>``::

    Cookie: sessionid=$reproit.alnum.32.5d0c1f9a0b6e2d7c4a1f8e03
    Authorization: Bearer $reproit.token.40.9e2b...

Stand-ins (replay)
==================

:func:`materialize` returns a copy of a JSON value where every placeholder object and every
text placeholder is replaced by :func:`standin`: a string of the recorded length and character
class, an integer for an integer, a number with a fraction for a number, a boolean, ``None``,
an array of the recorded length, an empty object. The stand-in is a function of the identity
(or, for a placeholder recorded without one, of its type, length and class), so the same
identity always gives the same stand-in, on every machine.

A replay serves every recorded value through :func:`materialize` (the inbound request ``check``
sends, HTTP response bodies and headers, database rows, invoke and credential outcomes), once,
when the capsule is loaded. So a session key redacted in the ``Cookie`` and again as the
``session_key`` of a served row is one stand-in in both places, and the application's lookup
finds what it looks for.

Stand-ins back to placeholders (matching)
=========================================

A stand-in the application sends on (a served token in an outbound header, a served key as
a SQL parameter) must still match the recording, which holds a placeholder there. A
:class:`StandinIndex` of the capsule knows every stand-in the replay can hand out (every
placeholder object of a string and every text placeholder in it, stand-ins of at least
:data:`MIN_INDEXED_LENGTH` characters) and writes each back as the text placeholder it stands
for in a live call before it is matched: in the values of a call (a body, SQL parameters, an
invoke input) as its tagged placeholder (:meth:`StandinIndex.placeholders`), in what keys a
call (a URL, a statement text) as the bare ``$reproit``, the only one a capture writes there.
The matcher compares text placeholders by :func:`same_identities`: equal once untagged, and
where both sides carry an identity, the same identity.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = [
    "IDENTITY_FIELD",
    "MIN_INDEXED_LENGTH",
    "STRING_CLASSES",
    "TEXT_TOKEN",
    "StandinIndex",
    "current_identity_key",
    "identity",
    "materialize",
    "placeholder_fields",
    "same_identities",
    "served_response",
    "set_identity_key",
    "standin",
    "string_class",
    "text_placeholder",
    "text_standins",
    "untagged",
]

PLACEHOLDER_KEY: Final = "$reproit"
IDENTITY_FIELD: Final = "id"
"""The placeholder body field holding the keyed identity (24 lowercase hex)."""
CLASS_FIELD: Final = "class"
"""The placeholder body field holding the character class of a redacted string."""

STRING_CLASSES: Final[tuple[str, ...]] = (
    "email",
    "uuid",
    "digits",
    "hex",
    "alnum",
    "base64",
    "token",
    "text",
)
"""Character classes of a redacted string, most specific first (see :func:`string_class`)."""

TEXT_TOKEN: Final = re.compile(
    r"\$reproit(?:\.(" + "|".join(STRING_CLASSES) + r")\.([0-9]{1,9})\.([0-9a-f]{24}))?"
)
"""A text placeholder: ``$reproit``, optionally with ``.<class>.<length>.<identity>``."""

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DIGITS = re.compile(r"[0-9]+")
_HEX = re.compile(r"[0-9a-f]+")
_ALNUM = re.compile(r"[A-Za-z0-9]+")
_SCHEMED = re.compile(r"(?:Bearer|Token|Basic|Bot|ApiKey|Key)\s+(\S+)", re.IGNORECASE)
_BASE64 = re.compile(r"[A-Za-z0-9+/=]+")
_TOKEN = re.compile(r"[A-Za-z0-9._~+/=-]+")

_ALPHABETS: Final[dict[str, str]] = {
    "digits": "0123456789",
    "hex": "0123456789abcdef",
    "alnum": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    "base64": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    "token": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    "text": "abcdefghijklmnopqrstuvwxyz",
    "lower": "abcdefghijklmnopqrstuvwxyz",
}

_TEXT_LENGTH: Final = 24
"""The length of a stand-in for a bare ``$reproit`` text placeholder (no length recorded)."""

_key: bytes | None = None


def set_identity_key(key: bytes | None) -> None:
    """Set (or, with None, clear) the per-process key identities are computed with.

    The capture draws it once at start from the operating system's random source; it is never
    written anywhere. Without a key, placeholders carry no identity (the reference wire).
    """
    global _key
    _key = bytes(key) if key is not None else None


def current_identity_key() -> bytes | None:
    """The key set by :func:`set_identity_key`, or None."""
    return _key


def identity(secret: str, key: bytes) -> str:
    """The keyed identity of ``secret``: HMAC-SHA256 under ``key``, 12 bytes as 24 hex."""
    data = secret.encode("utf-8", "surrogatepass")
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:24]


def string_class(text: str) -> str:
    """The most specific of :data:`STRING_CLASSES` that describes every character of ``text``.

    ``email`` (``local@domain.tld``), ``uuid``, ``digits`` (ASCII), ``hex`` (lowercase),
    ``alnum`` (ASCII letters and digits), ``base64`` (those plus ``+ / =``), ``token`` (those
    plus ``. _ ~ -``: JWTs, URL-safe keys) and ``text`` for anything else (and the empty
    string). The stand-in of a ``base64`` string uses letters, digits, ``+`` and ``/``; of a
    ``token``, letters, digits, ``-`` and ``_``.
    """
    if not text:
        return "text"
    if _EMAIL.fullmatch(text):
        return "email"
    if _UUID.fullmatch(text):
        return "uuid"
    for name, pattern in (
        ("digits", _DIGITS),
        ("hex", _HEX),
        ("alnum", _ALNUM),
        ("base64", _BASE64),
    ):
        if pattern.fullmatch(text):
            return name
    return "token" if _TOKEN.fullmatch(text) else "text"


def placeholder_fields(value: Any) -> dict[str, str]:
    """The extra placeholder body fields for ``value`` while a capture key is set.

    ``{"class": ..., "id": ...}`` for a string, ``{"id": ...}`` for a number or boolean (its
    JSON text is what is keyed), nothing otherwise or without a key. A string made of an
    authorization scheme and a credential (``Bearer abc``) is keyed by the credential alone.
    """
    if _key is None:
        return {}
    if isinstance(value, str):
        # "Bearer <token>" (an Authorization header redacted whole, as outbound headers are)
        # is keyed by its credential, so it links with the same token met alone.
        credential = _SCHEMED.fullmatch(value)
        keyed = value if credential is None else credential.group(1)
        return {CLASS_FIELD: string_class(value), IDENTITY_FIELD: identity(keyed, _key)}
    if isinstance(value, bool):
        return {IDENTITY_FIELD: identity("true" if value else "false", _key)}
    if isinstance(value, (int, float)):
        return {IDENTITY_FIELD: identity(repr(value), _key)}
    return {}


def text_placeholder(secret: str) -> str:
    """The text placeholder for ``secret``: ``$reproit``, tagged when a capture key is set."""
    if _key is None:
        return PLACEHOLDER_KEY
    return f"{PLACEHOLDER_KEY}.{string_class(secret)}.{len(secret)}.{identity(secret, _key)}"


def _stream(seed: str) -> Iterator[int]:
    """An endless deterministic byte stream drawn from ``seed``."""
    counter = 0
    while True:
        yield from hashlib.sha256(f"{counter}:{seed}".encode()).digest()
        counter += 1


def _pick(stream: Iterator[int], alphabet: str, count: int) -> str:
    return "".join(alphabet[next(stream) % len(alphabet)] for _ in range(count))


def _string_standin(stream: Iterator[int], kind: str, length: int) -> str:
    if kind == "email" and length >= 5:
        # local@domain.tld keeping the length: a two-letter domain ending where it fits.
        tld = 2 if length >= 7 else 1
        rest = length - tld - 2  # the "@" and the "."
        local = max(1, (rest + 1) // 2)
        domain = rest - local
        return (
            _pick(stream, _ALPHABETS["lower"], local)
            + "@"
            + _pick(stream, _ALPHABETS["lower"], domain)
            + "."
            + _pick(stream, _ALPHABETS["lower"], tld)
        )
    if kind == "uuid" and length == 36:
        raw = _pick(stream, _ALPHABETS["hex"], 32)
        return f"{raw[:8]}-{raw[8:12]}-4{raw[13:16]}-a{raw[17:20]}-{raw[20:]}"
    alphabet = _ALPHABETS.get(kind, _ALPHABETS["alnum"])
    if kind in ("email", "uuid"):
        alphabet = _ALPHABETS["alnum"]
    return _pick(stream, alphabet, length)


def standin(body: Mapping[str, Any]) -> Any:
    """The stand-in for one placeholder body (``{"redacted": true, "type": ..., ...}``).

    Deterministic: a function of the identity when the body has one, else of its type, length
    and class. Types: ``string`` (the recorded length, default 24, and class, default
    ``alnum``), ``integer``, ``number`` (with a fraction), ``boolean``, ``null``, ``array``
    (that many stand-in strings), ``object`` (empty). An unknown type gives a string.
    """
    kind = body.get("type")
    length = body.get("length")
    text_class = body.get(CLASS_FIELD)
    ident = body.get(IDENTITY_FIELD)
    if not isinstance(text_class, str) or text_class not in STRING_CLASSES:
        text_class = "alnum"
    if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= 1 << 20:
        length = None
    seed = ident if isinstance(ident, str) and ident else f"{kind}/{length}/{text_class}"
    stream = _stream(seed)
    if kind == "null":
        return None
    if kind == "boolean":
        return next(stream) % 2 == 0
    if kind == "integer":
        return 100000 + int.from_bytes(bytes(next(stream) for _ in range(4)), "big") % 900000
    if kind == "number":
        whole = 1 + int.from_bytes(bytes(next(stream) for _ in range(2)), "big") % 9999
        return whole + (1 + next(stream) % 99) / 100
    if kind == "object":
        return {}
    if kind == "array":
        count = length if length is not None and length <= 1024 else 0
        return [_string_standin(stream, "alnum", 8) for _ in range(count)]
    return _string_standin(stream, text_class, _TEXT_LENGTH if length is None else length)


def _text_standin(match: re.Match[str]) -> str:
    kind, length, ident = match.group(1), match.group(2), match.group(3)
    if ident is None:
        return str(standin({"type": "string"}))
    return str(
        standin({"type": "string", "length": int(length), CLASS_FIELD: kind, IDENTITY_FIELD: ident})
    )


def text_standins(text: str) -> str:
    """``text`` with every text placeholder (tagged or bare) replaced by its stand-in."""
    if PLACEHOLDER_KEY not in text:
        return text
    return TEXT_TOKEN.sub(_text_standin, text)


def untagged(text: str) -> str:
    """``text`` with every tagged text placeholder written as the bare ``$reproit``."""
    if PLACEHOLDER_KEY not in text:
        return text
    return TEXT_TOKEN.sub(PLACEHOLDER_KEY, text)


def _is_placeholder(value: Any) -> bool:
    if not isinstance(value, Mapping) or len(value) != 1:
        return False
    body = value.get(PLACEHOLDER_KEY)
    return isinstance(body, Mapping) and body.get("redacted") is True


def _convert(value: Any) -> tuple[Any, bool]:
    if _is_placeholder(value):
        return standin(value[PLACEHOLDER_KEY]), False
    if isinstance(value, str):
        return text_standins(value), False
    if isinstance(value, Mapping):
        return {}, True
    if isinstance(value, (list, tuple)):
        return [], True
    return value, False


def materialize(value: Any) -> Any:
    """A copy of the JSON ``value`` with every placeholder replaced by its stand-in.

    Placeholder objects (``{"$reproit": {"redacted": true, ...}}``) at any depth become
    :func:`standin` values; inside every string, each text placeholder (``$reproit``, tagged
    or not) becomes a stand-in string. Object keys, other values and the shape are kept; the
    input is not changed. Walks iteratively (deep values do not exhaust the stack).
    """
    result, is_container = _convert(value)
    pending: list[tuple[Any, Any]] = [(value, result)] if is_container else []
    while pending:
        source, target = pending.pop()
        pairs = source.items() if isinstance(source, Mapping) else enumerate(source)
        for key, child in pairs:
            copy, is_container = _convert(child)
            if isinstance(target, dict):
                target[key] = copy
            else:
                target.append(copy)
            if is_container:
                pending.append((child, copy))
    return result


def served_response(response: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded exchange ``response`` as replay serves it: every field :func:`materialize`-d
    (body, headers, rows, outcome data), except ``error``.

    A recorded error is raised again with its message as recorded: the message is for people
    reading a traceback, where ``$reproit`` says that something was redacted there.
    """
    return {
        name: value if name == "error" else materialize(value) for name, value in response.items()
    }


MIN_INDEXED_LENGTH: Final = 8
"""Stand-ins shorter than this are not written back in live calls: a short made-up string
could also be ordinary text (``"abc1"`` inside a statement), and replacing that would make a
call diverge that production made the same way."""


def _text_token(body: Mapping[str, Any]) -> str:
    """The text placeholder a placeholder body of a string is written as in text."""
    ident, kind, length = body.get(IDENTITY_FIELD), body.get(CLASS_FIELD), body.get("length")
    if (
        isinstance(ident, str)
        and TEXT_TOKEN.fullmatch(f"{PLACEHOLDER_KEY}.{kind}.{length}.{ident}") is not None
    ):
        return f"{PLACEHOLDER_KEY}.{kind}.{length}.{ident}"
    return PLACEHOLDER_KEY


class StandinIndex:
    """The stand-ins a replay of one capsule hands out, and the placeholders they stand for.

    Built once from the whole capsule (:func:`materialize` gives every appearance of one
    placeholder the same stand-in, so the index holds each once). Read-only afterwards: safe
    to share between threads.
    """

    __slots__ = ("_pattern", "_tokens")

    def __init__(self, capsule: Any) -> None:
        tokens: dict[str, str] = {}
        pending: list[Any] = [capsule]
        while pending:
            value = pending.pop()
            if _is_placeholder(value):
                body = value[PLACEHOLDER_KEY]
                made = standin(body)
                if isinstance(made, str):  # a string's (numbers are not found in text)
                    tokens.setdefault(made, _text_token(body))
            elif isinstance(value, str):
                if PLACEHOLDER_KEY in value:
                    for match in TEXT_TOKEN.finditer(value):
                        tokens.setdefault(_text_standin(match), match.group(0))
            elif isinstance(value, Mapping):
                pending.extend(value.values())
            elif isinstance(value, (list, tuple)):
                pending.extend(value)
        self._tokens = {
            made: token for made, token in tokens.items() if len(made) >= MIN_INDEXED_LENGTH
        }
        self._pattern = (
            re.compile("|".join(map(re.escape, sorted(self._tokens, key=lambda s: (-len(s), s)))))
            if self._tokens
            else None
        )

    def __len__(self) -> int:
        return len(self._tokens)

    def placeholder_text(self, text: str, *, tagged: bool = True) -> str:
        """``text`` with every stand-in of the index written as the placeholder it stands for
        (``tagged=False``: as the bare ``$reproit``, what a capture's value scrub writes)."""
        if self._pattern is None or not text:
            return text
        if not tagged:
            return self._pattern.sub(PLACEHOLDER_KEY, text)
        return self._pattern.sub(lambda match: self._tokens[match.group(0)], text)

    def placeholders(self, value: Any) -> Any:
        """A copy of the JSON ``value`` with :meth:`placeholder_text` applied to every string
        (object keys untouched); ``value`` itself when the index is empty."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.placeholder_text(value)
        if not isinstance(value, (Mapping, list, tuple)):
            return value
        root: Any = {} if isinstance(value, Mapping) else []
        pending: list[tuple[Any, Any]] = [(value, root)]
        while pending:
            source, target = pending.pop()
            pairs = source.items() if isinstance(source, Mapping) else enumerate(source)
            for key, child in pairs:
                copy = child
                if isinstance(child, str):
                    copy = self.placeholder_text(child)
                elif isinstance(child, (Mapping, list, tuple)):
                    copy = {} if isinstance(child, Mapping) else []
                    pending.append((child, copy))
                if isinstance(target, dict):
                    target[key] = copy
                else:
                    target.append(copy)
        return root


def same_identities(want: str, got: str) -> bool:
    """Two texts equal once their text placeholders are untagged, whose placeholders, where
    both carry an identity, carry the same one (``$reproit`` agrees with any)."""
    if untagged(want) != untagged(got):
        return False
    if "." not in want or "." not in got:
        return True
    wanted = [match.group(3) for match in TEXT_TOKEN.finditer(want)]
    found = [match.group(3) for match in TEXT_TOKEN.finditer(got)]
    return len(wanted) == len(found) and all(
        a is None or b is None or a == b for a, b in zip(wanted, found, strict=True)
    )
