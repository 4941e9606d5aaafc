"""The recording half of the psycopg2 instrumentation.

psycopg2's ``connection`` and ``cursor`` are C types: their methods cannot be monkeypatched,
only overridden in a subclass. So the recorder sits at ``psycopg2._connect`` (the C function
``psycopg2.connect`` calls, below OpenTelemetry's wrapper of ``psycopg2.connect``) and hands it a
connection class that mixes :class:`RecordingConnection` into the application's own
``connection_factory``. That connection's ``cursor()`` mixes :class:`RecordingCursor` into
whatever cursor class the application asked for (``RealDictCursor``, ``DictCursor``,
``NamedTupleCursor``, its own subclasses, OpenTelemetry's traced cursor). The mix-in is placed
*last* in the bases, so in the method resolution order it sits right above the C cursor: every
Python layer (row conversions, the OpenTelemetry span) runs around it, and the exchange starts
inside the database span.

What is recorded, per statement (one exchange each, PROTOCOL 4.4, decision D11):

* ``execute``, ``executemany`` (``values`` is the list of parameter sets), ``callproc``;
* for a client-side cursor, the whole result is on the client when ``execute`` returns: the
  recorder reads the first 65 rows there (without the cursor's row factory, so it sees the
  column values), rewinds the cursor and finishes the exchange at once;
* for a named (server-side) cursor, rows come from the server as the application fetches
  them (``fetchone``/``fetchmany``/``fetchall``/iteration): the exchange collects them and
  finishes when the result is exhausted, at the next ``execute``, at ``close`` or at the
  connection's ``commit``/``rollback``/``close``; ``rowCount`` is then the number of rows
  the application fetched;
* ``statusmessage`` as ``command``, ``rowcount`` as ``rowCount``, ``description`` as
  ``columns``, rows keyed by column name (see :mod:`._pg_values` for value encoding);
* a failing call: ``{"error": {"message", "code" (pgcode), "type", "pgerror"}}``, and the
  exception is re-raised unchanged with its traceback.
* a connection-scope statement (:func:`~reproit_otel.wire.statements.statement_scope`: a
  transaction bracket, a savepoint, ``SET``/``SHOW``, the pre-ping, a version or ``pg_type``
  probe) is marked ``"scope": "connection"`` on its exchange, so replay answers it whenever
  it is asked instead of in order; every other exchange replays strictly.

``copy_expert``/``copy_from``/``copy_to`` cannot be recorded: they mark the operation
incomplete, and so does a statement on an asynchronous (``async_=True``) connection. A value
with no encoding (or a scrolled server-side cursor) makes the exchange fail, which also marks
the operation incomplete.

Cost. Most recorded operations succeed and are never uploaded, so a statement does the least
it can while it runs and leaves the rest to the exchange's ``build()`` (run only for an
operation that may be uploaded):

* while it runs: one :func:`~reproit_otel.capture.recording.start_exchange`, a reference to the
  statement text, the parameters (kept as they are when they are a tuple of immutable scalars,
  encoded at once otherwise, since the application may change a list or a dict afterwards),
  and for a client-side cursor the raw rows (read before the application reads them);
* in ``build()``: the ``request`` (parameter encoding), the row encoding, ``columns`` and the
  key.

A client-side cursor gets the recording layer :class:`RecordingCursor` (``execute``,
``executemany``, ``callproc``, COPY), so fetching and iterating go straight to the C cursor; a
named cursor gets :class:`RecordingNamedCursor`, which also sees every fetch. With nothing to
record, a statement costs one ``start_exchange`` call on top of the C call, and a statement
starting with ``S`` one match more (is it a ``SELECT`` the connection could learn nothing
from? see :mod:`._pg_setup`).

Finalizers and locks. This module takes no lock and defines no finalizer: a named cursor's
exchange is finished by its last fetch, its ``close()``, or its connection's commit, rollback
or close, all calls of the application. Named cursors are tracked in a ``weakref.WeakSet``
per connection, whose callbacks are the standard library's and only drop the entry, so a
cursor dropped unfetched and collected anywhere runs nothing of reproit-otel. Should the
application's own finalizer close a cursor or a connection, the exchange's finish is handed
over while the thread is collecting (``capture/recording.py``, "Finalizers").

Where the parts live: what a statement keeps, the exchange built from it and its hand-over
(with a named cursor's rows collected as they are fetched) are :mod:`._pg_statement`, mixing a
layer into the application's class is :mod:`._pg_mixing`, the connection's remembered
answers :mod:`._pg_setup`; this module holds the layers and decides when each exchange
finishes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Literal, cast

from psycopg2 import extensions as _ext

from reproit_otel._guard import absorb
from reproit_otel.capture import recording
from reproit_otel.instrumentation import _pg_setup
from reproit_otel.instrumentation._pg_common import (
    LIBRARY,
    callproc_text,
    statement_text,
)
from reproit_otel.instrumentation._pg_mixing import mixed_class
from reproit_otel.instrumentation._pg_setup import plain_select
from reproit_otel.instrumentation._pg_statement import (
    _INTERNAL,
    _MANY,
    _failed,
    _finish,
    _Pending,
    _raw_rows,
    _read_result,
    _settle,
    _Statement,
    _statement,
    build_row,
    error_response,
    take_params,
)
from reproit_otel.instrumentation._pg_values import encode_params

__all__ = [
    "RecordingConnection",
    "RecordingCursor",
    "RecordingNamedCursor",
    "error_response",
    "is_recording_connection",
    "recording_connection_class",
    "recording_cursor_class",
    "set_active",
]

_active = False
_CURSOR_CACHE_ATTR = "_reproit_recording_cursor"
_CONN_CACHE_ATTR = "_reproit_recording_connection"

# The C methods below the recording layers. A layer is always the last base before the C
# type in the method resolution order, so these are exactly what ``super()`` finds there.
_execute = _ext.cursor.execute
_executemany = _ext.cursor.executemany
_callproc = _ext.cursor.callproc
_cursor = _ext.connection.cursor

_SETUP_HEADS = frozenset("sS")  # statements a connection may learn from start with S


def set_active(active: bool) -> None:
    """Turn recording on or off for every connection made while installed."""
    global _active
    _active = active


class RecordingCursor(_ext.cursor):
    """The recording layer mixed into every cursor class of a recorded connection."""

    _reproit_pending: _Pending | None = None  # a named cursor's exchange still collecting rows

    def _reproit_render(self, query: Any) -> str:
        """The text of a :mod:`psycopg2.sql` ``Composable`` on this cursor (a bound method
        rather than a closure made per statement)."""
        return str(query.as_string(self))

    def _reproit_settle(self) -> None:
        pending = self._reproit_pending
        if pending is not None:
            self._reproit_pending = None
            pending.settle()

    def _reproit_after(
        self, recorder: recording.ExchangeRecorder, statement: _Statement | None
    ) -> None:
        """Record the result of a statement that ran without raising."""
        if self.connection.async_:
            # The result arrives later through poll(); reading it here would break the caller.
            recorder.fail("statements on asynchronous connections are not recorded")
            return
        if self.name is None:
            if statement is not None:
                try:
                    _read_result(self, statement)
                except Exception as exc:
                    recorder.fail(_INTERNAL)
                    absorb("psycopg2.record", exc)
                    return
            _settle(recorder, statement)
            return
        self._reproit_pending = _Pending(recorder, statement, self.statusmessage)
        connection = self.connection
        if isinstance(connection, RecordingConnection):
            connection._reproit_track(self)

    def _reproit_run(
        self,
        recorder: recording.ExchangeRecorder,
        statement: _Statement | None,
        call: Callable[..., Any],
        *args: Any,
    ) -> Any:
        """``call(self, *args)``, recorded as ``statement``."""
        try:
            result = call(self, *args)
        except Exception as error:
            _failed(recorder, statement, error)
            raise
        except BaseException:
            recorder.fail("interrupted while the statement ran")
            raise
        self._reproit_after(recorder, statement)
        return result

    def execute(self, query: Any, vars: Any = None) -> Any:
        """Run the statement; record it when an operation is being captured."""
        if self._reproit_pending is not None:
            self._reproit_settle()
        recorder = recording.start_exchange(LIBRARY) if _active else None
        if recorder is None:
            result = _execute(self, query, vars)
            # Outside a capture only connection-scope answers are kept; a plain SELECT (most
            # statements) is told apart by one match, with no call of ours.
            if (
                _active
                and type(query) is str
                and query[:1] in _SETUP_HEADS
                and not plain_select(query)
            ):
                self._reproit_learn(query, vars)
            return result
        statement: _Statement | None
        try:
            new = _Statement()
            new.text = query if type(query) is str else statement_text(query, self._reproit_render)
            take_params(new, vars, encode_params)
            new.response = None
            new.rows = None
            new.raw = None
            statement = new
        except Exception as exc:
            absorb("psycopg2.request", exc)
            statement = None
        try:
            result = _execute(self, query, vars)
        except Exception as error:
            _failed(recorder, statement, error)
            raise
        except BaseException:
            recorder.fail("interrupted while the statement ran")
            raise
        connection: Any = self.connection
        if statement is None or self.name is not None or connection.async_:
            self._reproit_after(recorder, statement)
            return result
        # A client-side cursor (the usual case): _settle inlined, since every captured
        # statement passes here.
        try:
            _read_result(self, statement)
            try:
                setup = connection._reproit_setup
            except AttributeError:  # a connection this recorder did not make
                setup = None
            if setup is not None:
                statement.setup = setup.carried_into(recorder.owner)
            text = statement.text
            if text[:1] in _SETUP_HEADS and not plain_select(text):
                self._reproit_learn(text, vars, statement, recorder.owner)
            _finish(recorder, statement)
        except Exception as exc:
            recorder.fail(_INTERNAL)
            absorb("psycopg2.record", exc)
        return result

    def _reproit_learn(
        self,
        text: str,
        values: Any,
        statement: _Statement | None = None,
        owner: object | None = None,
    ) -> None:
        """Remember a connection-scope answer on the connection (see ``_pg_setup``)."""
        if self.name is not None or not _pg_setup.worth_remembering(text, values):
            return
        connection = self.connection
        if not isinstance(connection, RecordingConnection):
            return
        try:
            if statement is None:
                statement = _statement(text, None)
                _read_result(self, statement)
            setup = connection.__dict__.get("_reproit_setup")
            if setup is None:
                setup = connection._reproit_setup = _pg_setup.ConnectionSetup()
            setup.remember(text, values, statement._response, owner)
        except Exception as exc:
            absorb("psycopg2.setup", exc)

    def executemany(self, query: Any, vars_list: Any) -> Any:
        """Run the statement once per parameter set; recorded as one exchange."""
        if self._reproit_pending is not None:
            self._reproit_settle()
        recorder = recording.start_exchange(LIBRARY) if _active else None
        if recorder is None:
            return _executemany(self, query, vars_list)
        sets = list(vars_list)  # a generator must reach psycopg2 intact: iterate it once here
        statement: _Statement | None = None
        try:
            text = statement_text(query, self._reproit_render)
            # Redacted when built, so an error text can still be scrubbed of the originals.
            statement = _statement(text, [encode_params(item) for item in sets])
            statement.params = _MANY
        except Exception as exc:
            absorb("psycopg2.request", exc)
        return self._reproit_run(recorder, statement, _executemany, query, sets)

    def callproc(self, procname: Any, parameters: Any = None) -> Any:
        """Call a database function; recorded as ``SELECT * FROM name(...)`` with its values."""
        if self._reproit_pending is not None:
            self._reproit_settle()
        recorder = recording.start_exchange(LIBRARY) if _active else None
        if recorder is None:
            if parameters is None:
                return _callproc(self, procname)
            return _callproc(self, procname, parameters)
        statement: _Statement | None = None
        try:
            statement = _statement(
                callproc_text(str(procname), parameters),
                None if parameters is None else encode_params(parameters),
            )
        except Exception as exc:
            absorb("psycopg2.request", exc)
        if parameters is None:
            return self._reproit_run(recorder, statement, _callproc, procname)
        return self._reproit_run(recorder, statement, _callproc, procname, parameters)

    def copy_expert(self, *args: Any, **kwargs: Any) -> Any:
        """COPY is not recorded: the operation is marked incomplete."""
        recording.mark_incomplete("psycopg2: cursor.copy_expert is not recorded")
        return super().copy_expert(*args, **kwargs)

    def copy_from(self, *args: Any, **kwargs: Any) -> Any:
        """COPY is not recorded: the operation is marked incomplete."""
        recording.mark_incomplete("psycopg2: cursor.copy_from is not recorded")
        return super().copy_from(*args, **kwargs)

    def copy_to(self, *args: Any, **kwargs: Any) -> Any:
        """COPY is not recorded: the operation is marked incomplete."""
        recording.mark_incomplete("psycopg2: cursor.copy_to is not recorded")
        return super().copy_to(*args, **kwargs)


class RecordingNamedCursor(RecordingCursor):
    """The recording layer of a named (server-side) cursor: it also sees every fetch.

    Only a named cursor's pending exchange needs the rows the application fetches.
    """

    def fetchone(self) -> Any:
        """Fetch the next row."""
        pending = self._reproit_pending
        if pending is None:
            return super().fetchone()
        raw = _raw_rows(self, _ext.cursor.fetchone)
        pending.add(self, [] if raw is None else [raw])
        if raw is None:
            self._reproit_settle()
            return None
        return build_row(self, raw)

    def fetchmany(self, size: Any = None) -> Any:
        """Fetch the next ``size`` rows (``arraysize`` by default)."""
        pending = self._reproit_pending
        if pending is None:
            return super().fetchmany(size) if size is not None else super().fetchmany()
        wanted = self.arraysize if size is None else size
        raw = _raw_rows(self, _ext.cursor.fetchmany, wanted)
        pending.add(self, raw)
        if len(raw) < wanted or not raw:
            self._reproit_settle()
        return [build_row(self, values) for values in raw]

    def fetchall(self) -> Any:
        """Fetch every remaining row."""
        pending = self._reproit_pending
        if pending is None:
            return super().fetchall()
        raw = _raw_rows(self, _ext.cursor.fetchall)
        pending.add(self, raw)
        self._reproit_settle()
        return [build_row(self, values) for values in raw]

    def __next__(self) -> Any:
        pending = self._reproit_pending
        if pending is None:
            return super().__next__()
        try:
            raw = _raw_rows(self, _ext.cursor.__next__)
        except StopIteration:
            self._reproit_settle()
            raise
        pending.add(self, [raw])
        return build_row(self, raw)

    def scroll(self, value: Any, mode: str = "relative") -> Any:
        """Move in the result; on a named cursor the rows are then no longer recordable."""
        pending = self._reproit_pending
        if pending is not None and pending.failure is None:
            pending.failure = "scroll on a server-side cursor is not recorded"
        return super().scroll(value, cast(Literal["relative", "absolute"], mode))

    def close(self) -> Any:
        """Close the cursor, finishing a named cursor's exchange first."""
        self._reproit_settle()
        return super().close()


def is_recording_connection(connection: Any) -> bool:
    """Whether ``connection`` is a psycopg2 connection this recorder records."""
    return isinstance(connection, RecordingConnection)


class RecordingConnection(_ext.connection):
    """The recording layer mixed into the application's connection class."""

    _reproit_named: weakref.WeakSet[RecordingCursor] | None = None
    _reproit_setup: _pg_setup.ConnectionSetup | None = None

    def _reproit_track(self, cursor: RecordingCursor) -> None:
        named = self._reproit_named
        if named is None:
            named = self._reproit_named = weakref.WeakSet()
        named.add(cursor)

    def _reproit_settle_named(self) -> None:
        named = self._reproit_named
        if named:
            for cursor in list(named):
                cursor._reproit_settle()
            named.clear()

    def cursor(  # type: ignore[override]
        self,
        name: Any = None,
        cursor_factory: Any = None,
        scrollable: Any = None,
        withhold: bool = False,
    ) -> Any:
        """A cursor of the requested class with the recording layer mixed in."""
        factory: Any = cursor_factory
        if factory is None:
            factory = self.cursor_factory
        named = name is not None
        if factory is None or factory is _ext.cursor:
            mixed = _PLAIN_LAYERS[named]
        else:
            try:  # the cache mixed_class keeps on the class itself
                mixed = factory.__dict__[_CURSOR_CACHE_ATTR][named]
            except (AttributeError, KeyError, TypeError):
                mixed = None
            if mixed is None:
                mixed = recording_cursor_class(factory, named=named)
        return _cursor(self, name, cursor_factory=mixed, scrollable=scrollable, withhold=withhold)

    def commit(self) -> Any:
        """Commit; named cursors' exchanges are finished first (the commit closes them)."""
        if self._reproit_named:
            self._reproit_settle_named()
        return super().commit()

    def rollback(self) -> Any:
        """Roll back; named cursors' exchanges are finished first."""
        if self._reproit_named:
            self._reproit_settle_named()
        return super().rollback()

    def close(self) -> Any:
        """Close the connection; named cursors' exchanges are finished first."""
        if self._reproit_named:
            self._reproit_settle_named()
        return super().close()


def recording_cursor_class(factory: Any, *, named: bool = False) -> Any:
    """The application's cursor class with the recording layer mixed in
    (:class:`RecordingNamedCursor` for a named cursor, else :class:`RecordingCursor`)."""
    if named:
        return mixed_class(factory, RecordingNamedCursor, _CURSOR_CACHE_ATTR, _ext.cursor, 1)
    return mixed_class(factory, RecordingCursor, _CURSOR_CACHE_ATTR, _ext.cursor, 0)


def recording_connection_class(factory: Any) -> Any:
    """The application's connection class with :class:`RecordingConnection` mixed in."""
    if factory is None or factory is _ext.connection:
        return _plain_connection
    return mixed_class(factory, RecordingConnection, _CONN_CACHE_ATTR, _ext.connection, 0)


_plain_connection: Any = mixed_class(
    _ext.connection, RecordingConnection, _CONN_CACHE_ATTR, _ext.connection, 0
)
# psycopg2's own cursor with each layer (a client-side cursor first, then a named one).
_PLAIN_LAYERS: tuple[Any, Any] = (
    recording_cursor_class(_ext.cursor),
    recording_cursor_class(_ext.cursor, named=True),
)
