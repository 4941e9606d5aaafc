"""Redaction of request header values as text, keeping their syntax (decision D8).

The decoded input replaces a secret header (``cookie``, ``authorization``...) by a placeholder
object as a whole. The exact request a replay sends needs the header itself, so
:func:`redact_header` replaces only the secret part of the value and keeps the rest, with a
text placeholder (:func:`~reproit_otel.wire.standins.text_placeholder`, tagged with the
secret's identity while a capture key is set):

* ``Cookie``: the value of each cookie pair that looks like a credential: its name is secret
  (:func:`~reproit_otel.redaction.core.is_secret_key`) or names a session, a login or a
  remember-me token (``session``, ``sid``, ``auth``, ``remember``, ``login``), or the value is
  at least :data:`OPAQUE_COOKIE_LENGTH` characters long (session ids and signed cookies are
  long, preferences are short). Cookie names, the other pairs and the separators are kept::

      redact_header("Cookie", "theme=dark; sessionid=k2j3...")
      # "theme=dark; sessionid=$reproit.alnum.32.<id>"

* ``Authorization`` and ``Proxy-Authorization``: the credential after the scheme
  (``Bearer $reproit...``, ``Basic $reproit...``); a value without a scheme goes whole;
* any other header whose name is secret (``X-Api-Key``, ``X-CSRFToken``): the whole value.

Every other header comes back unchanged. :func:`header_credentials` names the same secret
parts, so a capture can link their other appearances (a SQL parameter holding the token of
the ``Authorization`` header) to the same identity.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from reproit_otel.redaction.core import is_secret_key
from reproit_otel.wire.standins import TEXT_TOKEN, text_placeholder

__all__ = ["OPAQUE_COOKIE_LENGTH", "header_credentials", "redact_cookie", "redact_header"]

OPAQUE_COOKIE_LENGTH: Final = 20
"""A cookie value at least this long is taken for a credential whatever its name."""

_COOKIE_CREDENTIAL_NAME = re.compile(r"sess|sid|auth|remember|login|user", re.IGNORECASE)
_AUTHORIZATION = frozenset({"authorization", "proxy-authorization"})


def _secret_text(value: str) -> str:
    if not value or TEXT_TOKEN.fullmatch(value) is not None:
        return value
    return text_placeholder(value)


def _credential_cookie(name: str, value: str) -> bool:
    return (
        is_secret_key(name)
        or _COOKIE_CREDENTIAL_NAME.search(name) is not None
        or len(value) >= OPAQUE_COOKIE_LENGTH
    )


def redact_cookie(value: str) -> str:
    """A ``Cookie`` header value with the value of every credential-like pair replaced."""
    return _cookie_with(value, _secret_text)


def _cookie_with(value: str, replace: Callable[[str], str]) -> str:
    pairs = value.split(";")
    for index, pair in enumerate(pairs):
        name, equals, cookie = pair.partition("=")
        if not equals:
            continue
        stripped = cookie.strip()
        quoted = len(stripped) >= 2 and stripped[0] == stripped[-1] == '"'
        inner = stripped[1:-1] if quoted else stripped
        if not inner or not _credential_cookie(name.strip(), inner):
            continue
        replaced = replace(inner)
        if quoted:
            replaced = f'"{replaced}"'
        lead = cookie[: len(cookie) - len(cookie.lstrip())]
        trail = cookie[len(cookie.rstrip()) :]
        pairs[index] = f"{name}={lead}{replaced}{trail}"
    return ";".join(pairs)


def redact_header(name: str, value: str) -> str:
    """The value of request header ``name`` with its secret part replaced (see module)."""
    return _header_with(name, value, _secret_text)


def header_credentials(name: str, value: str) -> list[str]:
    """The secret parts :func:`redact_header` replaces in the value of header ``name``."""
    found: list[str] = []

    def keep(secret: str) -> str:
        if secret and TEXT_TOKEN.fullmatch(secret) is None:
            found.append(secret)
        return secret

    _header_with(name, value, keep)
    return found


def _header_with(name: str, value: str, replace: Callable[[str], str]) -> str:
    lowered = name.lower()
    if lowered == "cookie":
        return _cookie_with(value, replace)
    if lowered in _AUTHORIZATION:
        scheme, space, credential = value.strip().partition(" ")
        if space and credential.strip():
            return f"{scheme} {replace(credential.strip())}"
        return replace(value)
    if is_secret_key(lowered):
        return replace(value)
    return value
