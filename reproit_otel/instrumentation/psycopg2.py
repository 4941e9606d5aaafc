"""psycopg2: record every SQL statement of a captured operation, and replay it without a server.

Decision D11 of the contract makes psycopg2 a first-class driver: statements, parameters,
rows, ``rowcount``, ``description``, command tags and errors (with ``pgcode``) are recorded as
``pg`` exchanges (PROTOCOL 4.4), and replay serves them from a stub connection so the
application boots with its database stopped.

Recording
---------
:func:`install_recorder` (the bootstrap calls it; idempotent) wraps ``psycopg2._connect``, the
C function behind ``psycopg2.connect``. psycopg2's connection and cursor are C types whose
methods cannot be monkeypatched, so the recorder subclasses instead: the connection class
the application asked for (``connection_factory``: none, ``DictConnection``,
``LoggingConnection``, yours) gets a recording layer whose ``cursor()`` mixes a recording
layer into the cursor class asked for (``cursor_factory`` on ``connect``, on the connection or
on ``cursor()``: ``RealDictCursor``, ``DictCursor``, ``NamedTupleCursor``, your subclasses,
named server-side cursors). Mixed classes are built once per class and cached. The layer sits
just above the C cursor, so it runs inside OpenTelemetry's database span whether the
OpenTelemetry psycopg2 instrumentation was installed before or after reproit-otel.

One exchange per ``execute``/``executemany``/``callproc`` while an operation is recorded::

    effect:   "read" (SELECT/SHOW) or "write", resource "pg", key = statement (256 units)
    request:  {"text": statement as passed, "values": parameters (only when non-empty)}
    response: {"command": statusmessage, "rowCount": rowcount, "rows": first 64 rows,
               "truncated": true (more than 64), "columns": description or null}
              or {"error": {"message", "code": pgcode, "type": class, "pgerror"}}

Rows are objects keyed by column name (so a secret column such as ``password`` or
``email`` is redacted by name, like the reference's ``pg`` rows) holding the column values
in the JSON encoding of :mod:`reproit_otel.instrumentation._pg_values`, which keeps every
Python type; ``columns`` keeps what is needed to rebuild the application's row objects. The
statement text is the query as the application passed it and the parameters travel apart,
structurally (``cursor.query``, the merged text, is not recorded). See
:mod:`reproit_otel.instrumentation._pg_record` for when each exchange finishes.

Not recorded: ``copy_expert``/``copy_from``/``copy_to`` (the operation is marked incomplete),
cursors created directly from ``psycopg2.extensions.cursor(conn)``, connections opened before
:func:`install_recorder`, and factory *functions* (not classes) for connections or cursors.
Values of types without an encoding (composite types, custom typecasters) make the exchange
unrecordable, so the operation reports its effects incomplete rather than storing a guess.

Replay
------
:class:`Psycopg2ReplayInstrumentor` (an OpenTelemetry ``BaseInstrumentor``; the bootstrap
instruments it when ``REPROIT_REPLAY`` is set) patches the same ``psycopg2._connect``: every
``psycopg2.connect`` returns a stub connection and never opens a socket.
``register_type``/``register_default_json(b)``/``register_uuid`` and ``quote_ident`` accept the
stub; ``psycopg2.extras.execute_values`` and ``execute_batch`` render their statement with
the same text as live (offline ``mogrify``, :mod:`._pg_offline`). The live statement is
redacted as the capture was (the session's ``live_redactor``, decision D8) before matching by
text and values; a miss raises :class:`~reproit_otel.errors.DivergedError` carrying the
``REPROIT:DIVERGENCE`` line written to stderr. Limits are listed in
:mod:`reproit_otel.instrumentation._pg_replay`; notably a stub's ``server_version`` is fixed
at 150000 and a result truncated at capture fails closed.

OpenTelemetry's psycopg2 instrumentation wraps ``psycopg2.connect`` above this seam, so its
spans are produced in replay too; the stub connection carries the ``dsn`` and ``info`` it reads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from reproit_otel._guard import absorb
from reproit_otel.config import given_secret_values

__all__ = ["Psycopg2ReplayInstrumentor", "install_recorder", "uninstall_recorder"]

_MARK = "__reproit_psycopg2__"
_recorder_original: Any = None


def _marked(function: Callable[..., Any], kind: str) -> Callable[..., Any]:
    setattr(function, _MARK, kind)
    return function


def install_recorder() -> bool:
    """Record psycopg2 statements from now on. Returns False when psycopg2 is not installed.

    Idempotent: a second call does nothing.
    """
    global _recorder_original
    try:
        import psycopg2 as module
    except ImportError:
        return False
    psycopg2: Any = module
    from reproit_otel.instrumentation import _pg_record

    current = psycopg2._connect
    if getattr(current, _MARK, None) == "record":
        return True
    original = current

    def _connect(dsn: Any, connection_factory: Any = None, **kwargs: Any) -> Any:
        factory = connection_factory
        try:
            factory = _pg_record.recording_connection_class(connection_factory)
        except Exception as exc:
            absorb("psycopg2.connect", exc)
        return original(dsn, connection_factory=factory, **kwargs)

    _recorder_original = original
    psycopg2._connect = _marked(_connect, "record")
    _pg_record.set_active(True)
    return True


def uninstall_recorder() -> None:
    """Stop recording and restore ``psycopg2._connect`` (connections already open stay mixed
    but record nothing)."""
    global _recorder_original
    psycopg2: Any = sys.modules.get("psycopg2")
    if psycopg2 is None or _recorder_original is None:
        return
    from reproit_otel.instrumentation import _pg_record

    _pg_record.set_active(False)
    if getattr(psycopg2._connect, _MARK, None) == "record":
        psycopg2._connect = _recorder_original
    _recorder_original = None


# ---------------------------------------------------------------------------- replay

# (module, attribute) pairs that hold psycopg2 functions refusing a stub connection/cursor.
_REGISTER_TYPE_HOMES = (
    "psycopg2.extensions",
    "psycopg2._json",
    "psycopg2._range",
    "psycopg2._ipaddress",
)
_QUOTE_IDENT_HOMES = ("psycopg2.extensions", "psycopg2.extras")


class Psycopg2ReplayInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Serve every psycopg2 connection from the active replay session (see the module doc).

    ``instrument()`` patches ``psycopg2._connect`` and the helpers that refuse a stub;
    ``uninstrument()`` restores every original exactly. ``instrument(secret_values=(...))``
    names the values to scrub from live statements before matching (default: the configured
    ``REPROIT_SECRET_VALUES``; values registered through ``reproit_otel.capture.recording``
    count too).
    """

    _patches: list[tuple[Any, str, Any]]

    def instrumentation_dependencies(self) -> Collection[str]:
        # psycopg2 ships as "psycopg2" or "psycopg2-binary"; the import is the real check.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        import psycopg2
        from psycopg2 import sql

        from reproit_otel.instrumentation import _pg_offline, _pg_replay

        self._patches = []
        _pg_replay.set_secret_values(given_secret_values(kwargs.get("secret_values")))

        def _connect(dsn: Any, connection_factory: Any = None, **_: Any) -> Any:
            cls = _pg_replay.replay_connection_class(connection_factory)
            return cls(dsn if isinstance(dsn, str) else "")

        self._patch(psycopg2, "_connect", _marked(_connect, "replay"))

        for name in _REGISTER_TYPE_HOMES:
            module = sys.modules.get(name) or __import__(name, fromlist=["_"])
            original = getattr(module, "register_type", None)
            if original is not None:
                self._patch(module, "register_type", _register_type(original))
        for name in _QUOTE_IDENT_HOMES:
            module = sys.modules.get(name) or __import__(name, fromlist=["_"])
            original = getattr(module, "quote_ident", None)
            if original is not None:
                self._patch(module, "quote_ident", _quote_ident(original))

        literal_as_string = sql.Literal.as_string

        def as_string(self: Any, context: Any) -> str:
            if _pg_replay.is_stub(context):
                return _pg_offline.quote(self.wrapped).decode("utf-8")
            return str(literal_as_string(self, context))

        self._patch(sql.Literal, "as_string", _marked(as_string, "replay"))

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._patches.append(
            (owner, name, owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name))
        )
        setattr(owner, name, replacement)

    def _uninstrument(self, **kwargs: Any) -> None:
        for owner, name, original in reversed(getattr(self, "_patches", [])):
            setattr(owner, name, original)
        self._patches = []


def _register_type(original: Any) -> Any:
    from reproit_otel.instrumentation._pg_replay import is_stub

    def register_type(obj: Any, scope: Any = None) -> Any:
        if is_stub(scope):
            return None  # rows come from the recording, already converted
        return original(obj) if scope is None else original(obj, scope)

    return _marked(register_type, "replay")


def _quote_ident(original: Any) -> Any:
    from reproit_otel.instrumentation._pg_offline import quote_ident
    from reproit_otel.instrumentation._pg_replay import is_stub

    def replay_quote_ident(name: Any, scope: Any) -> str:
        if is_stub(scope):
            return quote_ident(str(name))
        return str(original(name, scope))

    return _marked(replay_quote_ident, "replay")
