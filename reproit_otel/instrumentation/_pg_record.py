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

``copy_expert``/``copy_from``/``copy_to`` cannot be recorded: they mark the operation
incomplete, and so does a statement on an asynchronous (``async_=True``) connection. A value
with no encoding (or a scrolled server-side cursor) makes the exchange fail, which also marks
the operation incomplete.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, Literal, cast

from psycopg2 import extensions as _ext

from reproit_otel import recording
from reproit_otel._guard import guarded
from reproit_otel.instrumentation._exceptions import exception_type_name
from reproit_otel.instrumentation._pg_common import (
    LIBRARY,
    RESOURCE,
    callproc_text,
    column_entry,
    effect_key,
    effect_kind,
    statement_text,
)
from reproit_otel.instrumentation._pg_values import (
    UnsupportedValue,
    column_keys,
    encode_params,
    encode_value,
)
from reproit_otel.wire.bounds import MAX_PG_ROWS

__all__ = [
    "RecordingConnection",
    "RecordingCursor",
    "error_response",
    "recording_connection_class",
    "recording_cursor_class",
    "set_active",
]

_active = False
_CURSOR_CACHE_ATTR = "_reproit_recording_cursor"
_CONN_CACHE_ATTR = "_reproit_recording_connection"
_c_type_cache: dict[type, type] = {}


def set_active(active: bool) -> None:
    """Turn recording on or off for every connection made while installed."""
    global _active
    _active = active


def _start(cursor: Any) -> recording.ExchangeRecorder | None:
    if not _active or not recording.recording_enabled():
        return None
    return recording.start_exchange(LIBRARY)


def _render(cursor: Any) -> Callable[[Any], str]:
    def render(query: Any) -> str:
        return str(query.as_string(cursor))

    return render


def _request(text: str, values: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"text": text}
    if values:
        request["values"] = values
    return request


def error_response(error: BaseException) -> dict[str, Any]:
    """The recorded ``response`` of a call that raised ``error``."""
    fields: dict[str, Any] = {
        "message": str(error),
        "code": getattr(error, "pgcode", None),
        "type": exception_type_name(error),
    }
    pgerror = getattr(error, "pgerror", None)
    if pgerror is not None:
        fields["pgerror"] = pgerror
    return {"error": fields}


def _finish(
    recorder: recording.ExchangeRecorder,
    request: dict[str, Any],
    response: Callable[[], dict[str, Any]],
) -> None:
    """Hand the exchange over; ``response()`` builds its response when it is wanted."""
    recorder.finish_deferred(
        effect_kind(request["text"]), functools.partial(_build_exchange, request, response)
    )


def _build_exchange(
    request: dict[str, Any], response: Callable[[], dict[str, Any]]
) -> tuple[str, str, dict[str, Any]]:
    """``(resource, key, exchange)`` of a statement (run when the exchange is wanted)."""
    failure = "internal error while recording a statement"
    with guarded("psycopg2.record"):
        try:
            exchange = {"protocol": "pg", "request": request, "response": response()}
        except UnsupportedValue as error:
            failure = str(error)
        else:
            return RESOURCE, effect_key(request["text"]), exchange
    raise recording.Unrecordable(failure)


def _settle(
    recorder: recording.ExchangeRecorder,
    request: dict[str, Any] | None,
    take: Callable[[], Callable[[], dict[str, Any]]],
) -> None:
    """Finish ``recorder``; fail it if that is impossible.

    ``take()`` reads now whatever cannot wait (the cursor's result) and returns the builder
    of the response, which runs only when the exchange is wanted.
    """
    with guarded("psycopg2.record"):
        if request is None:
            recorder.fail("the statement could not be recorded")
            return
        try:
            response = take()
        except UnsupportedValue as error:
            recorder.fail(str(error))
            return
        except Exception:
            recorder.fail("internal error while recording a statement")
            raise
        _finish(recorder, request, response)


def _build_request(build: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    with guarded("psycopg2.request"):
        return build()
    return None


def _raw_rows(cursor: Any, fetch: Callable[..., Any], *args: Any) -> Any:
    """Call a C fetch method with no row factory, so the result holds plain value tuples."""
    factory = cursor.row_factory
    cursor.row_factory = None
    try:
        return fetch(cursor, *args)
    finally:
        cursor.row_factory = factory


def build_row(cursor: Any, values: tuple[Any, ...]) -> Any:
    """Build a row exactly as the C cursor does: ``row_factory(cursor)`` then ``row[i] = v``."""
    factory = cursor.row_factory
    if factory is None:
        return values
    row = factory(cursor)
    for index, value in enumerate(values):
        row[index] = value
    return row


def _encode_rows(names: list[str], rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    keys = column_keys(names)
    return [
        {key: encode_value(value) for key, value in zip(keys, row, strict=False)} for row in rows
    ]


def _result_response(
    command: Any, row_count: int, description: Any, rows: list[dict[str, Any]], total: int
) -> dict[str, Any]:
    response: dict[str, Any] = {"command": command, "rowCount": row_count, "rows": rows}
    if total > MAX_PG_ROWS:
        response["truncated"] = True
    response["columns"] = (
        None if description is None else [column_entry(column) for column in description]
    )
    return response


def _snapshot(cursor: Any) -> Callable[[], dict[str, Any]]:
    """Read a client-side cursor's result right after its statement ran; the builder of the
    response from what was read (values are encoded only when it is wanted)."""
    description = cursor.description
    if description is None:
        return functools.partial(
            _result_response, cursor.statusmessage, cursor.rowcount, None, [], 0
        )
    raw = _raw_rows(cursor, _ext.cursor.fetchmany, MAX_PG_ROWS + 1)
    if raw:
        _ext.cursor.scroll(cursor, 0, "absolute")
    return functools.partial(
        _encoded_result, cursor.statusmessage, cursor.rowcount, description, raw
    )


def _encoded_result(
    command: Any, row_count: int, description: Any, raw: list[tuple[Any, ...]]
) -> dict[str, Any]:
    names = [column.name for column in description]
    rows = _encode_rows(names, raw[:MAX_PG_ROWS])
    return _result_response(command, row_count, description, rows, max(row_count, len(raw)))


def _error_result(error: BaseException) -> Callable[[], dict[str, Any]]:
    """The error response, read now (the exception is not kept for later)."""
    response = error_response(error)
    return lambda: response


class _Pending:
    """A named cursor's exchange, collecting rows as the application fetches them."""

    __slots__ = ("command", "count", "description", "failure", "recorder", "request", "rows")

    def __init__(
        self, recorder: recording.ExchangeRecorder, request: dict[str, Any] | None, command: Any
    ) -> None:
        self.recorder = recorder
        self.request = request
        self.command = command
        self.count = 0
        self.rows: list[dict[str, Any]] = []
        self.description: Any = None
        self.failure: str | None = None

    def add(self, cursor: Any, raw: list[tuple[Any, ...]]) -> None:
        with guarded("psycopg2.record_rows"):
            if self.description is None:
                self.description = cursor.description
            room = MAX_PG_ROWS - len(self.rows)
            if raw and room > 0 and self.failure is None and self.description is not None:
                names = [column.name for column in self.description]
                try:
                    self.rows.extend(_encode_rows(names, raw[:room]))
                except UnsupportedValue as error:
                    self.failure = str(error)
        self.count += len(raw)

    def settle(self) -> None:
        if self.failure is not None:
            self.recorder.fail(self.failure)
            return
        _settle(
            self.recorder,
            self.request,
            lambda: functools.partial(
                _result_response, self.command, self.count, self.description, self.rows, self.count
            ),
        )


class RecordingCursor(_ext.cursor):
    """The recording layer mixed into every cursor class of a recorded connection."""

    def _reproit_settle(self) -> None:
        pending: _Pending | None = self.__dict__.pop("_reproit_pending", None)
        if pending is not None:
            pending.settle()

    def _reproit_after(
        self, recorder: recording.ExchangeRecorder, request: dict[str, Any] | None
    ) -> None:
        if getattr(self.connection, "async_", 0):
            # The result arrives later through poll(); reading it here would break the caller.
            recorder.fail("statements on asynchronous connections are not recorded")
            return
        if self.name is None:
            _settle(recorder, request, lambda: _snapshot(self))
            return
        self.__dict__["_reproit_pending"] = _Pending(recorder, request, self.statusmessage)
        connection = self.connection
        if isinstance(connection, RecordingConnection):
            connection._reproit_track(self)

    def _reproit_run(
        self,
        recorder: recording.ExchangeRecorder | None,
        request: dict[str, Any] | None,
        call: Callable[[], Any],
    ) -> Any:
        if recorder is None:
            return call()
        try:
            result = call()
        except Exception as error:
            _settle(recorder, request, functools.partial(_error_result, error))
            raise
        except BaseException:
            recorder.fail("interrupted while the statement ran")
            raise
        self._reproit_after(recorder, request)
        return result

    def execute(self, query: Any, vars: Any = None) -> Any:
        """Run the statement; record it when an operation is being captured."""
        self._reproit_settle()
        recorder = _start(self)
        request = None
        if recorder is not None:
            request = _build_request(
                lambda: _request(
                    statement_text(query, _render(self)),
                    None if vars is None else encode_params(vars),
                )
            )
        return self._reproit_run(
            recorder, request, lambda: super(RecordingCursor, self).execute(query, vars)
        )

    def executemany(self, query: Any, vars_list: Any) -> Any:
        """Run the statement once per parameter set; recorded as one exchange."""
        self._reproit_settle()
        recorder = _start(self)
        if recorder is None:
            return super().executemany(query, vars_list)
        sets = list(vars_list)  # a generator must reach psycopg2 intact: iterate it once here
        request = _build_request(
            lambda: _request(
                statement_text(query, _render(self)), [encode_params(item) for item in sets]
            )
        )
        return self._reproit_run(
            recorder, request, lambda: super(RecordingCursor, self).executemany(query, sets)
        )

    def callproc(self, procname: Any, parameters: Any = None) -> Any:
        """Call a database function; recorded as ``SELECT * FROM name(...)`` with its values."""
        self._reproit_settle()
        recorder = _start(self)
        request = None
        if recorder is not None:
            request = _build_request(
                lambda: _request(
                    callproc_text(str(procname), parameters),
                    None if parameters is None else encode_params(parameters),
                )
            )
        if parameters is None:
            return self._reproit_run(
                recorder, request, lambda: super(RecordingCursor, self).callproc(procname)
            )
        return self._reproit_run(
            recorder, request, lambda: super(RecordingCursor, self).callproc(procname, parameters)
        )

    # Fetching: only a named cursor's pending exchange needs to see rows.

    def fetchone(self) -> Any:
        """Fetch the next row."""
        pending: _Pending | None = self.__dict__.get("_reproit_pending")
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
        pending: _Pending | None = self.__dict__.get("_reproit_pending")
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
        pending: _Pending | None = self.__dict__.get("_reproit_pending")
        if pending is None:
            return super().fetchall()
        raw = _raw_rows(self, _ext.cursor.fetchall)
        pending.add(self, raw)
        self._reproit_settle()
        return [build_row(self, values) for values in raw]

    def __next__(self) -> Any:
        pending: _Pending | None = self.__dict__.get("_reproit_pending")
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
        pending: _Pending | None = self.__dict__.get("_reproit_pending")
        if pending is not None and pending.failure is None:
            pending.failure = "scroll on a server-side cursor is not recorded"
        return super().scroll(value, cast(Literal["relative", "absolute"], mode))

    def close(self) -> Any:
        """Close the cursor, finishing a named cursor's exchange first."""
        self._reproit_settle()
        return super().close()

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


class RecordingConnection(_ext.connection):
    """The recording layer mixed into the application's connection class."""

    def _reproit_track(self, cursor: RecordingCursor) -> None:
        named = self.__dict__.get("_reproit_named")
        if named is None:
            named = self.__dict__["_reproit_named"] = weakref.WeakSet()
        named.add(cursor)

    def _reproit_settle_named(self) -> None:
        named = self.__dict__.get("_reproit_named")
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
        if factory is None:
            factory = _ext.cursor
        mixed = recording_cursor_class(factory)
        return super().cursor(name, cursor_factory=mixed, scrollable=scrollable, withhold=withhold)

    def commit(self) -> Any:
        """Commit; named cursors' exchanges are finished first (the commit closes them)."""
        self._reproit_settle_named()
        return super().commit()

    def rollback(self) -> Any:
        """Roll back; named cursors' exchanges are finished first."""
        self._reproit_settle_named()
        return super().rollback()

    def close(self) -> Any:
        """Close the connection; named cursors' exchanges are finished first."""
        self._reproit_settle_named()
        return super().close()


def _mixed(base: Any, layer: type, cache_attr: str, root: type) -> Any:
    """``base`` with ``layer`` mixed in just above the C type ``root`` (cached on ``base``)."""
    if not isinstance(base, type) or not issubclass(base, root):
        return base  # a factory function: nothing to subclass, left unrecorded
    if issubclass(base, layer):
        return base
    if base is root:
        # The layer on its own, under psycopg2's name ("cursor", "connection").
        namespace = {"__module__": root.__module__, "__qualname__": root.__qualname__}
        cached = _c_type_cache.get(root)
        if cached is None:
            cached = _c_type_cache[root] = type(root.__name__, (layer,), namespace)
        return cached
    cached = base.__dict__.get(cache_attr) if _is_heap(base) else _c_type_cache.get(base)
    if cached is not None:
        return cached
    namespace = {"__module__": base.__module__, "__qualname__": base.__qualname__}
    metaclass: Any = type(base)
    mixed = metaclass(base.__name__, (base, layer), namespace)
    if _is_heap(base):
        setattr(base, cache_attr, mixed)
    else:
        _c_type_cache[base] = mixed
    return mixed


_HEAPTYPE = 1 << 9


def _is_heap(cls: type) -> bool:
    return bool(cls.__flags__ & _HEAPTYPE)


def recording_cursor_class(factory: Any) -> Any:
    """The application's cursor class with :class:`RecordingCursor` mixed in."""
    return _mixed(factory, RecordingCursor, _CURSOR_CACHE_ATTR, _ext.cursor)


def recording_connection_class(factory: Any) -> Any:
    """The application's connection class with :class:`RecordingConnection` mixed in."""
    return _mixed(
        factory or _ext.connection, RecordingConnection, _CONN_CACHE_ATTR, _ext.connection
    )
