"""The replay half of the psycopg2 instrumentation: a connection that never reaches a server.

``psycopg2.connect`` (through ``psycopg2._connect``, the seam the recorder uses) returns a
:class:`StubConnection`; its cursors are :class:`StubCursor`. Both are pure Python stand-ins
for psycopg2's C types, answering every statement from the active replay session.

The application's own classes keep working: a ``connection_factory`` (``DictConnection``,
``LoggingConnection``, yours) or ``cursor_factory`` (``RealDictCursor``, ``DictCursor``,
``NamedTupleCursor``, yours, OpenTelemetry's traced cursor) is *rebuilt* on top of the stub:
each Python class in its hierarchy is copied with the C base replaced by the stub (functions
re-bound so a zero-argument ``super()`` works), so its row conversions, its ``execute``
overrides and the OpenTelemetry span all run as in the live run. The copy is a different
class object: ``isinstance(cursor, RealDictCursor)`` is false in replay.

Rows are built as the C cursor builds them (``row_factory(cursor)`` then ``row[i] = value``),
except that a ``RealDictRow`` factory, which only accepts a real C cursor, is filled by column
name. A named cursor shows its ``description`` from the first fetch, as a live one does.

Served results: ``statusmessage`` is the recorded ``status`` when there is one (``CREATE
TABLE``), else rebuilt from the recorded command word and row count (``INSERT 0 1``,
``SELECT 3``; a command recorded by another SDK without a count is its word alone),
``rowcount`` the recorded row count (``-1`` for a command without one; for a named cursor, the
rows fetched so far), ``description`` the recorded columns, and rows come back with the
recorded Python types (from a capsule recorded with psycopg 3, ``bytea`` comes back as a
``memoryview`` and a range as ``NumericRange``/``DateRange``/``DateTimeRange``/
``DateTimeTZRange``, as psycopg2 returns them; ``uuid`` and ``inet`` values stay the objects
psycopg 3 read, since whether psycopg2 would convert them depends on the application's
``register_uuid``/``register_ipaddress``). A recorded error is raised as the same psycopg2 class
(``psycopg2.errors.lookup(pgcode)`` or the recorded class name) with its ``pgcode`` and
``pgerror`` (``diag`` is empty). A call the recording does not hold raises
:class:`~reproit_otel.errors.DivergedError` after its ``REPROIT:DIVERGENCE`` line was written,
and so does a result truncated at capture (more than 64 rows: the missing rows are unknown, so
replay fails closed, as it does for a truncated HTTP body). ``copy_*`` and large objects cannot
be replayed and diverge. Transactions (``commit``, ``rollback``, ``autocommit``, ``with
conn:``) are accepted and do nothing.

Connection-scope statements (:mod:`reproit_otel.wire.statements`: transaction brackets,
savepoints, ``SET``/``SHOW``/``set_config``, the ``SELECT 1`` pre-ping, version and ``pg_type``
probes) that the recording holds no unconsumed data exchange for are answered by the ambient
rule: the answer capture marked as connection scope (or a warm connection carried as
``setup``) with the same text (savepoint names aside), else the documented default, never
consuming a recorded exchange. A statement the recording does hold an unconsumed data
exchange for is matched strictly, whatever its text, as the reference matches it. The stub
connection's server parameters start from
:data:`~reproit_otel.wire.statements.DEFAULT_PARAMETERS` and follow ``SET``/``set_config``.
Before the recorded request has begun (``reproit_otel.replay.request_window``), any other
statement is read from the recording without consuming it, or gets an empty answer.

Where the parts live: answering a statement from the session is :mod:`._pg_serve`, rebuilding
an application's class on a stub is :mod:`._pg_transplant`; this module holds the stubs.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Mapping
from typing import Any

import psycopg2
import psycopg2.extras
from psycopg2 import extensions as _ext

from reproit_otel.instrumentation import _pg_offline as offline
from reproit_otel.instrumentation._pg_common import (
    callproc_text,
    driver_rowcount,
    statement_text,
    status_message,
)
from reproit_otel.instrumentation._pg_record import (
    RecordingConnection,
    RecordingCursor,
    RecordingNamedCursor,
)
from reproit_otel.instrumentation._pg_serve import (
    diverge,
    rebuild_error,
    serve,
    set_secret_values,
)
from reproit_otel.instrumentation._pg_transplant import transplant
from reproit_otel.instrumentation._pg_values import column_keys, decode_value, encode_params
from reproit_otel.redaction.sql import redact_sql_values
from reproit_otel.replay.session import active_session
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.replay import pg_probe
from reproit_otel.wire.statements import DEFAULT_PARAMETERS

__all__ = [
    "SERVER_VERSION",
    "StubConnection",
    "StubCursor",
    "is_stub",
    "rebuild_error",
    "replay_connection_class",
    "replay_cursor_class",
    "set_secret_values",
]

SERVER_VERSION = 150000
"""``server_version`` of a stub connection (the recording does not hold the server's)."""


# ---------------------------------------------------------------------------- the stubs


class _Info:
    """``connection.info`` of a stub connection (from the DSN; nothing is asked of a server)."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self.dbname = params.get("dbname")
        self.user = params.get("user")
        self.host = params.get("host")
        port = params.get("port")
        self.port = int(port) if port and port.isdigit() else 5432
        self.password = None
        self.options = params.get("options")
        self.dsn_parameters = {k: v for k, v in params.items() if k != "password"}
        self.status = _ext.STATUS_READY
        self.transaction_status = _ext.TRANSACTION_STATUS_IDLE
        self.server_version = SERVER_VERSION
        self.protocol_version = 3
        self.backend_pid = 0
        self.error_message = None
        self.socket = -1
        self.ssl_in_use = False
        self.needs_password = False
        self.used_password = False
        self.parameters = dict(DEFAULT_PARAMETERS)

    def parameter_status(self, name: str) -> str | None:
        return self.parameters.get(name)


def _parse_dsn(dsn: str) -> dict[str, str]:
    try:
        return dict(_ext.parse_dsn(dsn))
    except Exception:  # an unparsable DSN still boots in replay
        return {}


class StubConnection:
    """A psycopg2 ``connection`` stand-in that answers from the replay session."""

    Error = psycopg2.Error
    Warning = psycopg2.Warning
    InterfaceError = psycopg2.InterfaceError
    DatabaseError = psycopg2.DatabaseError
    DataError = psycopg2.DataError
    OperationalError = psycopg2.OperationalError
    IntegrityError = psycopg2.IntegrityError
    InternalError = psycopg2.InternalError
    ProgrammingError = psycopg2.ProgrammingError
    NotSupportedError = psycopg2.NotSupportedError

    def __init__(self, dsn: str = "", *args: Any, **kwargs: Any) -> None:
        params = _parse_dsn(dsn)
        self.dsn = " ".join(
            f"{key}={'xxx' if key == 'password' else value}" for key, value in params.items()
        )
        self.info = _Info(params)
        session = active_session()
        if session is not None:  # what the recorded connections reported wins over defaults
            self.info.parameters.update(session.recorded_parameters())
        self.closed = 0
        self.autocommit = False
        self.isolation_level: Any = None
        self.readonly: Any = None
        self.deferrable: Any = None
        self.encoding = "UTF8"
        self.status = _ext.STATUS_READY
        self.cursor_factory: Any = None
        self.notices: list[str] = []
        self.notifies: list[Any] = []
        self.string_types: dict[int, Any] = {}
        self.binary_types: dict[int, Any] = {}
        self.server_version = SERVER_VERSION
        self.protocol_version = 3
        self.async_ = 0
        self.tpc_xid: Any = None

    @property
    def _async(self) -> int:
        return self.async_

    def _check(self) -> None:
        if self.closed:
            raise psycopg2.InterfaceError("connection already closed")

    def cursor(
        self,
        name: Any = None,
        cursor_factory: Any = None,
        scrollable: Any = None,
        withhold: bool = False,
    ) -> Any:
        """A replay cursor of the requested class."""
        self._check()
        cls = replay_cursor_class(cursor_factory or self.cursor_factory)
        cur = cls(self, name) if name is not None else cls(self)
        cur.scrollable = scrollable
        cur.withhold = withhold
        return cur

    def commit(self) -> None:
        """Accepted; nothing to commit (the transaction state returns to idle)."""
        self._check()
        self._reproit_end()

    def rollback(self) -> None:
        """Accepted; nothing to roll back (the transaction state returns to idle)."""
        self._check()
        self._reproit_end()

    def close(self) -> None:
        """Mark the connection closed."""
        self.closed = 1

    def __enter__(self) -> Any:
        self._check()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.rollback()

    def get_transaction_status(self) -> int:
        return self._reproit_tx

    _reproit_tx = int(_ext.TRANSACTION_STATUS_IDLE)

    def _reproit_statement(self, failed: bool) -> None:
        """Follow the transaction state a live connection would be in after a statement."""
        if self.autocommit:
            return
        if failed:
            self._reproit_tx = int(_ext.TRANSACTION_STATUS_INERROR)
        elif self._reproit_tx == _ext.TRANSACTION_STATUS_IDLE:
            self._reproit_tx = int(_ext.TRANSACTION_STATUS_INTRANS)
        self.status = _ext.STATUS_BEGIN
        self.info.transaction_status = self._reproit_tx

    def _reproit_end(self) -> None:
        self._reproit_tx = int(_ext.TRANSACTION_STATUS_IDLE)
        self.status = _ext.STATUS_READY
        self.info.transaction_status = self._reproit_tx

    def get_parameter_status(self, name: str) -> str | None:
        return self.info.parameters.get(name)

    def get_dsn_parameters(self) -> dict[str, str]:
        return dict(self.info.dsn_parameters)

    def get_backend_pid(self) -> int:
        return 0

    def get_native_connection(self) -> Any:
        raise psycopg2.NotSupportedError("a replayed connection has no libpq connection")

    def set_session(
        self,
        isolation_level: Any = None,
        readonly: Any = None,
        deferrable: Any = None,
        autocommit: Any = None,
    ) -> None:
        if isolation_level is not None:
            self.isolation_level = isolation_level
        if readonly is not None:
            self.readonly = readonly
        if deferrable is not None:
            self.deferrable = deferrable
        if autocommit is not None:
            self.autocommit = bool(autocommit)

    def set_isolation_level(self, level: Any) -> None:
        self.isolation_level = level
        self.autocommit = level == _ext.ISOLATION_LEVEL_AUTOCOMMIT

    def set_client_encoding(self, encoding: str) -> None:
        self.encoding = encoding

    def cancel(self) -> None:
        pass

    def reset(self) -> None:
        pass

    def poll(self) -> int:
        return int(_ext.POLL_OK)

    def isexecuting(self) -> bool:
        return False

    def fileno(self) -> int:
        raise psycopg2.NotSupportedError("a replayed connection has no socket")

    def lobject(self, *args: Any, **kwargs: Any) -> Any:
        raise diverge(pg_probe("lo_open"), "reproit: psycopg2 large objects cannot be replayed")

    def xid(self, format_id: Any, gtrid: Any, bqual: Any) -> Any:
        return (format_id, gtrid, bqual)

    def tpc_begin(self, xid: Any) -> None:
        self.tpc_xid = xid

    def tpc_prepare(self) -> None:
        pass

    def tpc_commit(self, xid: Any = None) -> None:
        self.tpc_xid = None

    def tpc_rollback(self, xid: Any = None) -> None:
        self.tpc_xid = None

    def tpc_recover(self) -> list[Any]:
        return []


def _column(entry: Any) -> Any:
    if not isinstance(entry, list):
        return _ext.Column(name=str(entry))
    fields = [*entry, *([None] * 9)][:9]
    return _ext.Column(
        name=fields[0],
        type_code=fields[1],
        display_size=fields[2],
        internal_size=fields[3],
        precision=fields[4],
        scale=fields[5],
        null_ok=fields[6],
        table_oid=fields[7],
        table_column=fields[8],
    )


class StubCursor:
    """A psycopg2 ``cursor`` stand-in serving recorded results."""

    def __init__(self, conn: Any, name: Any = None, *args: Any, **kwargs: Any) -> None:
        self.connection = conn
        self.name = name
        self.arraysize = 1
        self.itersize = 2000
        self.closed = False
        self.row_factory: Any = None
        self.tzinfo_factory: Any = None
        self.scrollable: Any = None
        self.withhold = False
        self.description: Any = None
        self.rowcount = -1
        self.rownumber = 0
        self.statusmessage: Any = None
        self.query: Any = None
        self.lastrowid = 0
        self.string_types: dict[int, Any] = {}
        self.binary_types: dict[int, Any] = {}
        self.pgresult_ptr = None
        self._reproit_rows: list[tuple[Any, ...]] | None = None
        self._reproit_columns: Any = None

    # -- statements

    def _check(self) -> None:
        if self.closed:
            raise psycopg2.InterfaceError("cursor already closed")
        if getattr(self.connection, "closed", 0):
            raise psycopg2.InterfaceError("connection already closed")

    def _serve(self, text: str, values: Any) -> Mapping[str, Any]:
        connection = self.connection
        note = getattr(connection, "_reproit_statement", None)
        info = getattr(connection, "info", None)
        try:
            response = serve(text, values, getattr(info, "parameters", None))
        except psycopg2.Error:
            if note is not None:
                note(True)
            raise
        if note is not None:
            if _ENDS_TRANSACTION.match(text):
                connection._reproit_end()
            else:
                note(False)
        return response

    def _load(self, response: Mapping[str, Any]) -> None:
        columns = response.get("columns", UNSET)
        rows = response.get("rows")
        raw_rows = rows if isinstance(rows, list) else []
        if columns is UNSET:
            # Recorded by another SDK: the column names are the keys of the first row.
            first = raw_rows[0] if raw_rows and isinstance(raw_rows[0], Mapping) else None
            columns = [[name] for name in first] if first is not None else None
        description = None if columns is None else tuple(_column(c) for c in columns)
        command = response.get("command")
        count = response.get("rowCount")
        status = response.get("status")
        self.statusmessage = status if isinstance(status, str) else status_message(command, count)
        self.rowcount = driver_rowcount(command, count, description is not None)
        self.rownumber = 0
        if description is None:
            self._reproit_rows = None
            self._reproit_columns = None
            self.description = None
            return
        keys = column_keys([column.name for column in description])
        self._reproit_rows = [_decode_row(keys, row) for row in raw_rows]
        oids = [column.type_code for column in description]
        if _FOREIGN_OIDS.intersection(oids):
            self._reproit_rows = [_as_psycopg2(oids, values) for values in self._reproit_rows]
        if self.name is None:
            self.description = description
        else:
            self._reproit_columns = description
            self.description = None
            self.rowcount = -1

    def execute(self, query: Any, vars: Any = None) -> None:
        """Serve the statement from the recording."""
        self._check()
        text = statement_text(query, offline.render)
        values = None if vars is None else redact_sql_values(text, encode_params(vars))
        self.query = _query_bytes(query, vars)
        self._load(self._serve(text, values))

    def executemany(self, query: Any, vars_list: Any) -> None:
        """Serve the statement run once per parameter set (one recorded exchange)."""
        self._check()
        text = statement_text(query, offline.render)
        sets = [redact_sql_values(text, encode_params(item)) for item in vars_list]
        self._load(self._serve(text, sets))
        self._reproit_rows = None
        self.description = None

    def callproc(self, procname: Any, parameters: Any = None) -> Any:
        """Serve a function call recorded as ``SELECT * FROM name(...)``."""
        self._check()
        text = callproc_text(str(procname), parameters)
        self._load(self._serve(text, None if parameters is None else encode_params(parameters)))
        return parameters

    def mogrify(self, query: Any, vars: Any = None) -> bytes:
        """The statement with its parameters merged, as psycopg2 would send it."""
        self._check()
        return offline.mogrify(query, vars)

    def cast(self, oid: int, s: Any) -> Any:
        return s

    def nextset(self) -> None:
        raise psycopg2.NotSupportedError("not supported by PostgreSQL")

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def copy_expert(self, sql: Any, file: Any, size: int = 8192) -> None:
        raise diverge(
            pg_probe(statement_text(sql, offline.render)),
            "reproit: psycopg2 COPY cannot be replayed",
        )

    def copy_from(self, file: Any, table: str, *args: Any, **kwargs: Any) -> None:
        raise diverge(
            pg_probe(f"COPY {table} FROM stdin"), "reproit: psycopg2 COPY cannot be replayed"
        )

    def copy_to(self, file: Any, table: str, *args: Any, **kwargs: Any) -> None:
        raise diverge(
            pg_probe(f"COPY {table} TO stdout"), "reproit: psycopg2 COPY cannot be replayed"
        )

    # -- fetching (what the C cursor does)

    def _rows(self) -> list[tuple[Any, ...]]:
        self._check()
        rows = self._reproit_rows
        if rows is None:
            raise psycopg2.ProgrammingError("no results to fetch")
        if self.description is None and self._reproit_columns is not None:
            self.description = self._reproit_columns  # a named cursor: known from 1st fetch
        return rows

    def _take(self, count: int) -> list[Any]:
        rows = self._rows()
        start = self.rownumber
        taken = rows[start : start + count]
        self.rownumber = start + len(taken)
        if self.name is not None:
            self.rowcount = self.rownumber
        return [_build_row(self, values) for values in taken]

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        taken = self._take(1)
        return taken[0] if taken else None

    def fetchmany(self, size: Any = None) -> list[Any]:
        """The next ``size`` rows (``arraysize`` by default)."""
        return self._take(self.arraysize if size is None else int(size))

    def fetchall(self) -> list[Any]:
        """Every remaining row."""
        rows = self._rows()
        return self._take(len(rows))

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        row = StubCursor.fetchone(self)
        if row is None:
            raise StopIteration
        return row

    def scroll(self, value: int, mode: str = "relative") -> None:
        """Move in the served result."""
        rows = self._rows()
        target = value if mode == "absolute" else self.rownumber + value
        if mode not in ("relative", "absolute"):
            raise psycopg2.ProgrammingError("scroll mode must be 'relative' or 'absolute'")
        if target < 0 or target > len(rows) or (self.name is None and target >= len(rows)):
            raise psycopg2.ProgrammingError("scroll destination out of bounds")
        self.rownumber = target

    def close(self) -> None:
        """Mark the cursor closed."""
        self.closed = True

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()


# COMMIT/ROLLBACK sent as SQL end the transaction (ROLLBACK TO SAVEPOINT does not).
_ENDS_TRANSACTION = re.compile(
    r"^\s*(COMMIT|END|ABORT|ROLLBACK)(\s+(WORK|TRANSACTION|AND\s+(NO\s+)?CHAIN))*\s*;?\s*$",
    re.IGNORECASE,
)


def _decode_row(keys: list[str], row: Any) -> tuple[Any, ...]:
    if isinstance(row, Mapping):
        return tuple(decode_value(row.get(key)) for key in keys)
    if isinstance(row, list):
        return tuple(decode_value(value) for value in row)
    return (decode_value(row),)


# Column types whose values psycopg 3 returns as another type than psycopg2 does: a capsule
# recorded with psycopg 3 holds ``bytes`` for bytea (psycopg2: ``memoryview``) and a plain
# ``Range`` for every range type (psycopg2: ``NumericRange``, ``DateRange``...).
_RANGE_CLASSES = {
    3904: "NumericRange",
    3906: "NumericRange",
    3926: "NumericRange",
    3912: "DateRange",
    3908: "DateTimeRange",
    3910: "DateTimeTZRange",
}
_FOREIGN_OIDS = frozenset({17, 1001, *_RANGE_CLASSES})


def _as_psycopg2(oids: list[Any], values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of a capsule recorded with psycopg 3, with the types psycopg2 returns."""
    return tuple(
        _value_as_psycopg2(value, oids[index] if index < len(oids) else None)
        for index, value in enumerate(values)
    )


def _value_as_psycopg2(value: Any, oid: Any) -> Any:
    if oid == 17 and type(value) is bytes:
        return memoryview(value)
    if oid == 1001 and isinstance(value, list):
        return [_value_as_psycopg2(item, 17) for item in value]
    name = _RANGE_CLASSES.get(oid)
    if name is not None and type(value) is psycopg2.extras.Range:
        cls = getattr(psycopg2.extras, name)
        if value.isempty:
            return cls(empty=True)
        bounds = getattr(value, "_bounds", None) or "[)"
        return cls(value.lower, value.upper, bounds)
    return value


def _build_row(cursor: Any, values: tuple[Any, ...]) -> Any:
    factory = cursor.row_factory
    if factory is None:
        return values
    row = factory(cursor)
    for index, value in enumerate(values):
        row[index] = value
    return row


def _query_bytes(query: Any, params: Any) -> bytes | None:
    try:
        return offline.mogrify(query, params)
    except Exception:  # cursor.query is informational
        text = statement_text(query, offline.render)
        return text.encode("utf-8")


def is_stub(scope: Any) -> bool:
    """True for a stub connection or cursor (psycopg2's C functions refuse them)."""
    return isinstance(scope, (StubConnection, StubCursor))


# ---------------------------------------------------------------------------- transplant

_cursor_classes: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()
_connection_classes: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def replay_cursor_class(factory: Any) -> Any:
    """The application's cursor class rebuilt on :class:`StubCursor`."""
    return transplant(
        factory, _ext.cursor, StubCursor, (RecordingCursor, RecordingNamedCursor), _cursor_classes
    )


def replay_connection_class(factory: Any) -> Any:
    """The application's connection class rebuilt on :class:`StubConnection`."""
    return transplant(
        factory, _ext.connection, StubConnection, (RecordingConnection,), _connection_classes
    )
