"""What a recorded psycopg2 connection learned when it was set up, carried into later captures.

A pooled connection is opened and set up once (SQLAlchemy's dialect asks the server version,
the schema, ``standard_conforming_strings``; Django sets ``TimeZone``) and then serves many
requests. A failure on a warm connection therefore records none of those answers, and a
replay, which opens a new connection inside the request, would only have documented
defaults for them. So each recorded connection keeps, bounded, the answers of its
connection-scope statements that carry information (``SET``/``SHOW``/``set_config``/
``current_setting``, version, schema and ``pg_type`` probes; see
:mod:`reproit_otel.wire.statements`), whether they ran outside any operation (at boot) or
inside an earlier one. The first statement a later operation records on that connection
carries them in its exchange as ``setup``::

    exchange = {"protocol": "pg", "request": ..., "response": ...,
                "setup": [{"protocol": "pg", "request": {...}, "response": {...}}, ...]}

Replay answers connection-scope statements from them (never consuming anything). The
exchange stays a valid ``pg`` exchange: ``setup`` is one more member of the replayable value.

Bounds: :data:`~reproit_otel.wire.connection_setup.MAX_SETUP_ANSWERS` statements per
connection (the latest answer per statement), :data:`~reproit_otel.wire.connection_setup.
MAX_SETUP_ROWS` rows per answer. Only client-side cursors' ``execute`` is remembered. What
is carried follows the rule replay and the ingest check (:mod:`reproit_otel.wire.
connection_setup`); a capsule whose ``setup`` breaks it is refused whole.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any, Final

from reproit_otel._guard import absorb
from reproit_otel.instrumentation._pg_values import encode_params
from reproit_otel.wire.connection_setup import MAX_SETUP_ANSWERS, MAX_SETUP_ROWS
from reproit_otel.wire.statements import ambient_key, statement_scope

__all__ = ["ConnectionSetup", "plain_select", "worth_remembering"]

_HEADS: Final = frozenset("sS")  # SELECT, SHOW, SET: every statement worth remembering
_SCOPES: Final = frozenset({"setting", "introspection"})


# Every remembered SELECT holds one of these substrings. Every SELECT of every request,
# captured or not, is tested, so the test is one match of a compiled pattern: a head that
# upper-cases to "SELE" (only ASCII letters do) not followed by any of the marks. No mark can
# start inside that head, so looking after it is the same as looking in the whole text.
_SELECT_MARKS: Final = ("pg_type", "version", "current_s", "set_config", "VERSION", "CURRENT_S")
plain_select: Final = re.compile(
    "[sS][eE][lL][eE](?!.*?(?:" + "|".join(map(re.escape, _SELECT_MARKS)) + "))", re.DOTALL
).match
"""A match (truthy) when ``text`` is a SELECT holding no mark: never worth remembering."""


def worth_remembering(text: Any, values: Any) -> bool:
    """Whether a statement's answer tells something about the connection (cheap first)."""
    if type(text) is not str or text[:1] not in _HEADS or plain_select(text):
        return False
    return statement_scope(text, values) in _SCOPES


def _token(owner: object | None) -> Any:
    if owner is None:
        return None
    try:
        return weakref.ref(owner)
    except TypeError:
        return id(owner)


def _same(token: Any, owner: object | None) -> bool:
    if token is None or owner is None:
        return False
    if isinstance(token, weakref.ref):
        return token() is owner
    return bool(token == id(owner))


class ConnectionSetup:
    """The remembered connection-scope answers of one connection."""

    __slots__ = ("_attached", "_entries")

    def __init__(self) -> None:
        # ambient key -> (exchange, token of the operation it was recorded in, or None)
        self._entries: dict[str, tuple[dict[str, Any], Any]] = {}
        self._attached: Any = None

    def remember(
        self,
        text: str,
        values: Any,
        build_response: Callable[[], dict[str, Any]],
        owner: object | None,
    ) -> None:
        """Keep the answer of ``text`` (``owner``: the operation recording it, if any)."""
        try:
            request: dict[str, Any] = {"text": text}
            encoded = None if values is None else encode_params(values)
            if encoded:
                request["values"] = encoded
            response = build_response()
            rows = response.get("rows")
            if isinstance(rows, list) and len(rows) > MAX_SETUP_ROWS:
                response = {**response, "rows": rows[:MAX_SETUP_ROWS], "truncated": True}
            key = ambient_key(text)
            self._entries.pop(key, None)
            if len(self._entries) >= MAX_SETUP_ANSWERS:
                self._entries.pop(next(iter(self._entries)))
            exchange = {"protocol": "pg", "request": request, "response": response}
            self._entries[key] = (exchange, _token(owner))
        except Exception as exc:  # remembering is best effort; the statement already ran
            absorb("psycopg2.setup", exc)

    def carried_into(self, owner: object | None) -> list[dict[str, Any]] | None:
        """The answers a first statement of operation ``owner`` on this connection carries.

        ``None`` when this operation already got them, or when there is nothing learned
        outside it.
        """
        if owner is None or _same(self._attached, owner):
            return None
        self._attached = _token(owner)
        carried = [
            exchange for exchange, token in self._entries.values() if not _same(token, owner)
        ]
        return carried or None
