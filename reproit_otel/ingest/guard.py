"""What the ingest checks before a request reaches a route: host, origin, guesses, slow bodies.

:class:`RequestGuard` wraps the ingest's ASGI application (``reproit-otel serve`` installs
it) and answers, before any route runs:

* ``403 host`` when the ``Host`` header names no allowed host (DNS rebinding: a page on
  ``evil.example`` whose name was re-pointed at ``127.0.0.1`` sends ``Host: evil.example``).
  The allowed hosts are given by ``serve`` (the bind address, ``localhost``, ``127.0.0.1``,
  ``[::1]``, the host of ``--public-url`` and every ``--allowed-host``); any port is accepted.
  ``/healthz`` is exempt (it tells nothing, and probes address pods by IP).
* ``403 origin`` for a request that changes something (any method but ``GET``/``HEAD``)
  sent by a browser page of another site: ``Sec-Fetch-Site: cross-site``, or, from a browser
  that does not send ``Sec-Fetch-Site``, an ``Origin`` whose host is not allowed (``Origin:
  null``, which the page's own forms send under ``Referrer-Policy: no-referrer``, says
  nothing either way).
* ``429 auth-rate`` for every request of a client address that failed authentication
  :data:`FAILED_AUTH_LIMIT` times within :data:`FAILED_AUTH_WINDOW_S` seconds, until the
  oldest of those failures leaves the window (``Retry-After`` says when). A failure is an
  answer of ``401`` to a request that presented a credential (a bearer key, a session
  cookie, the sign-in form); opening the page without one is not counted.
* ``408 body-timeout`` when the client sends no part of the request body for
  ``body_timeout`` seconds.

Everything runs on the event loop, so the bookkeeping needs no lock; at most
:data:`MAX_TRACKED_CLIENTS` client addresses are remembered (the oldest are forgotten).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "FAILED_AUTH_LIMIT",
    "FAILED_AUTH_WINDOW_S",
    "MAX_TRACKED_CLIENTS",
    "RequestGuard",
    "host_name",
]

FAILED_AUTH_LIMIT: Final = 10
"""Failed authentications a client address may make within the window."""
FAILED_AUTH_WINDOW_S: Final = 60.0
"""The window over which failed authentications are counted."""
MAX_TRACKED_CLIENTS: Final = 10_000
"""Client addresses remembered for the failed-authentication limit."""

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_EXEMPT_PATHS = frozenset({"/healthz"})


def host_name(value: str) -> str:
    """The host of a ``Host`` header or an origin's authority: lowercased, without the port
    (``[::1]:8765`` gives ``[::1]``, ``Example.COM.`` gives ``example.com``)."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    return value.rsplit(":", 1)[0].rstrip(".") if value.count(":") == 1 else value.rstrip(".")


def _refusal(status: int, rule: str, field: str, message: str) -> tuple[bytes, int]:
    body = {"error": {"rule": rule, "field": field, "message": message}}
    return json.dumps(body).encode(), status


class RequestGuard:
    """The ASGI middleware described in the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Collection[str] | None,
        body_timeout: float | None = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        # None: every host is accepted (``--allowed-host '*'``).
        self.allowed_hosts = (
            None if allowed_hosts is None else frozenset(host_name(h) for h in allowed_hosts)
        )
        self.body_timeout = body_timeout
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    # -- checks ------------------------------------------------------------------------------

    def _host_allowed(self, host: str) -> bool:
        return self.allowed_hosts is None or host_name(host) in self.allowed_hosts

    def _refused(self, scope: Scope, headers: dict[bytes, bytes]) -> tuple[bytes, int] | None:
        path = scope.get("path", "")
        if path in _EXEMPT_PATHS:
            return None
        host = headers.get(b"host", b"").decode("latin-1")
        if not self._host_allowed(host):
            return _refusal(
                403,
                "host",
                "host",
                f"this ingest does not answer for the host {host!r}; start it with "
                "--allowed-host or --public-url naming the address clients use",
            )
        if scope.get("method") not in _SAFE_METHODS:
            origin = headers.get(b"origin", b"").decode("latin-1")
            fetch_site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
            authority = origin.partition("://")[2]
            if fetch_site:  # a browser says where the request comes from
                cross = fetch_site == "cross-site"
            else:  # an older one names the page's origin ("null" under no-referrer: unknown)
                cross = bool(authority) and not self._host_allowed(authority)
            if cross:
                return _refusal(
                    403,
                    "origin",
                    "origin",
                    f"a page of another site ({origin or 'cross-site'}) may not write to this "
                    "ingest",
                )
        return None

    def _recent_failures(self, client: str) -> deque[float] | None:
        failures = self._failures.get(client)
        if failures is None:
            return None
        cutoff = self._clock() - FAILED_AUTH_WINDOW_S
        while failures and failures[0] <= cutoff:
            failures.popleft()
        if not failures:
            del self._failures[client]
            return None
        return failures

    def _note_failure(self, client: str) -> None:
        failures = self._failures.pop(client, None) or deque()
        failures.append(self._clock())
        while len(failures) > FAILED_AUTH_LIMIT:
            failures.popleft()
        self._failures[client] = failures  # most recent last
        while len(self._failures) > MAX_TRACKED_CLIENTS:
            self._failures.popitem(last=False)

    # -- the middleware ----------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        refused = self._refused(scope, headers)
        client_info = scope.get("client")
        client = str(client_info[0]) if client_info else ""
        failures = self._recent_failures(client) if client else None
        extra: list[tuple[bytes, bytes]] = []
        limited = failures is not None and len(failures) >= FAILED_AUTH_LIMIT
        if refused is None and limited and scope.get("path", "") not in _EXEMPT_PATHS:
            assert failures is not None
            wait = max(1, math.ceil(failures[0] + FAILED_AUTH_WINDOW_S - self._clock()))
            refused = _refusal(
                429,
                "auth-rate",
                "authorization",
                f"{FAILED_AUTH_LIMIT} failed authentications from {client} within "
                f"{int(FAILED_AUTH_WINDOW_S)} s; retry in {wait} s with the right key",
            )
            extra.append((b"retry-after", str(wait).encode()))
        if refused is not None:
            body, status = refused
            await _respond(send, status, body, extra)
            return
        await self._forward(scope, receive, send, client)

    async def _forward(self, scope: Scope, receive: Receive, send: Send, client: str) -> None:
        started = False
        body_done = False

        async def watched_receive() -> Message:
            nonlocal body_done
            if body_done or self.body_timeout is None:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout)
            except asyncio.TimeoutError:
                raise _BodyTimeout from None
            if message.get("type") != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if client and _is_failed_auth(scope, message):
                    self._note_failure(client)
            await send(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        except _BodyTimeout:
            if started:
                raise
            body, status = _refusal(
                408,
                "body-timeout",
                "body",
                f"no part of the request body arrived for {self.body_timeout:g} s",
            )
            await _respond(send, status, body, [(b"connection", b"close")])


class _BodyTimeout(Exception):
    pass


def _is_failed_auth(scope: Scope, start: Message) -> bool:
    """A refused credential: a ``401`` to a request that presented one (a bearer key, a
    session cookie, the sign-in form). Opening the page without one is no guess."""
    if start.get("status") != 401:
        return False
    if scope.get("method") == "POST" and scope.get("path") == "/login":
        return True
    for name, value in scope.get("headers") or ():
        if name == b"authorization" or (name == b"cookie" and b"reproit_session=" in value):
            return True
    return False


async def _respond(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | Any = ()
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
