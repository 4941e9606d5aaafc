"""Redaction of free text: every string that leaves the process and may name a secret (D8).

Structural redaction sees the keys of a JSON value; an error message, a database error, a
failure report or a log line is prose, where a secret rides beside the name that marks it.
:func:`scrub_text` applies every text rule of :data:`TEXT_RULES`, in that order, to such a
string. The rules are one table (``docs/recording.md`` lists it):

=====================  ==========================================================================
rule                   example (before, then after)
=====================  ==========================================================================
secret values          ``token sk_live_1234 expired`` -> ``token $reproit expired`` (configured
                       values, and the originals of values redacted elsewhere in the operation)
authorization scheme   ``Bearer eyJhbGciOi`` -> ``Bearer $reproit`` (``Basic`` too)
URL user info          ``postgresql://admin:pw@db/app`` -> ``postgresql://$reproit@db/app``
quoted key and value   ``{'password': 'pw'}`` / ``{"api_key": "k"}`` -> value ``$reproit``
name=value             ``password=pw`` / ``password='pw'`` / ``?token=abc&x=1`` -> ``$reproit``
name: value            ``token: abc`` / ``X-Api-Key: abc`` -> ``token: $reproit``
key detail             ``Key (email)=(a@b.c) already exists`` -> ``Key (email)=($reproit)``
=====================  ==========================================================================

A name is secret by :func:`~reproit_otel.redaction.core.is_secret_key`. Values shorter than
:data:`~reproit_otel.redaction.core.MIN_SECRET_LENGTH` are not replaced as secret values (they
would scrub ordinary text); the name rules replace whatever value a secret name carries. A
PostgreSQL echo (``Failing row contains (5, a@b.c, pw)``) is scrubbed by the secret-value rule
with the original values the statement's redaction hid, which is why scrubbing needs the
originals, never the placeholders.

Everything here is pure: no OpenTelemetry import, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

from reproit_otel.redaction.core import (
    TEXT_PLACEHOLDER,
    is_secret_key,
    scrub_secret_values,
)

__all__ = ["TEXT_RULES", "TextRule", "scrub_text"]


class TextRule(NamedTuple):
    """One rule of :func:`scrub_text`: its name, an example and what it does to a text."""

    name: str
    example: str
    apply: Callable[[str], str]


_P = TEXT_PLACEHOLDER

# Bearer in any case; Basic capitalised or upper case (a lower-case "basic" is prose) and then
# only before what base64 of user:password can be.
_SCHEME = re.compile(
    r"\b(?P<scheme>[Bb]earer|BEARER)(?P<gap>[ \t]+)(?P<value>[A-Za-z0-9\-._~+/$]+=*)"
    r"|\b(?P<basic>Basic|BASIC)(?P<bgap>[ \t]+)(?P<b64>[A-Za-z0-9+/]{4,}={0,2})(?![^\s,;'\"])"
)


def _scheme(match: re.Match[str]) -> str:
    if match.group("basic"):
        return f"{match.group('basic')}{match.group('bgap')}{_P}"
    if match.group("value") == _P:
        return match.group(0)
    return f"{match.group('scheme')}{match.group('gap')}{_P}"


def _authorization(text: str) -> str:
    if "earer" not in text and "EARER" not in text and "asic" not in text and "ASIC" not in text:
        return text
    return _SCHEME.sub(_scheme, text)


_USER_INFO = re.compile(r"(?<=://)(?P<info>[^/?#@\s'\"<>()]+)@")


def _user_info(text: str) -> str:
    if "://" not in text:
        return text
    return _USER_INFO.sub(_P + "@", text)


# 'password': 'pw'   "api_key": "k"   'pin': 1234   "token":"a\"b"
_QUOTED = re.compile(
    r"(?P<q>['\"])(?P<name>[^'\"\n]{1,128})(?P=q)(?P<sep>\s*[:=]\s*)"
    r"(?:(?P<vq>['\"])(?P<quoted>(?:\\.|(?!(?P=vq))[^\\\n]){0,4096})(?P=vq)|(?P<bare>[^\s,}\])'\"]+))"
)


def _quoted_pair(match: re.Match[str]) -> str:
    if not is_secret_key(match.group("name")):
        return match.group(0)
    value = match.group("quoted") if match.group("vq") else match.group("bare")
    if value in (_P, "None", "null") or value == "":
        return match.group(0)
    head = match.group("q") + match.group("name") + match.group("q") + match.group("sep")
    quote = match.group("vq") or ""
    return f"{head}{quote}{_P}{quote}"


def _quoted(text: str) -> str:
    if "'" not in text and '"' not in text:
        return text
    return _QUOTED.sub(_quoted_pair, text)


# password=pw  password='p w'  User(token="abc")  ?token=abc&x=1 (the URL rule of core too)
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.%+\-\[\]])(?P<name>[A-Za-z0-9_.%+\-\[\]]{1,128})=(?:(?P<vq>['\"])(?P<quoted>(?:\\.|(?!(?P=vq))[^\\\n]){0,4096})(?P=vq)"
    r"|(?P<bare>[^&\s#'\"<>;,)]+))"
)


def _pair(match: re.Match[str]) -> str:
    value = match.group("quoted") if match.group("vq") else match.group("bare")
    if value == _P or not value or not is_secret_key(match.group("name")):
        return match.group(0)
    quote = match.group("vq") or ""
    if not quote:
        tail = value[len(value.rstrip(".:")) :]  # the end of a sentence is not the value
        return f"{match.group('name')}={_P}{tail}"
    return f"{match.group('name')}={quote}{_P}{quote}"


def _pairs(text: str) -> str:
    if "=" not in text:
        return text
    return _PAIR.sub(_pair, text)


# token: abc   X-Api-Key: abc   password : hunter2   (an authorization scheme is its own rule)
_COLON = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<name>[A-Za-z][A-Za-z0-9_.\-]{0,63})(?P<sep>[ \t]*:[ \t]*)"
    r"(?!(?:[Bb]earer|BEARER|Basic|BASIC)[ \t])(?P<value>[^\s,;'\"(){}\[\]]+)"
)


def _colon(match: re.Match[str]) -> str:
    value = match.group("value")
    if value == _P or value.startswith("//") or not is_secret_key(match.group("name")):
        return match.group(0)
    tail = value[len(value.rstrip(".")) :]
    return f"{match.group('name')}{match.group('sep')}{_P}{tail}"


def _colons(text: str) -> str:
    if ":" not in text:
        return text
    return _COLON.sub(_colon, text)


_KEY_DETAIL = re.compile(
    r"Key \(([^()\n]{1,512})\)=\(([^\n]{0,256}?)\)(?= already exists| is not present|\.|$)"
)


def _key_detail(match: re.Match[str]) -> str:
    columns = [c.strip().strip('"') for c in match.group(1).split(",")]
    if any(is_secret_key(column) for column in columns):
        return f"Key ({match.group(1)})=({_P})"
    return match.group(0)


def _key_details(text: str) -> str:
    if "Key (" not in text:
        return text
    return _KEY_DETAIL.sub(_key_detail, text)


TEXT_RULES: Final[tuple[TextRule, ...]] = (
    TextRule("authorization scheme", "Bearer eyJhb -> Bearer $reproit", _authorization),
    TextRule("URL user info", "postgresql://admin:pw@db -> postgresql://$reproit@db", _user_info),
    TextRule("quoted key and value", "{'password': 'pw'} -> {'password': '$reproit'}", _quoted),
    TextRule("name=value", "password=pw, token='pw', ?api_key=k&x=1 -> $reproit", _pairs),
    TextRule("name: value", "token: abc, X-Api-Key: abc -> $reproit", _colons),
    TextRule("key detail", "Key (email)=(a@b.c) -> Key (email)=($reproit)", _key_details),
)
"""The text rules after the secret-value rule, in the order :func:`scrub_text` applies them."""


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret value in ``secrets`` and every rule of :data:`TEXT_RULES`
    applied: what a secret looks like in prose replaced by ``$reproit``.

    ``secrets`` are configured secret values and the original values redaction hid elsewhere
    in the same operation (a statement's parameters that its error text echoes).
    """
    if not isinstance(text, str) or not text:
        return text
    text = scrub_secret_values(text, secrets)
    for rule in TEXT_RULES:
        text = rule.apply(text)
    return text
