"""psycopg 3 replay: connections, cursors and pools that never reach a server.

Entry points (stable names):

* :func:`replay_patches` -- what
  :class:`~reproit_otel.instrumentation.psycopg.PsycopgReplayInstrumentor` (the replay setup
  installs it when ``REPROIT_REPLAY`` is set and psycopg is importable) puts in place.
* :class:`StubConnection` / :class:`AsyncStubConnection` -- what ``psycopg.connect``,
  ``Connection.connect`` (and every subclass's, ``psycopg_pool``'s ``PoolConnection``
  included) and ``AsyncConnection.connect`` return in replay.
* :class:`StubCursor` / :class:`AsyncStubCursor` -- their cursors (client-side and named).
* :func:`is_stub` -- whether an object is one of the above.
* Parameters are encoded with :func:`reproit_otel.instrumentation._pg3_values.encode_params`
  (the recorder must encode them the same way for a statement to match).

Statements are answered exactly as psycopg2 replay answers them (:mod:`._pg_serve`: strict
match of a recorded exchange by text and values, the ambient rule for connection-scope
statements, the before-request rule, ``REPROIT:DIVERGENCE`` and
:class:`~reproit_otel.errors.DivergedError` for anything else), from capsules recorded with
psycopg2 or psycopg 3 alike. What is psycopg 3 here:

* A served result is a stand-in ``pgresult`` (status, column names, type OIDs and modifiers),
  so ``description`` holds psycopg's own ``Column`` objects and every row factory (``tuple_row``,
  ``dict_row``, ``namedtuple_row``, ``class_row``, ``args_row``, ``kwargs_row``, ``scalar_row``,
  yours) runs as it does live. Values come back as psycopg 3 returns them for the column's
  type (:func:`~._pg3_values.served_value`).
* A recorded error is raised as the ``psycopg.errors`` class of its SQLSTATE (else of its
  recorded class name, else ``psycopg.DatabaseError``), with psycopg's message, ``sqlstate``
  and in ``diag`` the SQLSTATE, the primary message and, from the recorded libpq text
  (``pgerror``), the severity, detail and hint (other ``diag`` fields are not recorded).
* ``transaction()`` (nested: savepoints), ``commit``/``rollback``, ``autocommit`` and the
  ``with`` block follow the transaction status a live connection would show
  (``info.transaction_status``, ``pgconn.transaction_status``: what ``psycopg_pool`` reads to
  reset a returned connection) without sending anything. An empty statement (``""``, ``";"``:
  ``psycopg_pool``'s ``check_connection``, SQLAlchemy's pre-ping) is answered empty unless the
  recording holds it.
* ``info`` answers from the DSN and the recorded server parameters (``server_version`` from
  the recorded ``server_version`` parameter, else 15.0; ``timezone`` from ``TimeZone``);
  ``adapters`` is a real ``AdaptersMap``; ``TypeInfo.fetch`` (SQLAlchemy's hstore probe)
  runs its catalogue query through the stub; ``psycopg.sql`` objects render with a stub as
  their context (``as_string(conn)``) as they do without a connection.
* A cursor class instantiated on a stub connection (``psycopg.ClientCursor(conn)``,
  ``ServerCursor(conn, name)``, Django's server-side cursor for ``QuerySet.iterator()``)
  gives a stub cursor (:func:`_new_cursor`).

A connection's ``cursor_factory`` of the application's or a library's (OpenTelemetry's traced
cursor, Django's) is rebuilt on the stub cursor (:mod:`._pg_transplant`), so its methods run:
OpenTelemetry's psycopg instrumentation makes its statement spans in replay, whether it was
installed before the replay (the replay then serves beneath its ``connect`` wrapper) or after.

Limits: a connection subclass's own methods do not run (the stub replaces the class); a
server-side cursor's factory is not used, nor a cursor class's own methods when it is
instantiated directly on a stub connection; ``copy()``, pipelines' batching, ``notifies`` and
large objects are not replayed (``copy()`` diverges).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from reproit_otel.instrumentation._pg3_values import decode, encode_params, served_value
from reproit_otel.instrumentation._pg_common import driver_rowcount, status_message
from reproit_otel.instrumentation._pg_serve import diverge, serve
from reproit_otel.instrumentation._pg_transplant import transplant
from reproit_otel.instrumentation._pg_values import column_keys
from reproit_otel.redaction.sql import redact_sql_values
from reproit_otel.replay.session import active_session
from reproit_otel.wire._js import UNSET
from reproit_otel.wire.replay import pg_probe
from reproit_otel.wire.statements import DEFAULT_PARAMETERS

__all__ = [
    "AsyncStubConnection",
    "AsyncStubCursor",
    "StubConnection",
    "StubCursor",
    "is_stub",
    "rebuild_error",
    "replay_patches",
]

_MARK = "__reproit_psycopg__"

# COMMIT/ROLLBACK sent as SQL end the transaction (ROLLBACK TO SAVEPOINT does not).
_ENDS_TRANSACTION = re.compile(
    r"^\s*(COMMIT|END|ABORT|ROLLBACK)(\s+(WORK|TRANSACTION|AND\s+(NO\s+)?CHAIN))*\s*;?\s*$",
    re.IGNORECASE,
)
_EMPTY = re.compile(r"^[\s;]*$")


def _psycopg() -> Any:
    import psycopg

    return psycopg


# ---------------------------------------------------------------------------- errors


def rebuild_error(fields: Mapping[str, Any]) -> BaseException:
    """The ``psycopg.errors`` exception a recorded ``error`` stands for."""
    psycopg = _psycopg()
    from psycopg import errors
    from psycopg.pq import DiagnosticField

    message = fields.get("message")
    message = "recorded pg error" if message is None else str(message)
    code = fields.get("code")
    cls: Any = None
    if isinstance(code, str) and code:
        try:
            cls = errors.lookup(code)
        except KeyError:
            cls = None
    if cls is None:
        found = getattr(errors, str(fields.get("type")), None)
        if isinstance(found, type) and issubclass(found, psycopg.Error):
            cls = found
    if cls is None:
        cls = psycopg.DatabaseError
    # psycopg's message is libpq's text without its severity and final newline (psycopg2
    # keeps the newline); diag holds what libpq's text tells (psycopg2's pgerror).
    message = message.rstrip("\n")
    info: dict[Any, bytes] = {
        DiagnosticField.MESSAGE_PRIMARY: message.split("\n", 1)[0].encode("utf-8")
    }
    if isinstance(code, str) and code:
        info[DiagnosticField.SQLSTATE] = code.encode("utf-8")
    pgerror = fields.get("pgerror")
    if isinstance(pgerror, str):
        info.update(_diagnostics(pgerror))
    error: BaseException = cls(message, info=info)
    return error


def _diagnostics(pgerror: str) -> dict[Any, bytes]:
    """Severity, detail and hint from libpq's error text (``ERROR:  ...\nDETAIL:  ...``)."""
    from psycopg.pq import DiagnosticField

    found: dict[Any, bytes] = {}
    lines = pgerror.split("\n")
    severity, colon, _ = lines[0].partition(":  ")
    if colon and severity.isupper():
        found[DiagnosticField.SEVERITY] = severity.encode("utf-8")
        found[DiagnosticField.SEVERITY_NONLOCALIZED] = severity.encode("utf-8")
    fields = {"DETAIL": DiagnosticField.MESSAGE_DETAIL, "HINT": DiagnosticField.MESSAGE_HINT}
    for line in lines[1:]:
        label, colon, text = line.partition(":  ")
        if colon and label in fields:
            found[fields[label]] = text.encode("utf-8")
    return found


# ---------------------------------------------------------------------------- results


class _StubResult:
    """Enough of psycopg's ``PGresult`` for row factories and ``Column``."""

    def __init__(self, columns: list[list[Any]] | None, ntuples: int, status: str) -> None:
        from psycopg.pq import ExecStatus

        self._columns = columns or []
        self.status = ExecStatus.COMMAND_OK if columns is None else ExecStatus.TUPLES_OK
        self.nfields = len(self._columns)
        self.ntuples = ntuples
        self.command_status = status.encode("utf-8") if status else None
        self.error_message = b""

    def fname(self, index: int) -> bytes:
        return str(self._columns[index][0]).encode("utf-8")

    def ftype(self, index: int) -> int:
        oid = self._columns[index][1]
        return oid if isinstance(oid, int) else 0

    def fmod(self, index: int) -> int:
        # The type modifier, rebuilt from what a description shows (psycopg2 gives a varchar's
        # length as internal_size, psycopg 3 as display_size).
        _, oid, display, size, precision, scale = self._columns[index][:6]
        if oid == 1700 and isinstance(precision, int) and precision > 0:
            return ((precision << 16) | (scale if isinstance(scale, int) else 0)) + 4
        if oid in (1042, 1043):
            for length in (display, size):
                if isinstance(length, int) and length > 0:
                    return length + 4
        return -1

    def fsize(self, index: int) -> int:
        oid, size = self._columns[index][1], self._columns[index][3]
        if oid in _VARIABLE or not isinstance(size, int):
            return -1
        return size

    def fformat(self, index: int) -> int:
        return 0


# Types whose storage size is variable (psycopg2 shows a length or precision as internal_size).
_VARIABLE = frozenset({1042, 1043, 1700})


def _column_entry(entry: Any) -> list[Any]:
    fields = list(entry) if isinstance(entry, list) else [str(entry)]
    return [*fields, *([None] * 9)][:9]


class _CursorCore:
    """What sync and async stub cursors share: serving a statement, building rows."""

    _encoding = "utf-8"

    def __init__(
        self,
        connection: Any,
        name: str = "",
        *,
        row_factory: Any = None,
        scrollable: Any = None,
        withhold: bool = False,
        **_: Any,
    ) -> None:
        self._conn = connection
        self.name = name or ""
        self.row_factory = row_factory if row_factory is not None else connection.row_factory
        self.scrollable = scrollable
        self.withhold = withhold
        self.arraysize = 1
        self.itersize = 100
        self._closed = False
        self.pgresult: Any = None
        self.rowcount = -1
        self.rownumber: int | None = None
        self.statusmessage: str | None = None
        self.lastrowid: Any = None
        self._query: Any = None
        self._params: Any = None
        self._rows: list[tuple[Any, ...]] = []
        self._pos = 0
        self._make_row: Any = None
        self._described = False

    # -- what psycopg's row factories and Column read

    @property
    def connection(self) -> Any:
        return self._conn

    @property
    def adapters(self) -> Any:
        return self._conn.adapters

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def description(self) -> list[Any] | None:
        result = self.pgresult
        if result is None or result.status != _tuples_ok():
            return None
        if self.name and not self._described:
            return None
        psycopg = _psycopg()
        return [psycopg.Column(self, index) for index in range(result.nfields)]

    @property
    def query(self) -> bytes | None:
        return None if self._query is None else self._query.query

    @property
    def params(self) -> Any:
        return self._params

    # -- statements

    def _check(self) -> None:
        psycopg = _psycopg()
        if self._closed:
            raise psycopg.InterfaceError("the cursor is closed")
        if self._conn.closed:
            raise psycopg.OperationalError("the connection is closed")

    def _text(self, query: Any) -> str:
        if isinstance(query, str):
            return query
        if isinstance(query, (bytes, bytearray, memoryview)):
            return bytes(query).decode("utf-8", "replace")
        as_string = getattr(query, "as_string", None)
        if as_string is not None:
            return str(as_string(None))
        return str(query)

    def _run(self, query: Any, params: Any, many: bool = False) -> None:
        self._check()
        text = self._text(query)
        if many:
            values: Any = [redact_sql_values(text, encode_params(item)) for item in params]
        else:
            values = None if params is None else redact_sql_values(text, encode_params(params))
        self._query = _SentQuery(self, text, None if many else params)
        self._params = params
        self._load(self._serve(text, values))

    def _serve(self, text: str, values: Any) -> Mapping[str, Any]:
        conn = self._conn
        psycopg = _psycopg()
        session = active_session()
        if (
            _EMPTY.match(text)
            and session is not None
            and not session.has_candidate("pg", pg_probe(text, UNSET if values is None else values))
        ):
            conn._reproit_statement(False)
            return {"command": None, "rowCount": -1, "rows": [], "columns": None}
        try:
            response = serve(text, values, conn._reproit_parameters, rebuild_error)
        except psycopg.Error:
            conn._reproit_statement(True)
            raise
        if _ENDS_TRANSACTION.match(text):
            conn._reproit_end()
        else:
            conn._reproit_statement(False)
        return response

    def _load(self, response: Mapping[str, Any]) -> None:
        columns = response.get("columns", UNSET)
        rows = response.get("rows")
        raw_rows = rows if isinstance(rows, list) else []
        if columns is UNSET:
            # Recorded by another SDK: the column names are the keys of the first row.
            first = raw_rows[0] if raw_rows and isinstance(raw_rows[0], Mapping) else None
            columns = [[name] for name in first] if first is not None else None
        entries = None if not isinstance(columns, list) else [_column_entry(c) for c in columns]
        command = response.get("command")
        count = response.get("rowCount")
        status = response.get("status")
        message = status if isinstance(status, str) else status_message(command, count)
        self.statusmessage = message if isinstance(message, str) else None
        self.rowcount = driver_rowcount(command, count, entries is not None)
        zone = self._conn.info.timezone
        adapters = self._conn.adapters
        if entries is None:
            self._rows = []
        else:
            keys = column_keys([str(entry[0]) for entry in entries])
            oids = [entry[1] for entry in entries]
            self._rows = [_row(keys, oids, row, zone, adapters) for row in raw_rows]
        self.pgresult = _StubResult(entries, len(self._rows), self.statusmessage or "")
        self._pos = 0
        self.rownumber = 0 if entries is not None else None
        self._described = not self.name
        self._make_row = None
        if entries is not None and self.name:
            self._described = True  # psycopg describes a named cursor's portal on execute
            self.rowcount = -1  # and keeps no count (rownumber counts the rows fetched)

    # -- fetching

    def _maker(self) -> Any:
        if self._make_row is None:
            factory = self.row_factory
            if factory is None:
                self._make_row = tuple
            else:
                self._make_row = factory(self)
        return self._make_row

    def _take(self, count: int | None) -> list[Any]:
        self._check()
        psycopg = _psycopg()
        result = self.pgresult
        if result is None:
            raise psycopg.ProgrammingError("no result available")
        if result.status != _tuples_ok():
            raise psycopg.ProgrammingError(
                f"the last operation didn't produce records (command status: {self.statusmessage})"
            )
        start = self._pos
        end = len(self._rows) if count is None else min(len(self._rows), start + count)
        taken = self._rows[start:end]
        self._pos = end
        self.rownumber = end
        make = self._maker()
        return [make(values) for values in taken]

    def _scroll(self, value: int, mode: str) -> None:
        psycopg = _psycopg()
        if mode not in ("relative", "absolute"):
            raise ValueError(f"bad mode: {mode}. It should be 'relative' or 'absolute'")
        target = value if mode == "absolute" else self._pos + value
        if target < 0 or target > len(self._rows):
            raise IndexError("position out of bound")
        if self.pgresult is None:
            raise psycopg.ProgrammingError("no result available")
        self._pos = target
        self.rownumber = target

    def _close(self) -> None:
        self._closed = True

    def mogrify(self, query: Any, params: Any = None) -> str:
        """The statement with its parameters merged, as a ``ClientCursor`` would send it."""
        from psycopg._queries import PostgresClientQuery
        from psycopg.adapt import Transformer

        query = query if isinstance(query, (str, bytes)) else self._text(query)
        merged = PostgresClientQuery(Transformer())
        merged.convert(query, params)
        return bytes(merged.query).decode("utf-8")

    def nextset(self) -> bool | None:
        return None

    def setinputsizes(self, sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass

    def _copy(self, statement: Any) -> Any:
        return diverge(pg_probe(self._text(statement)), "reproit: psycopg COPY cannot be replayed")


class _SentQuery:
    """psycopg's query object (``cursor._query``, which Django reads): the statement with its
    parameters merged, as a ``ClientCursor`` sends it (inside its ``DECLARE`` for a named
    cursor, as psycopg sends that)."""

    def __init__(self, cursor: _CursorCore, text: str, params: Any) -> None:
        self.params = params
        try:
            merged = text if params is None else cursor.mogrify(text, params)
            if cursor.name:
                merged = _declare(cursor, merged)
        except Exception:  # informational only
            merged = text
        self.query = merged.encode("utf-8")


def _declare(cursor: _CursorCore, statement: str) -> str:
    """``statement`` in the ``DECLARE`` psycopg's server-side cursor sends it in."""
    from psycopg import sql

    parts = ["DECLARE", sql.Identifier(cursor.name).as_string(None)]
    if cursor.scrollable is not None:
        parts.append("SCROLL" if cursor.scrollable else "NO SCROLL")
    parts.append("CURSOR")
    if cursor.withhold:
        parts.append("WITH HOLD")
    parts += ["FOR", statement]
    return " ".join(parts)


def _tuples_ok() -> Any:
    from psycopg.pq import ExecStatus

    return ExecStatus.TUPLES_OK


def _row(
    keys: list[str], oids: list[Any], row: Any, zone: dt.tzinfo | None, adapters: Any
) -> tuple[Any, ...]:
    if isinstance(row, Mapping):
        raw = [row.get(key) for key in keys]
    elif isinstance(row, list):
        raw = list(row)
    else:
        raw = [row]
    return tuple(
        served_value(decode(value), oids[index] if index < len(oids) else None, zone, adapters)
        for index, value in enumerate(raw)
    )


class StubCursor(_CursorCore):
    """A psycopg 3 ``Cursor`` (or ``ServerCursor``, when named) serving recorded results."""

    def execute(self, query: Any, params: Any = None, **_: Any) -> Any:
        """Serve the statement from the recording; returns the cursor."""
        self._run(query, params)
        return self

    def executemany(self, query: Any, params_seq: Any, *, returning: bool = False) -> None:
        """Serve the statement run once per parameter set (one recorded exchange)."""
        self._run(query, list(params_seq), many=True)
        if not returning:
            self.pgresult = None
            self._rows = []

    def stream(self, query: Any, params: Any = None, **_: Any) -> Iterator[Any]:
        """Serve the statement, then yield its rows one at a time."""
        self._run(query, params)
        while True:
            taken = self._take(1)
            if not taken:
                return
            yield taken[0]

    def fetchone(self) -> Any:
        """The next row, or ``None``."""
        taken = self._take(1)
        return taken[0] if taken else None

    def fetchmany(self, size: int = 0) -> list[Any]:
        """The next ``size`` rows (``arraysize`` by default)."""
        return self._take(size or self.arraysize)

    def fetchall(self) -> list[Any]:
        """Every remaining row."""
        return self._take(None)

    def __iter__(self) -> Iterator[Any]:
        while True:
            taken = self._take(1)
            if not taken:
                return
            yield taken[0]

    def scroll(self, value: int, mode: str = "relative") -> None:
        """Move in the served result."""
        self._scroll(value, mode)

    def results(self) -> Iterator[Any]:
        """The one served result set."""
        if self.pgresult is not None:
            yield self

    def copy(self, statement: Any, params: Any = None, **_: Any) -> Any:
        """``COPY`` cannot be replayed: a divergence."""
        raise self._copy(statement)

    def close(self) -> None:
        """Mark the cursor closed."""
        self._close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()


class AsyncStubCursor(_CursorCore):
    """A psycopg 3 ``AsyncCursor`` (or ``AsyncServerCursor``) serving recorded results."""

    async def execute(self, query: Any, params: Any = None, **_: Any) -> Any:
        """Serve the statement from the recording; returns the cursor."""
        self._run(query, params)
        return self

    async def executemany(self, query: Any, params_seq: Any, *, returning: bool = False) -> None:
        """Serve the statement run once per parameter set (one recorded exchange)."""
        self._run(query, list(params_seq), many=True)
        if not returning:
            self.pgresult = None
            self._rows = []

    async def stream(self, query: Any, params: Any = None, **_: Any) -> AsyncIterator[Any]:
        """Serve the statement, then yield its rows one at a time."""
        self._run(query, params)
        while True:
            taken = self._take(1)
            if not taken:
                return
            yield taken[0]

    async def fetchone(self) -> Any:
        """The next row, or ``None``."""
        taken = self._take(1)
        return taken[0] if taken else None

    async def fetchmany(self, size: int = 0) -> list[Any]:
        """The next ``size`` rows (``arraysize`` by default)."""
        return self._take(size or self.arraysize)

    async def fetchall(self) -> list[Any]:
        """Every remaining row."""
        return self._take(None)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        while True:
            taken = self._take(1)
            if not taken:
                return
            yield taken[0]

    async def scroll(self, value: int, mode: str = "relative") -> None:
        """Move in the served result."""
        self._scroll(value, mode)

    async def results(self) -> AsyncIterator[Any]:
        """The one served result set."""
        if self.pgresult is not None:
            yield self

    def copy(self, statement: Any, params: Any = None, **_: Any) -> Any:
        """``COPY`` cannot be replayed: a divergence."""
        raise self._copy(statement)

    async def close(self) -> None:
        """Mark the cursor closed."""
        self._close()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._close()


# ---------------------------------------------------------------------------- connections


class _StubPGconn:
    """The few ``PGconn`` attributes read from outside a connection (``psycopg_pool``)."""

    def __init__(self, conn: _ConnectionCore) -> None:
        self._conn = conn

    @property
    def transaction_status(self) -> Any:
        return self._conn.info.transaction_status

    @property
    def status(self) -> Any:
        return self._conn.info.status

    @property
    def server_version(self) -> int:
        return int(self._conn.info.server_version)

    @property
    def backend_pid(self) -> int:
        return 0

    def parameter_status(self, name: bytes) -> bytes | None:
        value = self._conn._reproit_parameters.get(name.decode("utf-8"))
        return None if value is None else value.encode("utf-8")


class _StubInfo:
    """psycopg's ``ConnectionInfo``, answered from the DSN and the recorded parameters."""

    def __init__(self, conn: _ConnectionCore, dsn: dict[str, str]) -> None:
        from psycopg.pq import ConnStatus, PipelineStatus, TransactionStatus

        self._conn = conn
        self._dsn = dsn
        self._status = ConnStatus
        self._transaction_status = TransactionStatus.IDLE
        self.pipeline_status = PipelineStatus.OFF
        self.vendor = "PostgreSQL"
        self.backend_pid = 0
        self.error_message = ""
        self.encoding = "utf-8"

    @property
    def status(self) -> Any:
        return self._status.BAD if self._conn.closed else self._status.OK

    @property
    def transaction_status(self) -> Any:
        from psycopg.pq import TransactionStatus

        # A closed connection's is UNKNOWN: what makes a pool discard it.
        return TransactionStatus.UNKNOWN if self._conn.closed else self._transaction_status

    @transaction_status.setter
    def transaction_status(self, value: Any) -> None:
        self._transaction_status = value

    @property
    def dsn(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self._dsn.items() if k != "password")

    @property
    def host(self) -> str:
        return self._dsn.get("host", "/var/run/postgresql")

    @property
    def hostaddr(self) -> str:
        return self._dsn.get("hostaddr", "")

    @property
    def port(self) -> int:
        try:
            return int(self._dsn.get("port", "5432"))
        except ValueError:
            return 5432

    @property
    def dbname(self) -> str:
        return self._dsn.get("dbname", self._dsn.get("user", ""))

    @property
    def user(self) -> str:
        return self._dsn.get("user", "")

    @property
    def password(self) -> str:
        return self._dsn.get("password", "")

    @property
    def options(self) -> str:
        return self._dsn.get("options", "")

    @property
    def server_version(self) -> int:
        text = self._conn._reproit_parameters.get("server_version", "15.0")
        numbers = re.findall(r"\d+", text)
        major = int(numbers[0]) if numbers else 15
        minor = int(numbers[1]) if len(numbers) > 1 else 0
        return major * 10000 + minor if major >= 10 else major * 10000 + minor * 100

    @property
    def timezone(self) -> dt.tzinfo:
        from psycopg._tz import get_tzinfo  # psycopg's own reading of TimeZone

        zone: dt.tzinfo = get_tzinfo(self._conn.pgconn)  # type: ignore[arg-type]
        return zone

    def parameter_status(self, param_name: str) -> str | None:
        return self._conn._reproit_parameters.get(param_name)

    def get_parameters(self) -> dict[str, str]:
        return {k: v for k, v in self._dsn.items() if k != "password"}


def _dsn(conninfo: Any, kwargs: Mapping[str, Any]) -> dict[str, str]:
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(str(conninfo or ""), **dict(kwargs))
        return {str(k): str(v) for k, v in params.items() if v is not None}
    except Exception:  # an unusual DSN only changes what info reports
        return {}


_CONNECT_KEYWORDS = frozenset(
    {"autocommit", "prepare_threshold", "context", "row_factory", "cursor_factory"}
)


_factory_classes: weakref.WeakKeyDictionary[type, type] = weakref.WeakKeyDictionary()


def _factory_on_stub(factory: Any, stub: type[_CursorCore]) -> type[_CursorCore]:
    """A connection's ``cursor_factory`` rebuilt on ``stub``, so its own methods run (the
    OpenTelemetry traced cursor's ``execute`` makes its span; Django's cursor its ``callproc``);
    psycopg's own cursor classes, or a factory that cannot be rebuilt, give the plain stub."""
    if not isinstance(factory, type):
        return stub
    root = next((c for c in factory.__mro__ if c.__module__.partition(".")[0] == "psycopg"), None)
    if root is None or root is factory:
        return stub
    try:
        rebuilt: type[_CursorCore] = transplant(factory, root, stub, (), _factory_classes)
    except Exception:  # a factory replay cannot rebuild: its methods do not run
        return stub
    return rebuilt


class _Pipeline:
    """What ``pipeline()`` yields: every statement was already answered when it ran."""

    def sync(self) -> None:
        pass


class _AsyncPipeline:
    """What an async ``pipeline()`` yields."""

    async def sync(self) -> None:
        pass


class _Transaction:
    """What ``transaction()`` yields: psycopg's ``Transaction`` attributes."""

    def __init__(self, connection: Any, savepoint_name: str | None, force_rollback: bool):
        self.connection = connection
        self.savepoint_name = savepoint_name
        self.force_rollback = force_rollback


class _ConnectionCore:
    """What sync and async stub connections share: settings and transaction status."""

    _cursor_class: type[_CursorCore] = _CursorCore

    def __init__(self, conninfo: Any = "", **kwargs: Any) -> None:
        psycopg = _psycopg()
        from psycopg.adapt import AdaptersMap

        session = active_session()
        self._reproit_parameters: dict[str, str] = dict(DEFAULT_PARAMETERS)
        if session is not None:
            self._reproit_parameters.update(session.recorded_parameters())
        dsn_kwargs = {k: v for k, v in kwargs.items() if k not in _CONNECT_KEYWORDS}
        self._closed = False
        self.info = _StubInfo(self, _dsn(conninfo, dsn_kwargs))
        self.pgconn = _StubPGconn(self)
        context = kwargs.get("context")
        self.adapters = AdaptersMap(getattr(context, "adapters", None) or psycopg.adapters)
        self._autocommit = bool(kwargs.get("autocommit", False))
        self.isolation_level: Any = None
        self.read_only: Any = None
        self.deferrable: Any = None
        self.row_factory: Any = kwargs.get("row_factory")
        self.cursor_factory: Any = kwargs.get("cursor_factory")
        self.server_cursor_factory: Any = None
        self.prepare_threshold: Any = kwargs.get("prepare_threshold", 5)
        self.prepared_max: Any = 100
        self.broken = False
        self._pool: Any = None
        self._notice_handlers: list[Any] = []
        self._notify_handlers: list[Any] = []
        self._savepoints = 0
        self._begun_by_block: list[bool] = []

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def autocommit(self) -> bool:
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self._autocommit = bool(value)

    @property
    def connection(self) -> Any:
        return self

    def _check(self) -> None:
        if self._closed:
            raise _psycopg().OperationalError("the connection is closed")

    def _new_cursor(self, name: str, row_factory: Any, scrollable: Any, withhold: bool) -> Any:
        self._check()
        cls = self._cursor_class
        if not name and self.cursor_factory is not None:
            cls = _factory_on_stub(self.cursor_factory, cls)
        return cls(self, name, row_factory=row_factory, scrollable=scrollable, withhold=withhold)

    # -- transaction status (what a live connection would show)

    def _reproit_statement(self, failed: bool) -> None:
        from psycopg.pq import TransactionStatus

        info = self.info
        if failed:
            # Outside autocommit the statement began a transaction first; in autocommit
            # only an open transaction() block is left in error.
            if not self._autocommit or info.transaction_status != TransactionStatus.IDLE:
                info.transaction_status = TransactionStatus.INERROR
            return
        if not self._autocommit and info.transaction_status == TransactionStatus.IDLE:
            info.transaction_status = TransactionStatus.INTRANS

    def _reproit_end(self) -> None:
        from psycopg.pq import TransactionStatus

        self.info.transaction_status = TransactionStatus.IDLE

    def _enter_block(self) -> None:
        from psycopg.pq import TransactionStatus

        self._check()
        begins = self.info.transaction_status == TransactionStatus.IDLE
        self._begun_by_block.append(begins)
        if begins:
            self.info.transaction_status = TransactionStatus.INTRANS

    def _exit_block(self, block: _Transaction, exc: BaseException | None) -> bool:
        """Leave a ``transaction()`` block; True when ``exc`` is its ``Rollback`` (swallowed)."""
        psycopg = _psycopg()
        began = self._begun_by_block.pop() if self._begun_by_block else False
        if began and not self._closed:
            self._reproit_end()
        return isinstance(exc, psycopg.Rollback) and exc.transaction in (None, block)

    # -- settings

    def add_notice_handler(self, callback: Callable[..., Any]) -> None:
        self._notice_handlers.append(callback)

    def remove_notice_handler(self, callback: Callable[..., Any]) -> None:
        self._notice_handlers.remove(callback)

    def add_notify_handler(self, callback: Callable[..., Any]) -> None:
        self._notify_handlers.append(callback)

    def remove_notify_handler(self, callback: Callable[..., Any]) -> None:
        self._notify_handlers.remove(callback)

    def fileno(self) -> int:
        raise _psycopg().NotSupportedError("a replayed connection has no socket")

    def cancel(self) -> None:
        pass

    def xid(self, format_id: Any, gtrid: Any, bqual: Any) -> Any:
        return _psycopg().Xid(format_id, gtrid, bqual)

    def _close(self) -> None:
        self._closed = True


class StubConnection(_ConnectionCore):
    """A psycopg 3 ``Connection`` stand-in: every statement is answered from the recording."""

    _cursor_class = StubCursor

    def cursor(
        self,
        name: str = "",
        *,
        binary: bool = False,
        row_factory: Any = None,
        scrollable: Any = None,
        withhold: bool = False,
    ) -> Any:
        """A stub cursor (named: a server-side one)."""
        return self._new_cursor(name, row_factory, scrollable, withhold)

    def execute(self, query: Any, params: Any = None, **_: Any) -> Any:
        """``cursor().execute(...)``: the cursor."""
        return self.cursor().execute(query, params)

    def commit(self) -> None:
        """Accepted; the transaction status returns to idle."""
        self._check()
        self._reproit_end()

    def rollback(self) -> None:
        """Accepted; the transaction status returns to idle."""
        self._check()
        self._reproit_end()

    def close(self) -> None:
        """Mark the connection closed."""
        self._close()

    @contextlib.contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[Any]:
        """A transaction block (a savepoint when nested); sends nothing."""
        block = _Transaction(self, savepoint_name, force_rollback)
        self._enter_block()
        try:
            yield block
        except BaseException as exc:
            if not self._exit_block(block, exc):
                raise
        else:
            self._exit_block(block, None)

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[Any]:
        """Statements in the block are served one by one."""
        yield _Pipeline()

    def set_autocommit(self, value: bool) -> None:
        self.autocommit = value

    def set_isolation_level(self, value: Any) -> None:
        self.isolation_level = value

    def set_read_only(self, value: Any) -> None:
        self.read_only = value

    def set_deferrable(self, value: Any) -> None:
        self.deferrable = value

    def notifies(self, **_: Any) -> Iterator[Any]:
        return iter(())

    def tpc_begin(self, xid: Any) -> None:
        self._enter_block()

    def tpc_prepare(self) -> None:
        pass

    def tpc_commit(self, xid: Any = None) -> None:
        self._reproit_end()

    def tpc_rollback(self, xid: Any = None) -> None:
        self._reproit_end()

    def tpc_recover(self) -> list[Any]:
        return []

    def cancel_safe(self, *, timeout: float = 30.0) -> None:
        pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
        if not getattr(self, "_pool", None):
            self.close()


class AsyncStubConnection(_ConnectionCore):
    """A psycopg 3 ``AsyncConnection`` stand-in."""

    _cursor_class = AsyncStubCursor

    def cursor(
        self,
        name: str = "",
        *,
        binary: bool = False,
        row_factory: Any = None,
        scrollable: Any = None,
        withhold: bool = False,
    ) -> Any:
        """A stub cursor (named: a server-side one)."""
        return self._new_cursor(name, row_factory, scrollable, withhold)

    async def execute(self, query: Any, params: Any = None, **_: Any) -> Any:
        """``await cursor().execute(...)``: the cursor."""
        return await self.cursor().execute(query, params)

    async def commit(self) -> None:
        """Accepted; the transaction status returns to idle."""
        self._check()
        self._reproit_end()

    async def rollback(self) -> None:
        """Accepted; the transaction status returns to idle."""
        self._check()
        self._reproit_end()

    async def close(self) -> None:
        """Mark the connection closed."""
        self._close()

    @contextlib.asynccontextmanager
    async def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> AsyncIterator[Any]:
        """A transaction block (a savepoint when nested); sends nothing."""
        block = _Transaction(self, savepoint_name, force_rollback)
        self._enter_block()
        try:
            yield block
        except BaseException as exc:
            if not self._exit_block(block, exc):
                raise
        else:
            self._exit_block(block, None)

    @contextlib.asynccontextmanager
    async def pipeline(self) -> AsyncIterator[Any]:
        """Statements in the block are served one by one."""
        yield _AsyncPipeline()

    async def set_autocommit(self, value: bool) -> None:
        self.autocommit = value

    async def set_isolation_level(self, value: Any) -> None:
        self.isolation_level = value

    async def set_read_only(self, value: Any) -> None:
        self.read_only = value

    async def set_deferrable(self, value: Any) -> None:
        self.deferrable = value

    async def tpc_begin(self, xid: Any) -> None:
        self._enter_block()

    async def tpc_prepare(self) -> None:
        pass

    async def tpc_commit(self, xid: Any = None) -> None:
        self._reproit_end()

    async def tpc_rollback(self, xid: Any = None) -> None:
        self._reproit_end()

    async def tpc_recover(self) -> list[Any]:
        return []

    async def cancel_safe(self, *, timeout: float = 30.0) -> None:
        pass

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._closed:
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()
        if not getattr(self, "_pool", None):
            await self.close()


def is_stub(obj: Any) -> bool:
    """True for a psycopg 3 stub connection or cursor."""
    return isinstance(obj, (_ConnectionCore, _CursorCore))


# ---------------------------------------------------------------------------- instrumentor


def _marked(function: Any) -> Any:
    setattr(function, _MARK, "replay")
    return function


def replay_patches() -> list[tuple[Any, str, Any]]:
    """What :class:`~reproit_otel.instrumentation.psycopg.PsycopgReplayInstrumentor` puts in
    place, as ``(owner, attribute, replacement)``: ``psycopg.connect``, ``Connection.connect``,
    ``AsyncConnection.connect`` (stubs), the ``psycopg.sql`` renderers and ``TypeInfo.fetch``.
    Also gives psycopg's cursor classes :func:`_new_cursor` (once; it stays)."""
    import psycopg
    from psycopg import sql
    from psycopg.types import TypeInfo

    def connect(cls: Any, conninfo: Any = "", **options: Any) -> Any:
        return StubConnection(conninfo, **options)

    async def connect_async(cls: Any, conninfo: Any = "", **options: Any) -> Any:
        return AsyncStubConnection(conninfo, **options)

    def module_connect(conninfo: Any = "", **options: Any) -> Any:
        # Not through Connection.connect: a wrapper there must not run twice, as live.
        return StubConnection(conninfo, **options)

    patches: list[tuple[Any, str, Any]] = [
        (psycopg.Connection, "connect", classmethod(_marked(connect))),
        (psycopg.AsyncConnection, "connect", classmethod(_marked(connect_async))),
        (psycopg, "connect", _marked(module_connect)),
    ]
    renderers = (sql.Composable, sql.Composed, sql.SQL, sql.Identifier, sql.Literal)
    for owner in (*renderers, sql.Placeholder):
        for method in ("as_bytes", "as_string"):
            if method in owner.__dict__:
                patches.append((owner, method, _without_stub(owner.__dict__[method])))
    _hook_cursor_classes()
    original_fetch = TypeInfo.__dict__["fetch"].__func__

    def fetch(cls: Any, conn: Any, name: Any) -> Any:
        if isinstance(conn, _ConnectionCore):
            return _fetch_type_info(cls, conn, name)
        return original_fetch(cls, conn, name)

    patches.append((TypeInfo, "fetch", classmethod(_marked(fetch))))
    return patches


def _without_stub(method: Any) -> Any:
    """A ``psycopg.sql`` rendering method that renders for a stub as without a connection
    (psycopg would read the stub's libpq connection to escape identifiers and literals)."""

    def render(self: Any, context: Any = None) -> Any:
        if isinstance(context, (_ConnectionCore, _CursorCore)):
            context = None
        return method(self, context)

    return _marked(render)


def _new_cursor(cls: Any, connection: Any = None, *args: Any, **options: Any) -> Any:
    """``BaseCursor.__new__``: a cursor class built on a stub connection gives a stub cursor
    (``psycopg.ClientCursor(conn)``, Django's server-side cursor for ``QuerySet.iterator()``);
    on any other connection, the class's own instance."""
    if not isinstance(connection, _ConnectionCore):
        return object.__new__(cls)
    name = args[0] if args and isinstance(args[0], str) else options.pop("name", "")
    return connection._cursor_class(connection, name, **options)


def _hook_cursor_classes() -> None:
    """Give psycopg's cursor classes :func:`_new_cursor` (once; it stays).

    ``uninstrument()`` does not remove it: CPython cannot give a class back the ``__new__`` it
    inherited from ``object`` once one was set on it (instances would then be refused their
    arguments), and the hook does nothing for a connection that is not a stub.
    """
    import psycopg

    # By name in the classes' order: its module is private and moved between releases.
    BaseCursor = next(c for c in psycopg.Cursor.__mro__ if c.__name__ == "BaseCursor")

    if "__new__" not in BaseCursor.__dict__:
        BaseCursor.__new__ = staticmethod(_marked(_new_cursor))  # type: ignore[method-assign]


def _fetch_type_info(cls: Any, conn: _ConnectionCore, name: Any) -> Any:
    """``TypeInfo.fetch`` on a stub: the same catalogue query, served from the recording."""
    from psycopg import errors, sql
    from psycopg.rows import dict_row

    if isinstance(name, sql.Composable):
        name = name.as_string(None)
    query = cls._get_info_query(conn)
    cursor = conn._new_cursor("", dict_row, None, False)

    def records() -> Any:
        cursor._run(query, {"name": name})
        return cursor._take(None)

    if isinstance(conn, AsyncStubConnection):

        async def fetch_async() -> Any:
            try:
                return cls._from_records(name, records())
            except errors.UndefinedObject:
                return None

        return fetch_async()
    try:
        return cls._from_records(name, records())
    except errors.UndefinedObject:
        return None
