"""Who may read the ingest's web page: read keys, and the session cookie a browser keeps.

The page accepts any ingest key (``--api-key``) and any read-only key (``--read-key``,
``$REPROIT_INGEST_READ_KEYS``). A client proves it holds one of them in either way:

* ``Authorization: Bearer KEY`` on the request (scripts, ``curl``);
* the ``reproit_session`` cookie set by the sign-in form (``POST /login`` with the key).

The cookie never carries the key. It is ``<issued epoch s>.<HMAC-SHA256(key, issued)>``: the
ingest recomputes the MAC with each accepted key, so the cookie works on every instance that
shares the keys, stops working the moment its key is removed, and expires after
:data:`SESSION_SECONDS`. It is ``HttpOnly`` (page scripts cannot read it), ``SameSite=Lax``
(a link from an alert still opens the page signed in; other sites cannot post with it),
``Path=/`` and ``Secure`` when the page is served over HTTPS.

The page always requires a key. An ingest started with no key at all (a developer's laptop)
still accepts batches and answers the occurrence API, but its page only explains how to
restart ``reproit-otel serve`` with ``--api-key`` or ``--read-key``: the page shows captured
production data, so it is never served to whoever asks.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Collection, Mapping

from reproit_otel.ingest.numbers import ascii_int

__all__ = ["COOKIE_NAME", "SESSION_SECONDS", "ReadKeys"]

COOKIE_NAME = "reproit_session"
SESSION_SECONDS = 12 * 3600
_CONTEXT = b"reproit-otel web session v1:"


def _mac(key: str, issued: int) -> str:
    return hmac.new(
        key.encode("utf-8"), _CONTEXT + str(issued).encode(), hashlib.sha256
    ).hexdigest()


class ReadKeys:
    """The keys that may read, and the checks of a bearer header or a session cookie."""

    def __init__(self, keys: Collection[str], *, clock: Callable[[], float] = time.time) -> None:
        self.keys = tuple(dict.fromkeys(key for key in keys if key))
        self._clock = clock

    @property
    def configured(self) -> bool:
        """At least one key is configured (without one, nobody may read the page)."""
        return bool(self.keys)

    def _now(self) -> int:
        return int(self._clock())

    def accepts(self, candidate: str) -> bool:
        """Whether ``candidate`` is one of the keys (constant-time per key)."""
        given = candidate.encode("utf-8")
        return any(hmac.compare_digest(given, key.encode("utf-8")) for key in self.keys)

    def session_for(self, key: str) -> str:
        """A fresh cookie value for an accepted ``key``."""
        issued = self._now()
        return f"{issued}.{_mac(key, issued)}"

    def session_valid(self, cookie: str) -> bool:
        """Whether a cookie value was issued with a current key and has not expired."""
        issued_text, _, mac = cookie.partition(".")
        issued = ascii_int(issued_text, high=2**40)  # a 5,000-digit or "²" cookie is no session
        if issued is None or len(mac) != 64:
            return False
        now = self._now()
        if issued > now + 60 or now - issued > SESSION_SECONDS:
            return False
        return any(hmac.compare_digest(mac, _mac(key, issued)) for key in self.keys)

    def allowed(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> bool:
        """Whether a request with these headers and cookies may read."""
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token.strip() and self.accepts(token.strip()):
            return True
        cookie = cookies.get(COOKIE_NAME)
        return bool(cookie) and self.session_valid(str(cookie))
