"""One recorded psycopg2 statement: what is kept while it runs, and the exchange built from it.

The recording layers of :mod:`._pg_record` fill a :class:`_Statement` as a statement runs
(its text, its parameters as they are or encoded at once, and for a client-side cursor the
first rows as read, before the application reads them) and hand its ``build()`` over to the
operation. ``build()`` runs only for an operation that may be uploaded: it encodes the
parameters and rows, redacts the values by column, scrubs echoed values from error texts and
returns the ``pg`` exchange (PROTOCOL 4.4). See :mod:`._pg_record` for what is recorded and when.

The hand-over is here too: :func:`_finish` gives the exchange to its recorder with its effect
kind and the bytes it holds (for the capture budget), and a named cursor's :class:`_Pending`
collects the rows the application fetches until its exchange finishes.
"""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from reproit_otel._guard import absorb
from reproit_otel.capture import recording
from reproit_otel.instrumentation._exceptions import exception_type_name
from reproit_otel.instrumentation._pg_common import (
    RESOURCE,
    column_entry,
    command_word,
    effect_key,
    effect_kind,
    status_message,
)
from reproit_otel.instrumentation._pg_values import (
    UnsupportedValue,
    column_keys,
    encode_params,
    encode_value,
)
from reproit_otel.redaction.sql import redact_sql_values, redacted_originals, scrub_echoes
from reproit_otel.wire._js import _JS_SPACE
from reproit_otel.wire.bounds import MAX_PG_ROWS
from reproit_otel.wire.statements import CONNECTION_SCOPE, SCOPE_FIELD, statement_scope

__all__ = ["build_row", "error_response", "pg_error_response", "take_params"]

# The C methods that read a client-side cursor's result (below every Python layer, so the
# rows come back without the application's row conversions). psycopg2's only: the psycopg 3
# recorder, which may run without psycopg2, reads its results itself.
_fetchmany: Any
_scroll: Any
try:
    from psycopg2 import extensions as _ext
except ImportError:
    _fetchmany = _scroll = None
else:
    _fetchmany = _ext.cursor.fetchmany
    _scroll = _ext.cursor.scroll

_INTERNAL = "internal error while recording a statement"
_NO_REQUEST = "the statement could not be recorded"
_LATER: Any = object()  # ``_Statement.values`` of parameters encoded in build()
# ``_Statement.params`` of an ``executemany``: ``values`` is a list of parameter sets, each
# already redacted by the column it binds to.
_MANY: Any = object()


# Parameter types whose encoding cannot change once the statement ran: a tuple of these is
# kept as it is and encoded only if the exchange is built (anything else is encoded at once).
_LASTING = frozenset({int, str, float, bool, type(None), bytes, uuid.UUID, dt.date})
_NAIVE = frozenset({dt.datetime, dt.time})  # lasting while they carry no tzinfo


def take_params(statement: _Statement, params: Any, encode: Callable[[Any], Any]) -> None:
    """Set ``statement.values`` (and ``params``) for the parameters a statement runs with:
    ``None`` without any; a tuple of lasting scalars kept as it is (``values`` is ``_LATER``,
    encoded by ``build()``); anything else encoded now with ``encode``, since the application
    may change a list or a dict once the statement ran."""
    statement.params = None
    if params is None:
        statement.values = None
    elif type(params) is tuple:
        for item in params:
            kind = type(item)
            if kind not in _LASTING and (kind not in _NAIVE or item.tzinfo is not None):
                statement.values = encode(params)
                return
        statement.values = _LATER
        statement.params = params
    else:
        statement.values = encode(params)


def _request(text: str, values: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"text": text}
    if values:
        request["values"] = values
    return request


def error_response(error: BaseException) -> dict[str, Any]:
    """The recorded ``response`` of a psycopg2 call that raised ``error``."""
    return pg_error_response(error, getattr(error, "pgcode", None), getattr(error, "pgerror", None))


def pg_error_response(error: BaseException, code: Any, pgerror: str | None) -> dict[str, Any]:
    """The recorded ``response`` of a statement that raised ``error``, whichever the driver:
    its SQLSTATE as ``code`` and libpq's error text as ``pgerror`` (when there is one)."""
    fields: dict[str, Any] = {
        "message": str(error),
        "code": code,
        "type": exception_type_name(error),
    }
    if pgerror is not None:
        fields["pgerror"] = pgerror
    return {"error": fields}


class _Statement:
    """What was seen of one statement, and the ``build()`` of its exchange.

    ``text`` and ``values`` (or ``params`` when ``values`` is ``_LATER``) make the request.
    The response is ``response`` when it was built at once (an error), else it is built from
    ``command``, ``row_count``, ``description`` and either ``rows`` (already encoded, a named
    cursor) or ``raw`` (the first rows as read, a client-side cursor; ``None``: no result).
    """

    __slots__ = (
        "command",
        "description",
        "params",
        "raw",
        "response",
        "row_count",
        "rows",
        "setup",
        "text",
        "values",
    )

    text: str
    values: Any
    params: Any
    response: dict[str, Any] | None
    command: Any
    row_count: int
    description: Any
    rows: list[dict[str, Any]] | None
    raw: list[tuple[Any, ...]] | None
    setup: list[dict[str, Any]] | None  # answers the connection learned before (_pg_setup)

    def build(self) -> tuple[str, str, dict[str, Any]]:
        """``(resource, key, exchange)`` (run only when the exchange is wanted)."""
        try:
            values = self.values
            if values is _LATER:
                values = encode_params(self.params)
            originals = values  # what an error text may echo: the values before redaction
            if self.params is not _MANY:
                values = redact_sql_values(self.text, values)
            elif isinstance(values, list):
                values = [redact_sql_values(self.text, item) for item in values]
            request = _request(self.text, values)
        except Exception as exc:
            absorb("psycopg2.request", exc)
            raise recording.Unrecordable(_NO_REQUEST) from None
        failure = _INTERNAL
        try:
            response = self._response()
            if "error" in response:
                response = _scrubbed_error(self.text, self.params is _MANY, originals, response)
            exchange = {"protocol": "pg", "request": request, "response": response}
            if statement_scope(self.text, values) is not None:
                # Replay answers it whenever it is asked and never consumes it (decision in
                # docs/compatibility.md); an unmarked exchange replays strictly.
                exchange[SCOPE_FIELD] = CONNECTION_SCOPE
            setup = getattr(self, "setup", None)
            if setup:
                exchange["setup"] = setup
            key = effect_key(self.text)
        except UnsupportedValue as error:
            failure = str(error)
        except Exception as exc:
            absorb("psycopg2.record", exc)
        else:
            return RESOURCE, key, exchange
        raise recording.Unrecordable(failure)

    def _response(self) -> dict[str, Any]:
        if self.response is not None:
            return self.response
        rows = self.rows
        if rows is not None:
            return _result_response(
                self.command, self.row_count, self.description, rows, self.row_count
            )
        raw = self.raw
        if raw is None:
            return _result_response(self.command, self.row_count, None, [], 0)
        names = [column.name for column in self.description]
        return _result_response(
            self.command,
            self.row_count,
            self.description,
            _encode_rows(names, raw[:MAX_PG_ROWS]),
            max(self.row_count, len(raw)),
        )


def _scrubbed_error(text: str, many: bool, values: Any, response: dict[str, Any]) -> dict[str, Any]:
    """``response`` with the values the request redacts scrubbed from its error texts (an
    error message or ``DETAIL`` may echo a parameter: ``Key (email)=(a@b.c) already exists``).

    ``values`` are the statement's values *before* redaction: a placeholder no longer holds
    the value an error text echoes.
    """
    originals: list[str] = []
    for item in values if many and isinstance(values, list) else [values]:
        originals.extend(redacted_originals(text, item))
    error = response.get("error")
    if not isinstance(error, dict):
        return response
    scrubbed = dict(error)
    for field in ("message", "pgerror"):
        if field in scrubbed:
            scrubbed[field] = scrub_echoes(scrubbed[field], originals)
    return {**response, "error": scrubbed}


def _statement(text: str, values: Any) -> _Statement:
    """A statement whose request was read at once (the uncommon paths)."""
    statement = _Statement()
    statement.text = text
    statement.values = values
    statement.params = None
    statement.response = None
    statement.rows = None
    statement.raw = None
    return statement


def _read_result(cursor: Any, statement: _Statement) -> None:
    """Read a client-side cursor's result into ``statement`` right after its statement ran
    (the rows without the row factory, then the cursor is rewound for the application)."""
    description = cursor.description
    if description is not None:
        factory = cursor.row_factory
        cursor.row_factory = None
        try:
            raw = _fetchmany(cursor, MAX_PG_ROWS + 1)
        finally:
            cursor.row_factory = factory
        if raw:
            _scroll(cursor, 0, "absolute")
        statement.raw = raw
    statement.command = cursor.statusmessage
    statement.row_count = cursor.rowcount
    statement.description = description


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
    # The reference's shape (PROTOCOL 4.4): the command word, and the rows when the driver
    # knows no count (psycopg2's -1).
    count = row_count if row_count >= 0 else len(rows)
    word = command_word(command)
    response: dict[str, Any] = {"command": word, "rowCount": count, "rows": rows}
    if isinstance(command, str) and status_message(word, count) != command:
        # psycopg2's status says more than the word and count (CREATE TABLE, DECLARE CURSOR):
        # kept beside them so replay shows the same statusmessage.
        response["status"] = command
    if total > MAX_PG_ROWS:
        response["truncated"] = True
    response["columns"] = (
        None if description is None else [column_entry(column) for column in description]
    )
    return response


# effect_kind() without its calls for the usual statement heads: every ASCII spelling of
# SELECT and SHOW is a read; a head with no leading white space needs no trimming.
_SELECT_HEADS = frozenset(map("".join, itertools.product(*zip("SELECT", "select", strict=True))))
_SHOW_HEADS = frozenset(map("".join, itertools.product(*zip("SHOW", "show", strict=True))))
_READ_WORDS = ("SELECT", "SHOW")
_SPACES = frozenset(_JS_SPACE)  # what js_trim() strips
_TEXT = (str, bytes)  # the values _held counts by their length (any other counts 8)
_chain = itertools.chain.from_iterable
_repeat = itertools.repeat
_compress = itertools.compress
# Value classes that are neither str nor bytes: _held counts them 8 without an isinstance call.
_NOT_TEXT = frozenset({int, float, bool, type(None), Decimal, dt.date, dt.datetime, dt.time})


def _effect(text: str) -> str:
    """:func:`effect_kind` of ``text``, with no call for an ASCII ``SELECT``/``SHOW`` head."""
    if text[:6] in _SELECT_HEADS or text[:4] in _SHOW_HEADS:
        return "read"
    if text[:1] in _SPACES:
        return effect_kind(text)
    # No leading white space: trimming could only shorten the head at its end, which changes
    # neither its first letters nor their upper case.
    return "read" if text[:8].upper().startswith(_READ_WORDS) else "write"


def _finish(
    recorder: recording.ExchangeRecorder, statement: _Statement, held: int | None = None
) -> None:
    """Hand the exchange over; it is built only when it is wanted.

    ``held`` is :func:`_held` of the statement when the caller already counted it; it is
    counted only for an operation with a capture budget (``counts_held``).
    """
    text = statement.text
    if held is None:
        held = _held(statement) if recorder.counts_held else 0
    if text[:6] in _SELECT_HEADS or text[:4] in _SHOW_HEADS:
        recorder.finish_deferred("read", statement.build, held)
    else:
        recorder.finish_deferred(_effect(text), statement.build, held)


def _held(statement: _Statement) -> int:
    """About how many bytes the statement's snapshot keeps (the capture budget counts them):
    its text and the text and bytes values of the rows kept; other values count 8."""
    held = len(statement.text)
    raw = statement.raw
    if raw is not None:
        return held + held_in_rows(raw)
    for row in statement.rows or ():
        for value in row.values():
            held += len(value) if isinstance(value, (str, bytes)) else 8
    return held


def held_in_rows(rows: list[tuple[Any, ...]]) -> int:
    """The bytes :func:`_held` counts for raw rows (value tuples as the C cursor reads them).

    Runs for every captured statement. One row (the usual answer) is walked here, telling the
    usual value classes by identity (no call); more rows are counted by C iterators, so the
    cost does not grow with the number of rows kept in Python bytecode.
    """
    if len(rows) != 1:
        values = list(_chain(rows))
        texts = list(map(isinstance, values, _repeat(_TEXT)))
        return sum(map(len, _compress(values, texts))) + 8 * (len(values) - sum(texts))
    held = 0
    for value in rows[0]:
        kind = value.__class__
        if kind is str or kind is bytes:
            held += len(value)
        elif kind in _NOT_TEXT or not isinstance(value, _TEXT):
            held += 8
        else:
            held += len(value)
    return held


def _settle(recorder: recording.ExchangeRecorder, statement: _Statement | None) -> None:
    """Finish ``recorder`` with ``statement``, or fail it when there is nothing to finish."""
    if statement is None:
        recorder.fail(_NO_REQUEST)
        return
    try:
        _finish(recorder, statement)
    except Exception as exc:
        recorder.fail(_INTERNAL)
        absorb("psycopg2.record", exc)


def _failed(
    recorder: recording.ExchangeRecorder, statement: _Statement | None, error: BaseException
) -> None:
    """The statement raised ``error``: record its error response (read now, not kept)."""
    if statement is None:
        recorder.fail(_NO_REQUEST)
        return
    try:
        _note_echoes(recorder, statement, error)
        statement.response = error_response(error)
        _finish(recorder, statement)
    except Exception as exc:
        recorder.fail(_INTERNAL)
        absorb("psycopg2.record", exc)


def _note_echoes(
    recorder: recording.ExchangeRecorder, statement: _Statement, error: BaseException
) -> None:
    """Tell the recording which original values ``error`` may echo: its exception record,
    and every text of the operation the statement belongs to (a response body repeating the
    error), are scrubbed of them; the exchange's own error texts when it is built."""
    values = statement.values
    if values is _LATER:
        values = encode_params(statement.params)
    originals: list[str] = []
    for item in values if statement.params is _MANY and isinstance(values, list) else [values]:
        originals.extend(redacted_originals(statement.text, item))
    recording.note_echoed_values(error, originals)
    note = getattr(recorder.owner, "note_echoed_values", None)
    if callable(note) and originals:
        note(tuple(originals))


class _Pending:
    """A named cursor's exchange, collecting rows as the application fetches them."""

    __slots__ = ("count", "description", "failure", "recorder", "rows", "statement")

    def __init__(
        self, recorder: recording.ExchangeRecorder, statement: _Statement | None, command: Any
    ) -> None:
        self.recorder = recorder
        self.statement = statement
        if statement is not None:
            statement.command = command
        self.count = 0
        self.rows: list[dict[str, Any]] = []
        self.description: Any = None
        self.failure: str | None = None

    def add(self, cursor: Any, raw: list[tuple[Any, ...]]) -> None:
        try:
            if self.description is None:
                self.description = cursor.description
            room = MAX_PG_ROWS - len(self.rows)
            if raw and room > 0 and self.failure is None and self.description is not None:
                names = [column.name for column in self.description]
                try:
                    self.rows.extend(_encode_rows(names, raw[:room]))
                except UnsupportedValue as error:
                    self.failure = str(error)
        except Exception as exc:
            absorb("psycopg2.record_rows", exc)
        self.count += len(raw)

    def settle(self) -> None:
        if self.failure is not None:
            self.recorder.fail(self.failure)
            return
        statement = self.statement
        if statement is not None:
            statement.row_count = self.count
            statement.description = self.description
            statement.rows = self.rows
        _settle(self.recorder, statement)
