"""The recording half of the psycopg 3 instrumentation.

psycopg 3's connections and cursors are Python classes, so the recorder patches the methods
of psycopg's own base classes (:data:`_PATCHES`) instead of mixing a layer into the
application's classes as the psycopg2 recorder must. Every cursor class derives from them
(``ClientCursor``, ``RawCursor``, OpenTelemetry's traced cursor, the application's), and every
connection uses them however it was opened (``psycopg.connect``, ``Connection.connect``, a
``psycopg_pool`` pool), so the recorder needs no hook at ``connect``. OpenTelemetry's traced
cursor calls ``super().execute()``, so the exchange starts inside the statement's span
whether the OpenTelemetry psycopg instrumentation was installed before or after reproit-otel.

What is recorded (one ``pg`` exchange per statement, the psycopg2 shape, PROTOCOL 4.4):

* ``Cursor.execute``/``AsyncCursor.execute`` (so ``Connection.execute`` too) and
  ``executemany``: the statement as passed, its parameters as ``values`` (encoded by
  :func:`~._pg3_values.encode_params`, as replay encodes the live ones); ``command``,
  ``rowCount`` and the first 64 rows of the result, and ``columns`` in psycopg2's
  ``description`` form (``[name, type_code, display_size, internal_size, precision, scale,
  null_ok, table_oid, table_column]``, computed from the result the way psycopg2 computes
  them), so one statement gives the same exchange whichever driver ran it;
* rows as plain value tuples, whatever the cursor's row factory (``dict_row``,
  ``namedtuple_row``, ``class_row``...): the application's cursor applies its factory, replay
  does the same from the recorded values;
* a server-side cursor (``ServerCursor``/``AsyncServerCursor``): the rows the application
  fetches, collected from each ``FETCH`` until the result is exhausted, the cursor is
  executed again or closed, or its connection commits or rolls back; ``rowCount`` is then the
  number of rows fetched. ``scroll`` makes the exchange unrecordable;
* a failing call: ``{"error": {"message", "code" (``sqlstate``), "type", "pgerror"}}``
  (``pgerror``: libpq's error text, as psycopg2's ``pgerror``);
* a connection-scope statement (:func:`~reproit_otel.wire.statements.statement_scope`,
  including psycopg_pool's empty check statement) is marked ``"scope": "connection"``, and a
  connection remembers its setting answers like a psycopg2 connection (:mod:`._pg_setup`).

Not recorded (the operation is marked incomplete): ``copy()``, ``stream()``, statements sent
in pipeline mode. Transactions (``commit``, ``rollback``, ``with conn.transaction()``) are
commands of the connection, not statements of a cursor, and are not exchanges, as with
psycopg2.

Cost. For a statement of a captured operation the recorder keeps references only: the
statement text, the parameters (a tuple of immutable scalars as it is, else encoded at once),
the result object psycopg holds (``PGresult``, which never changes) and a transformer made
from the cursor's adapters. Rows are loaded from that result and encoded in ``build()``, only
when the operation may be uploaded; a result of more than 65 rows is loaded at once (65 rows)
so the recording does not keep a large result alive. A server-side cursor's rows (from
several ``FETCH`` results) are loaded when its exchange finishes, as a psycopg2 named
cursor's are, and encoded in ``build()``. The capture budget counts the bytes a statement
keeps: the size of each variable-length value of the rows to record, read from the result.

Locks and finalizers: none here. Server-side cursors waiting for their rows are kept per
connection in a ``weakref.WeakKeyDictionary``, whose callbacks are the standard library's and
only drop the entry; their exchanges are finished by calls of the application (a fetch,
``execute``, ``close`` of the cursor or its connection, ``commit``, ``rollback``).

Each exchange belongs to the operation of the OpenTelemetry context current when the
statement starts; asyncio tasks copy their context, so statements of tasks a request starts
belong to that request, and concurrent requests on one event loop never mix.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator
from typing import Any

import psycopg
from psycopg.adapt import Transformer

from reproit_otel._guard import absorb
from reproit_otel.capture import recording
from reproit_otel.instrumentation import _pg_setup
from reproit_otel.instrumentation._pg3_values import encode_params as encode
from reproit_otel.instrumentation._pg_common import statement_text
from reproit_otel.instrumentation._pg_setup import plain_select
from reproit_otel.instrumentation._pg_statement import (
    _INTERNAL,
    _MANY,
    _finish,
    _note_echoes,
    _Statement,
    pg_error_response,
    take_params,
)
from reproit_otel.wire.bounds import MAX_PG_ROWS

__all__ = [
    "LIBRARY",
    "error_response",
    "install",
    "is_installed",
    "is_recording_connection",
    "uninstall",
]

LIBRARY = "psycopg"
"""The library name psycopg 3 exchanges are started with."""

_MARK = "__reproit_psycopg__"
_NO_REQUEST = "the statement could not be recorded"
_KEEP = MAX_PG_ROWS + 1  # rows read of a result: one more than recorded tells "truncated"


def _loads_after_close() -> bool:
    """Whether psycopg's loaders may run once their connection is closed: from 3.3.7 on.
    Before, the C array loader reads the connection as it loads, and a closed one crashes the
    process; there the rows to record are loaded as the statement's result arrives."""
    try:
        release = tuple(int(part) for part in psycopg.__version__.split(".")[:3])
    except ValueError:
        return True
    return release >= (3, 3, 7)


_EAGER = not _loads_after_close()
_NUMERIC_OID = 1700

_SETUP_HEADS = frozenset("sS")

_patched: list[tuple[type, str, Any]] = []


# --------------------------------------------------------------------------- the statement


class _Column:
    """One ``columns`` entry of a psycopg 3 result, in psycopg2's ``description`` form."""

    __slots__ = ("_values", "name", "table_column", "table_oid")

    def __init__(self, result: Any, index: int) -> None:
        name = result.fname(index)
        self.name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        ftype = result.ftype(index)
        fsize = result.fsize(index)
        fmod = result.fmod(index)
        if fmod > 0:
            fmod -= 4
        precision = scale = None
        internal = fsize
        if fsize == -1:
            internal = fmod >> 16 if ftype == _NUMERIC_OID else fmod
        if ftype == _NUMERIC_OID:
            precision, scale = (fmod >> 16) & 0xFFFF, fmod & 0xFFFF
        self._values = (self.name, ftype, None, internal, precision, scale, None)
        self.table_oid = result.ftable(index) or None
        self.table_column = result.ftablecol(index) or None

    def __iter__(self) -> Any:
        return iter(self._values)


class _Pg3Statement(_Statement):
    """A psycopg 3 statement: the result's rows are loaded from ``results`` in ``build()``."""

    __slots__ = ("failure", "loaded", "results", "transformer")

    results: list[Any] | None  # PGresults whose rows were not loaded yet
    loaded: list[tuple[Any, ...]] | None  # a server-side cursor's rows loaded on arrival (_EAGER)
    transformer: Any
    failure: str | None  # why a server-side cursor's rows cannot be recorded

    def _load(self) -> None:
        results = self.results
        if results is None:
            return
        raw: list[tuple[Any, ...]] = self.loaded or []
        self.loaded = None
        description: list[_Column] | None = None
        transformer = self.transformer
        for result in results:
            if description is None and result.nfields:
                description = [_Column(result, index) for index in range(result.nfields)]
            room = _KEEP - len(raw)
            if room > 0 and result.ntuples:
                # The loaders were made while the connection was open (see _read_result).
                transformer.set_pgresult(result, set_loaders=False)
                raw.extend(transformer.load_rows(0, min(room, result.ntuples), tuple))
        if self.rows is not None:  # a server-side cursor: the rows fetched
            self.rows = None
            self.raw = raw if description is not None else None
            self.description = description
            self.row_count = max(self.row_count, len(raw))
        else:
            self.raw = raw if description is not None else None
            self.description = description
        self.results = None

    def build(self) -> tuple[str, str, dict[str, Any]]:
        """``(resource, key, exchange)``, loading the rows first."""
        try:
            self._load()
        except Exception as exc:
            absorb("psycopg.record", exc)
            raise recording.Unrecordable(_INTERNAL) from None
        return super().build()

    def response_now(self) -> dict[str, Any]:
        """The response, for a connection that remembers it (``_pg_setup``)."""
        self._load()
        return self._response()


def _new_statement(cursor: Any, query: Any, params: Any) -> _Pg3Statement:
    statement = _Pg3Statement()
    statement.text = (
        query if type(query) is str else statement_text(query, lambda q: q.as_string(cursor))
    )
    take_params(statement, params, encode)
    statement.response = None
    statement.rows = None
    statement.raw = None
    statement.results = None
    statement.loaded = None
    statement.transformer = None
    statement.description = None
    statement.command = None
    statement.row_count = -1
    statement.setup = None
    statement.failure = None
    return statement


def _read_result(cursor: Any, statement: _Pg3Statement) -> None:
    """Keep what the statement's result is made of (references; see the module doc)."""
    result = cursor.pgresult
    statement.command = cursor.statusmessage
    statement.row_count = cursor.rowcount
    if result is None or not result.nfields:
        return
    statement.transformer = _transformer(cursor, result)
    statement.results = [result]
    if _EAGER or result.ntuples > _KEEP:  # a large result is not kept alive: load it now
        statement._load()
        statement.transformer = None


def _transformer(cursor: Any, result: Any) -> Any:
    """A transformer with the loaders of ``result``'s columns, made now: a loader may read the
    connection (a ``timestamptz`` loader its time zone), which may be closed by ``build()``."""
    transformer = Transformer.from_context(cursor)
    transformer.set_pgresult(result)
    return transformer


def _held(statement: _Pg3Statement) -> int:
    """About how many bytes the statement keeps (the capture budget counts them): its text,
    the size of each variable-length value of the rows recorded, 8 for any other value."""
    held = len(statement.text)
    for result in statement.results or ():
        rows = range(min(result.ntuples, _KEEP))
        for column in range(result.nfields):
            if result.fsize(column) != -1:
                held += 8 * len(rows)
                continue
            for row in rows:
                value = result.get_value(row, column)
                held += 8 if value is None else len(value)
    for values in (*(statement.raw or ()), *(statement.loaded or ())):
        for value in values:
            held += len(value) if isinstance(value, (str, bytes)) else 8
    return held


def error_response(error: BaseException) -> dict[str, Any]:
    """The recorded ``response`` of a psycopg 3 call that raised ``error``."""
    result = getattr(error, "pgresult", None)
    message = getattr(result, "error_message", None) if result is not None else None
    pgerror = message.decode("utf-8", "replace") if isinstance(message, bytes) and message else None
    return pg_error_response(error, getattr(error, "sqlstate", None), pgerror)


# ------------------------------------------------------------------------- the hand-over


def _begin(cursor: Any, query: Any, params: Any) -> tuple[Any, _Pg3Statement | None] | None:
    """The recorder and statement of a call about to run; ``None`` when nothing records."""
    recorder = recording.start_exchange(LIBRARY)
    if recorder is None:
        return None
    try:
        return recorder, _new_statement(cursor, query, params)
    except Exception as exc:
        absorb("psycopg.request", exc)
        return recorder, None


def _raised(recorder: Any, statement: _Pg3Statement | None, error: BaseException) -> None:
    if not isinstance(error, Exception):
        recorder.fail("interrupted while the statement ran")
        return
    if statement is None:
        recorder.fail(_NO_REQUEST)
        return
    try:
        _note_echoes(recorder, statement, error)
        statement.response = error_response(error)
        _finish(recorder, statement, len(statement.text))
    except Exception as exc:
        recorder.fail(_INTERNAL)
        absorb("psycopg.record", exc)


def _ran(
    cursor: Any, recorder: Any, statement: _Pg3Statement | None, params: Any, pipelined: bool
) -> None:
    """The statement ran without raising: finish its exchange (or start collecting rows)."""
    if statement is None:
        recorder.fail(_NO_REQUEST)
        return
    if pipelined:
        recorder.fail("statements in pipeline mode are not recorded")
        return
    try:
        if isinstance(cursor, _SERVER_CURSORS):
            # The DECLARE psycopg sent (psycopg2 records a named cursor's the same way).
            statement.command = "DECLARE CURSOR"
            statement.row_count = 0
            statement.rows = []  # collecting: see _Pg3Statement._load
            described = cursor.pgresult  # the portal's description: the columns
            statement.results = [described] if described is not None else []
            if described is not None and described.nfields:
                statement.transformer = _transformer(cursor, described)
            _pending_of(cursor._conn, create=True)[cursor] = (recorder, statement)
            return
        _read_result(cursor, statement)
        connection = cursor._conn
        setup = connection.__dict__.get("_reproit_setup")
        if setup is not None:
            statement.setup = setup.carried_into(recorder.owner)
        text = statement.text
        if text[:1] in _SETUP_HEADS and not plain_select(text):
            _learn(cursor, text, params, statement, recorder.owner)
        _finish(recorder, statement, _held(statement) if recorder.counts_held else 0)
    except Exception as exc:
        recorder.fail(_INTERNAL)
        absorb("psycopg.record", exc)


def _learn(
    cursor: Any,
    text: str,
    values: Any,
    statement: _Pg3Statement | None = None,
    owner: object | None = None,
) -> None:
    """Remember a connection-scope answer on the connection (see ``_pg_setup``)."""
    if isinstance(cursor, _SERVER_CURSORS) or not _pg_setup.worth_remembering(text, values):
        return
    try:
        if statement is None:
            statement = _new_statement(cursor, text, None)
            _read_result(cursor, statement)
        connection = cursor._conn
        setup = connection.__dict__.get("_reproit_setup")
        if setup is None:
            setup = connection._reproit_setup = _pg_setup.ConnectionSetup()
        setup.remember(text, values, statement.response_now, owner)
    except Exception as exc:
        absorb("psycopg.setup", exc)


def _outside(cursor: Any, query: Any, params: Any) -> None:
    """A statement that ran outside any capture: keep a connection-scope answer."""
    if type(query) is str and query[:1] in _SETUP_HEADS and not plain_select(query):
        _learn(cursor, query, params)


# ---------------------------------------------------------------- server-side cursors


def _pending_of(connection: Any, create: bool = False) -> Any:
    pending = connection.__dict__.get("_reproit_pending")
    if pending is None and create:
        pending = connection._reproit_pending = weakref.WeakKeyDictionary()
    return pending


def _settle(cursor: Any) -> None:
    """Finish a server-side cursor's exchange with the rows fetched so far."""
    pending = _pending_of(cursor._conn)
    entry = pending.pop(cursor, None) if pending else None
    if entry is None:
        return
    recorder, statement = entry
    if statement.failure is not None:
        recorder.fail(statement.failure)
        return
    try:
        # Rows of several FETCH results are loaded here, on the application's thread, so that
        # build() never shares the transformer between results.
        statement._load()
        _finish(recorder, statement, _held(statement) if recorder.counts_held else 0)
    except Exception as exc:
        recorder.fail(_INTERNAL)
        absorb("psycopg.record", exc)


def _settle_all(connection: Any) -> None:
    pending = _pending_of(connection)
    if pending:
        for cursor in list(pending.keys()):
            _settle(cursor)


def _fetch_gen(original: Callable[..., Any]) -> Callable[..., Any]:
    def _fetch(self: Any, num: int | None) -> Generator[Any, Any, Any]:
        rows = yield from original(self, num)
        pending = _pending_of(self._conn)
        if pending:
            try:
                entry = pending.get(self)
                if entry is not None:
                    statement = entry[1]
                    result = self.pgresult
                    kept = statement.results
                    if result is not None and result.ntuples:
                        statement.row_count += result.ntuples
                        if kept is not None and _EAGER:
                            _load_arrived(statement, result)
                        elif kept is not None:
                            kept.append(result)
                            if sum(r.ntuples for r in kept) >= _KEEP:
                                # Every row to record has arrived: load them now and let go
                                # of the results (a large FETCH is not kept alive).
                                statement._load()
                    if num is None or len(rows) < num:
                        _settle(self)
            except Exception as exc:
                absorb("psycopg.record_rows", exc)
        return rows

    return _fetch


def _load_arrived(statement: _Pg3Statement, result: Any) -> None:
    """Load the rows to record of a server-side cursor's FETCH as it arrives (``_EAGER``)."""
    loaded = statement.loaded or []
    room = _KEEP - len(loaded)
    transformer = statement.transformer
    if room > 0 and transformer is not None:
        transformer.set_pgresult(result, set_loaders=False)
        loaded.extend(transformer.load_rows(0, min(room, result.ntuples), tuple))
    statement.loaded = loaded


def _scroll_gen(original: Callable[..., Any]) -> Callable[..., Any]:
    def _scroll(self: Any, value: int, mode: str) -> Generator[Any, Any, Any]:
        pending = _pending_of(self._conn)
        entry = pending.get(self) if pending else None
        if entry is not None:
            entry[1].failure = "scroll on a server-side cursor is not recorded"
        return (yield from original(self, value, mode))

    return _scroll


def _settling_gen(original: Callable[..., Any], of_connection: bool) -> Callable[..., Any]:
    def _gen(self: Any, *args: Any) -> Generator[Any, Any, Any]:
        try:
            if of_connection:
                _settle_all(self)
            else:
                _settle(self)
        except Exception as exc:
            absorb("psycopg.record", exc)
        return (yield from original(self, *args))

    return _gen


def _closing(original: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
    """A connection's ``close``, finishing its server-side cursors' exchanges first."""

    def settle(connection: Any) -> None:
        try:
            _settle_all(connection)
        except Exception as exc:
            absorb("psycopg.record", exc)

    if asynchronous:

        async def aclose(self: Any) -> Any:
            settle(self)
            return await original(self)

        return aclose

    def close(self: Any) -> Any:
        settle(self)
        return original(self)

    return close


# --------------------------------------------------------------------------- the patches


def _execute_sync(original: Callable[..., Any], server: bool = False) -> Callable[..., Any]:
    def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if server and _active:
            _settle(self)  # the cursor's previous result ends here
        begun = _begin(self, query, params) if _active else None
        if begun is None:
            result = original(self, query, params, **kwargs)
            if _active:
                _outside(self, query, params)
            return result
        recorder, statement = begun
        pipelined = bool(self._pgconn.pipeline_status)
        try:
            result = original(self, query, params, **kwargs)
        except BaseException as error:
            _raised(recorder, statement, error)
            raise
        _ran(self, recorder, statement, params, pipelined)
        return result

    return execute


def _execute_async(original: Callable[..., Any], server: bool = False) -> Callable[..., Any]:
    async def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        if server and _active:
            _settle(self)  # the cursor's previous result ends here
        begun = _begin(self, query, params) if _active else None
        if begun is None:
            result = await original(self, query, params, **kwargs)
            if _active:
                _outside(self, query, params)
            return result
        recorder, statement = begun
        pipelined = bool(self._pgconn.pipeline_status)
        try:
            result = await original(self, query, params, **kwargs)
        except BaseException as error:
            _raised(recorder, statement, error)
            raise
        _ran(self, recorder, statement, params, pipelined)
        return result

    return execute


def _many_statement(cursor: Any, query: Any, sets: list[Any]) -> _Pg3Statement:
    statement = _new_statement(cursor, query, None)
    statement.values = [encode(item) for item in sets]
    statement.params = _MANY
    return statement


def _executemany_sync(original: Callable[..., Any]) -> Callable[..., Any]:
    def executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        recorder = recording.start_exchange(LIBRARY) if _active else None
        if recorder is None:
            return original(self, query, params_seq, **kwargs)
        sets = list(params_seq)  # a generator must reach psycopg intact: iterate it once
        statement: _Pg3Statement | None = None
        try:
            statement = _many_statement(self, query, sets)
        except Exception as exc:
            absorb("psycopg.request", exc)
        pipelined = bool(self._pgconn.pipeline_status)
        try:
            result = original(self, query, sets, **kwargs)
        except BaseException as error:
            _raised(recorder, statement, error)
            raise
        _ran(self, recorder, statement, None, pipelined)
        return result

    return executemany


def _executemany_async(original: Callable[..., Any]) -> Callable[..., Any]:
    async def executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        recorder = recording.start_exchange(LIBRARY) if _active else None
        if recorder is None:
            return await original(self, query, params_seq, **kwargs)
        sets = list(params_seq)
        statement: _Pg3Statement | None = None
        try:
            statement = _many_statement(self, query, sets)
        except Exception as exc:
            absorb("psycopg.request", exc)
        pipelined = bool(self._pgconn.pipeline_status)
        try:
            result = await original(self, query, sets, **kwargs)
        except BaseException as error:
            _raised(recorder, statement, error)
            raise
        _ran(self, recorder, statement, None, pipelined)
        return result

    return executemany


def _unrecorded(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    """A cursor method that is not recorded: it marks the operation incomplete."""
    reason = f"psycopg: {what} is not recorded"

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _active:
            recording.mark_incomplete(reason)
        return original(self, *args, **kwargs)

    return method


_active = False
_SERVER_CURSORS: Any = (psycopg.ServerCursor, psycopg.AsyncServerCursor)


def _patches() -> list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    # By name in the classes' order: the module that holds the mixin moved in psycopg 3.3.
    mixin: type = next(c for c in psycopg.ServerCursor.__mro__ if c.__name__ == "ServerCursorMixin")
    BaseConnection = psycopg.BaseConnection
    return [
        (psycopg.Cursor, "execute", _execute_sync),
        (psycopg.Cursor, "executemany", _executemany_sync),
        (psycopg.Cursor, "copy", lambda f: _unrecorded(f, "cursor.copy")),
        (psycopg.Cursor, "stream", lambda f: _unrecorded(f, "cursor.stream")),
        (psycopg.AsyncCursor, "execute", _execute_async),
        (psycopg.AsyncCursor, "executemany", _executemany_async),
        (psycopg.AsyncCursor, "copy", lambda f: _unrecorded(f, "cursor.copy")),
        (psycopg.AsyncCursor, "stream", lambda f: _unrecorded(f, "cursor.stream")),
        (psycopg.ServerCursor, "execute", lambda f: _execute_sync(f, True)),
        (psycopg.AsyncServerCursor, "execute", lambda f: _execute_async(f, True)),
        (mixin, "_fetch_gen", _fetch_gen),
        (mixin, "_scroll_gen", _scroll_gen),
        (mixin, "_close_gen", lambda f: _settling_gen(f, False)),
        (BaseConnection, "_commit_gen", lambda f: _settling_gen(f, True)),
        (BaseConnection, "_rollback_gen", lambda f: _settling_gen(f, True)),
        (psycopg.Connection, "close", lambda f: _closing(f, False)),
        (psycopg.AsyncConnection, "close", lambda f: _closing(f, True)),
    ]


def is_recording_connection(connection: Any) -> bool:
    """Whether the recorder records psycopg 3 connection ``connection`` (or the adapter
    SQLAlchemy's asyncio extension wraps one in)."""
    if not _active:
        return False
    inner = getattr(connection, "driver_connection", connection)
    return isinstance(inner, (psycopg.Connection, psycopg.AsyncConnection))


def is_installed() -> bool:
    """Whether the recorder's patches are in place."""
    return bool(_patched)


def install() -> None:
    """Patch psycopg's classes (idempotent) and start recording."""
    global _active
    if not _patched:
        for owner, name, make in _patches():
            original = owner.__dict__[name]
            replacement = make(original)
            setattr(replacement, _MARK, "record")
            setattr(owner, name, replacement)
            _patched.append((owner, name, original))
    _active = True


def uninstall() -> None:
    """Stop recording and restore psycopg's classes exactly."""
    global _active
    _active = False
    while _patched:
        owner, name, original = _patched.pop()
        setattr(owner, name, original)
