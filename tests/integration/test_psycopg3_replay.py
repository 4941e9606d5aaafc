"""psycopg 3 replay, against the real PostgreSQL: what psycopg 3 shows live, it shows replayed.

Every capsule here is recorded by the psycopg2 recorder (a capsule does not care which driver
produced it); the same statements then run under psycopg 3 twice: live, on the real server,
and replayed, on a DSN whose port nothing listens on. Both must show the same rows (values and
Python types), descriptions, row counts, status, transaction status and errors.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.rows import class_row, dict_row, namedtuple_row

from reproit_otel.errors import DivergedError
from reproit_otel.instrumentation.psycopg import PsycopgReplayInstrumentor
from reproit_otel.replay.session import activate, active_session, deactivate
from reproit_otel.wire.replay import ReplaySession
from tests.integration.pg_support import closed_port_dsn, record, seen

pytestmark = pytest.mark.postgres

# Live psycopg 3 loads timestamptz in the session's TimeZone, replay in the recorded one (UTC
# when the recording names none): the live side asks for UTC by that name.
UTC = "-c TimeZone=UTC"

Statements = list[tuple[str, Any]]


def _record(dsn: str, statements: Statements) -> dict[str, Any]:
    """A capsule of ``statements`` run by psycopg2 on one cursor (an error rolls back)."""

    def app(connect: Callable[..., Any]) -> None:
        import psycopg2

        conn = connect()
        with conn.cursor() as cur:
            for text, values in statements:
                try:
                    cur.execute(text, values)
                except psycopg2.Error:
                    conn.rollback()
                    continue
                if cur.description is not None:
                    cur.fetchall()
        conn.commit()
        conn.close()

    return record(dsn, app, otel=False).capsule()


@contextmanager
def replaying(capsule: dict[str, Any], *, awaiting: bool = False) -> Iterator[ReplaySession]:
    """psycopg 3 served from ``capsule`` (``awaiting``: boot calls come before the request)."""
    session = ReplaySession(capsule)
    if awaiting:
        session.usage.await_request()
    activate(session)
    PsycopgReplayInstrumentor().instrument()
    try:
        yield session
    finally:
        PsycopgReplayInstrumentor().uninstrument()
        deactivate()


def _description(cursor: Any) -> Any:
    if cursor.description is None:
        return None
    return [
        (c.name, c.type_code, c.display_size, c.internal_size, c.precision, c.scale)
        for c in cursor.description
    ]


def _shown(cursor: Any, rows: Any) -> dict[str, Any]:
    return {
        "rows": seen(rows),
        "description": _description(cursor),
        "rowcount": cursor.rowcount,
        "status": cursor.statusmessage,
    }


def _run(conn: Any, statements: Statements, row_factory: Any = None) -> list[Any]:
    """What psycopg 3 shows for each statement, an error as its class, SQLSTATE and text."""
    shown: list[Any] = []
    with conn:
        for text, values in statements:
            cur = conn.cursor(row_factory=row_factory)
            try:
                cur.execute(text, values)
            except psycopg.Error as error:
                shown.append(_error(error))
                conn.rollback()
                continue
            rows = cur.fetchall() if cur.description is not None else None
            shown.append(_shown(cur, rows))
    return shown


def _error(error: psycopg.Error) -> tuple[Any, ...]:
    diag = error.diag
    return (
        type(error),
        error.sqlstate,
        diag.sqlstate,
        diag.message_primary,
        str(error),
        diag.severity,
        diag.message_detail,
        diag.message_hint,
    )


def _live_and_replayed(dsn: str, statements: Statements, **options: Any) -> tuple[Any, Any]:
    capsule = _record(dsn, statements)
    live = _run(psycopg.connect(dsn, options=UTC), statements, **options)
    with replaying(capsule) as session:
        replayed = _run(psycopg.connect(closed_port_dsn()), statements, **options)
    assert not session.diverged, session.divergence_lines
    return live, replayed


VALUES = (
    "SELECT 1.50::numeric(5,2) AS price, 2.5::float8 AS ratio, 9007199254740993::int8 AS big,"
    " true AS flag, NULL::text AS nothing, 'pen'::varchar(40) AS sku, 'x'::char(3) AS code,"
    " '2024-05-01 10:00:00+02'::timestamptz AS at, '2024-05-01 10:00:00'::timestamp AS naive,"
    " '2024-05-01'::date AS day, '10:30:00'::time AS clock, '10:30:00+02'::timetz AS clock_tz,"
    " '1 day 02:00:00'::interval AS span,"
    " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS id,"
    " ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid] AS ids,"
    " '\\x00ff'::bytea AS blob, ARRAY[1, NULL, 3] AS numbers, ARRAY['a', 'b''c'] AS words,"
    ' \'{"k": [1, {"z": null}], "a": 2}\'::jsonb AS doc, \'{"b": 1, "a": 2}\'::json AS raw,'
    " int4range(1, 5) AS span_int, numrange(1.5, NULL) AS span_num,"
    " daterange('2024-01-01', '2024-02-01', '[]') AS span_day,"
    " tstzrange('2024-01-01 00:00+02', '2024-01-02 00:00+02') AS span_at,"
    " 'empty'::int4range AS span_empty,"
    " '10.0.0.1/8'::inet AS host_net, '10.0.0.1'::inet AS host, '10.0.0.0/8'::cidr AS net"
    " WHERE %s"
)


def test_values_come_back_as_psycopg3_returns_them(postgres_dsn: str) -> None:
    live, replayed = _live_and_replayed(postgres_dsn, [(VALUES, (True,))])
    assert replayed == live
    row = live[0]["rows"][1][0][1]
    assert [part[0] for part in row] == [
        "Decimal", "float", "int", "bool", "NoneType", "str", "str", "datetime", "datetime",
        "date", "time", "time", "timedelta", "UUID", "list", "bytes", "list", "list", "dict",
        "dict", "Range", "Range", "Range", "Range", "Range", "IPv4Interface", "IPv4Address",
        "IPv4Network",
    ]  # fmt: skip


ITEMS = "SELECT id, name FROM (VALUES (1, 'pen'), (2, 'ink')) AS t(id, name) WHERE id >= %(lo)s"


@dataclasses.dataclass
class Item:
    id: int
    name: str


@pytest.mark.parametrize(
    "factory",
    [None, dict_row, namedtuple_row, class_row(Item)],
    ids=["tuple", "dict_row", "namedtuple_row", "class_row"],
)
def test_row_factories_build_their_rows_from_served_values(postgres_dsn: str, factory: Any) -> None:
    live, replayed = _live_and_replayed(postgres_dsn, [(ITEMS, {"lo": 1})], row_factory=factory)
    assert replayed == live
    assert len(live[0]["rows"][1]) == 2


def test_writes_errors_and_statuses_match_the_live_run(postgres_dsn: str) -> None:
    statements: Statements = [
        ("CREATE TEMP TABLE notes (id serial PRIMARY KEY, body text UNIQUE)", None),
        ("INSERT INTO notes (body) VALUES (%s), (%s) RETURNING id", ("a", "b")),
        ("UPDATE notes SET body = body || '!' WHERE id > %s", (0,)),
        ("DELETE FROM notes WHERE body = %s", ("c",)),
        ("INSERT INTO notes (body) VALUES (%s)", ("a!",)),
        ("SELECT 1/0", None),
        ("SELECT no_such_function(1)", None),
    ]
    live, replayed = _live_and_replayed(postgres_dsn, statements)
    assert replayed == live
    primary = 'duplicate key value violates unique constraint "notes_body_key"'
    detail = "Key (body)=(a!) already exists."
    assert live[4] == (
        psycopg.errors.UniqueViolation,
        "23505",
        "23505",
        primary,
        f"{primary}\nDETAIL:  {detail}",
        "ERROR",
        detail,
        None,
    )
    assert live[5][:2] == (psycopg.errors.DivisionByZero, "22012")
    assert live[6][:2] == (psycopg.errors.UndefinedFunction, "42883")
    assert live[6][7] is not None and live[6][7].startswith("No function matches")
    assert [entry["status"] for entry in live[1:4]] == [
        "INSERT 0 2",
        "UPDATE 2",
        "DELETE 0",
    ]


def _transaction_story(conn: psycopg.Connection[Any]) -> list[Any]:
    """The transaction status a connection shows through commits, blocks and an error."""
    story: list[Any] = [conn.info.transaction_status]
    conn.execute("SELECT %s::int", (1,))
    story.append(conn.info.transaction_status)
    conn.commit()
    story.append(conn.info.transaction_status)
    with conn.transaction():
        conn.execute("SELECT %s::int", (2,))
        story.append(conn.info.transaction_status)
        with conn.transaction():
            story.append(conn.info.transaction_status)
    story.append(conn.info.transaction_status)
    try:
        conn.execute("SELECT 1/0")
    except psycopg.errors.DivisionByZero:
        story.append(conn.info.transaction_status)
    conn.rollback()
    story.append(conn.info.transaction_status)
    with conn.transaction() as block:
        conn.execute("SELECT %s::int", (3,))
        raise psycopg.Rollback(block)
    story.append(conn.info.transaction_status)
    conn.autocommit = True
    conn.execute("SELECT %s::int", (4,))
    story.append((conn.info.transaction_status, conn.pgconn.transaction_status))
    story.append(conn.cursor().mogrify("SELECT %s, %s", ("it's", [1, 2])))
    conn.close()
    story.append((conn.closed, conn.info.status, conn.pgconn.transaction_status))
    return story


def test_the_transaction_status_follows_as_live(postgres_dsn: str) -> None:
    statements: Statements = [
        ("SELECT %s::int", (1,)),
        ("SELECT %s::int", (2,)),
        ("SELECT 1/0", None),
        ("SELECT %s::int", (3,)),
        ("SELECT %s::int", (4,)),
    ]
    capsule = _record(postgres_dsn, statements)
    client = psycopg.ClientCursor
    live = _transaction_story(psycopg.connect(postgres_dsn, cursor_factory=client))
    with replaying(capsule) as session:
        replayed = _transaction_story(psycopg.connect(closed_port_dsn(), cursor_factory=client))
    assert replayed == live
    assert session.usage.report()["unused"] == 0


def _named(conn: psycopg.Connection[Any]) -> list[Any]:
    with conn.cursor("walker", row_factory=dict_row) as cur:
        cur.execute("SELECT g, g * 2 AS twice FROM generate_series(1, 5) g")
        shown: list[Any] = [_description(cur), cur.rowcount]
        shown.append((cur.fetchmany(2), cur.rowcount, cur.rownumber))
        shown.append((cur.fetchone(), cur.rowcount))
        shown.append((list(cur), cur.rowcount))
    conn.close()
    return shown


def test_a_server_side_cursor_serves_its_rows_as_fetched(postgres_dsn: str) -> None:
    capsule = _record(
        postgres_dsn, [("SELECT g, g * 2 AS twice FROM generate_series(1, 5) g", None)]
    )
    live = _named(psycopg.connect(postgres_dsn))
    with replaying(capsule):
        replayed = _named(psycopg.connect(closed_port_dsn()))
    assert replayed == live


async def _async_run(dsn: str, statements: Statements) -> list[Any]:
    shown: list[Any] = []
    conn = await psycopg.AsyncConnection.connect(dsn, options=UTC, row_factory=dict_row)
    async with conn:
        for text, values in statements:
            try:
                cur = await conn.execute(text, values)
            except psycopg.Error as error:
                shown.append(_error(error))
                await conn.rollback()
                continue
            rows = await cur.fetchall() if cur.description is not None else None
            shown.append(_shown(cur, rows))
        async with conn.transaction(), conn.cursor() as cur:
            await cur.execute(ITEMS, {"lo": 2})
            shown.append([row async for row in cur])
        shown.append(conn.info.transaction_status)
    shown.append(conn.closed)
    return shown


def test_async_connections_and_cursors_replay_as_live(postgres_dsn: str) -> None:
    statements: Statements = [(VALUES, (True,)), (ITEMS, {"lo": 1}), ("SELECT 1/0", None)]
    capsule = _record(postgres_dsn, [*statements, (ITEMS, {"lo": 2})])
    live = asyncio.run(_async_run(postgres_dsn, statements))
    with replaying(capsule) as session:
        replayed = asyncio.run(_async_run(closed_port_dsn(), statements))
    assert replayed == live
    assert session.usage.report()["unused"] == 0


def test_an_extra_query_diverges_with_its_line(
    postgres_dsn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    capsule = _record(postgres_dsn, [(ITEMS, {"lo": 1})])
    capfd.readouterr()
    with replaying(capsule), psycopg.connect(closed_port_dsn()) as conn:
        assert conn.execute(ITEMS, {"lo": 1}).fetchall() == [(1, "pen"), (2, "ink")]
        with pytest.raises(DivergedError) as raised:
            conn.execute("SELECT name FROM items WHERE id = %s", (7,))
    line = (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT name FROM items WHERE id = %s",'
        '"values":[7]},"expected":null,"consumed":1,"total":1}'
    )
    assert raised.value.line == line
    assert capfd.readouterr().err == line + "\n"


def test_replay_never_opens_a_connection(postgres_dsn: str) -> None:
    """A listener on the DSN's port sees no connection attempt, sync, async or pooled."""
    import socket

    import psycopg_pool

    capsule = _record(postgres_dsn, [(ITEMS, {"lo": 1})] * 3)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        dsn = f"postgresql://nobody@127.0.0.1:{listener.getsockname()[1]}/stopped"

        async def async_call() -> Any:
            async with await psycopg.AsyncConnection.connect(dsn) as conn:
                return await (await conn.execute(ITEMS, {"lo": 1})).fetchall()

        with replaying(capsule) as session:
            with psycopg.connect(dsn) as conn:
                first = conn.execute(ITEMS, {"lo": 1}).fetchall()
            second = asyncio.run(async_call())
            with psycopg_pool.ConnectionPool(dsn, min_size=2, open=True) as pool:
                pool.wait()
                with pool.connection() as conn:
                    third = conn.execute(ITEMS, {"lo": 1}).fetchall()
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert first == second == third == [(1, "pen"), (2, "ink")]
    assert session.usage.report()["unused"] == 0


def test_uninstrument_restores_every_original() -> None:
    from psycopg import sql
    from psycopg.types import TypeInfo

    def originals() -> tuple[Any, ...]:
        return (
            psycopg.connect,
            psycopg.Connection.__dict__["connect"],
            psycopg.AsyncConnection.__dict__["connect"],
            TypeInfo.__dict__["fetch"],
            sql.Composable.__dict__["as_string"],
            sql.Identifier.__dict__["as_bytes"],
            sql.Literal.__dict__["as_bytes"],
        )

    before = originals()
    instrumentor = PsycopgReplayInstrumentor()
    instrumentor.instrument()
    assert psycopg.connect is not before[0]
    instrumentor.uninstrument()
    assert originals() == before


CROSS = (
    "SELECT '\\x00ff'::bytea AS blob, ARRAY['\\x01'::bytea] AS blobs, 1.50::numeric(5,2) AS price,"
    " '2024-05-01 10:00:00+02'::timestamptz AS at, '{\"k\": [1]}'::jsonb AS doc,"
    " int4range(1, 5) AS span_int, numrange(1.5, NULL) AS span_num,"
    " daterange('2024-01-01', '2024-02-01', '[]') AS span_day,"
    " tsrange('2024-01-01', '2024-01-02') AS span_naive,"
    " tstzrange('2024-01-01 00:00+02', '2024-01-02 00:00+02') AS span_at,"
    " 'empty'::int4range AS span_empty WHERE %s"
)


def test_a_capsule_recorded_with_psycopg3_replays_under_psycopg2(postgres_dsn: str) -> None:
    """The other way round: rows psycopg 3 read come back with the types psycopg2 returns."""
    from reproit_otel.instrumentation._pg3_values import encode_params
    from reproit_otel.instrumentation._pg_common import column_entry
    from tests.integration.pg_support import replay

    def app(connect: Callable[..., Any]) -> Any:
        with connect().cursor() as cur:
            cur.execute(CROSS, (True,))
            return cur.fetchall()

    recorded = record(postgres_dsn, app, otel=False)
    # The exchange as psycopg 3 reads it: its rows and description, encoded as recorded.
    with psycopg.connect(postgres_dsn, options=UTC) as conn:
        cur = conn.execute(CROSS, (True,))
        description = cur.description
        assert description is not None
        rows = [
            {
                column.name: encode_params([value])[0]
                for column, value in zip(description, row, strict=True)
            }
            for row in cur.fetchall()
        ]
        columns = [column_entry(column) for column in description]
    capsule = recorded.capsule()
    [effect] = [event for event in capsule["events"] if event.get("kind") == "effect"]
    response = effect["exchange"]["response"]
    assert response["rows"] != rows  # psycopg2 recorded other types (memoryview, NumericRange)
    response.update(rows=rows, columns=columns)
    replayed = replay(capsule, app, otel=False)
    assert seen(replayed.result) == seen(recorded.result)
    assert [type(value).__name__ for value in replayed.result[0]] == [
        "memoryview", "list", "Decimal", "datetime", "dict", "NumericRange", "NumericRange",
        "DateRange", "DateTimeRange", "DateTimeTZRange", "NumericRange",
    ]  # fmt: skip


def _spans_of(dsn: str, otel_first: bool, capsule: dict[str, Any] | None) -> list[Any]:
    """The spans OpenTelemetry's psycopg instrumentation makes for one sync and one async
    statement, live (``capsule`` None) or replayed, installed before or after the replay."""
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel = PsycopgInstrumentor()

    async def async_call() -> Any:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            return await (await conn.execute(ITEMS, {"lo": 2})).fetchall()

    def calls() -> Any:
        with psycopg.connect(dsn) as conn:
            first = conn.execute(ITEMS, {"lo": 1}).fetchall()
        return first, asyncio.run(async_call())

    if otel_first:
        otel.instrument(tracer_provider=provider, skip_dep_check=True)
    try:
        if capsule is None:
            if not otel_first:
                otel.instrument(tracer_provider=provider, skip_dep_check=True)
            results = calls()
        else:
            with replaying(capsule):
                if not otel_first:
                    otel.instrument(tracer_provider=provider, skip_dep_check=True)
                results = calls()
    finally:
        otel.uninstrument()
    assert results == ([(1, "pen"), (2, "ink")], [(2, "ink")])
    return [
        (span.name, span.attributes.get("db.statement"), span.attributes.get("db.system"))
        for span in exporter.get_finished_spans()
    ]


@pytest.fixture
def psycopg_connects() -> Iterator[None]:
    """Put psycopg's own ``connect`` back: OpenTelemetry's ``uninstrument`` leaves a bound
    method on the class (a subclass's ``connect`` would then make a plain ``Connection``)."""
    saved = (
        psycopg.connect,
        psycopg.Connection.__dict__["connect"],
        psycopg.AsyncConnection.__dict__["connect"],
    )
    yield
    psycopg.connect = saved[0]
    psycopg.Connection.connect = saved[1]  # type: ignore[method-assign]
    psycopg.AsyncConnection.connect = saved[2]  # type: ignore[method-assign]


@pytest.mark.usefixtures("psycopg_connects")
@pytest.mark.parametrize("otel_first", [True, False], ids=["otel-first", "replay-first"])
def test_opentelemetry_statement_spans_are_made_in_replay(
    postgres_dsn: str, otel_first: bool
) -> None:
    capsule = _record(postgres_dsn, [(ITEMS, {"lo": 1}), (ITEMS, {"lo": 2})])
    live = _spans_of(postgres_dsn, otel_first, None)
    replayed = _spans_of(closed_port_dsn(), otel_first, capsule)
    assert replayed == live
    assert [span[0] for span in live] == ["SELECT", "SELECT"]


def _composed(sql: Any) -> Any:
    return sql.SQL("SELECT {}, {} FROM (VALUES (1, 'pen')) AS {} WHERE {} = %s").format(
        sql.Identifier("t", "id"),
        sql.Literal("o'k"),
        sql.SQL("t ({})").format(sql.SQL(", ").join([sql.Identifier("id"), sql.Identifier("n")])),
        sql.Identifier("n"),
    )


def test_psycopg_sql_compositions_render_on_a_stub_as_live(postgres_dsn: str) -> None:
    from psycopg import sql as sql3
    from psycopg2 import sql as sql2

    def app(connect: Callable[..., Any]) -> Any:
        with connect().cursor() as cur:
            cur.execute(_composed(sql2), ("pen",))
            return cur.fetchall()

    capsule = record(postgres_dsn, app, otel=False).capsule()

    def run(conn: psycopg.Connection[Any]) -> Any:
        with conn:
            text = _composed(sql3).as_string(conn)
            with conn.cursor() as cur:
                return text, cur.execute(_composed(sql3), ("pen",)).fetchall()

    live = run(psycopg.connect(postgres_dsn))
    with replaying(capsule) as session:
        replayed = run(psycopg.connect(closed_port_dsn()))
    assert replayed == live
    assert live[0] == (
        'SELECT "t"."id", \'o\'\'k\' FROM (VALUES (1, \'pen\')) AS t ("id", "n") WHERE "n" = %s'
    )
    assert session.usage.report()["unused"] == 0


def test_install_replay_serves_psycopg3_and_uninstall_restores_it(
    postgres_dsn: str, tmp_path: Any
) -> None:
    """The replay setup (``REPROIT_REPLAY``) installs the psycopg 3 replay beside psycopg2's."""
    import json

    from reproit_otel.instrumentation._pg3_replay import AsyncStubConnection, StubConnection
    from reproit_otel.replay import install_replay, uninstall_replay

    capsule = _record(postgres_dsn, [(ITEMS, {"lo": 1})] * 2)
    path = tmp_path / "capsule.json"
    path.write_text(json.dumps({**capsule, "operation": "GET /orders"}), encoding="utf-8")
    connect = psycopg.connect

    async def async_call() -> Any:
        conn = await psycopg.AsyncConnection.connect(closed_port_dsn())
        assert isinstance(conn, AsyncStubConnection)
        return await (await conn.execute(ITEMS, {"lo": 1})).fetchall()

    install_replay(path)
    try:
        conn = psycopg.connect(closed_port_dsn())
        assert isinstance(conn, StubConnection)
        assert conn.execute(ITEMS, {"lo": 1}).fetchall() == [(1, "pen"), (2, "ink")]
        assert asyncio.run(async_call()) == [(1, "pen"), (2, "ink")]
        session = active_session()
        assert session is not None and session.usage.report()["unused"] == 0
    finally:
        uninstall_replay()
    assert psycopg.connect is connect


def test_copy_diverges_and_a_pipeline_is_served_statement_by_statement(
    postgres_dsn: str, capfd: pytest.CaptureFixture[str]
) -> None:
    capsule = _record(postgres_dsn, [(ITEMS, {"lo": 1})])
    capfd.readouterr()
    with replaying(capsule) as session, psycopg.connect(closed_port_dsn()) as conn:
        with conn.pipeline() as pipeline:
            cur = conn.execute(ITEMS, {"lo": 1})
            pipeline.sync()
            assert cur.fetchall() == [(1, "pen"), (2, "ink")]
        with pytest.raises(DivergedError) as raised:
            conn.cursor().copy("COPY things FROM STDIN")
    line = (
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"COPY things FROM STDIN"},'
        '"expected":null,"consumed":1,"total":1}'
    )
    assert (str(raised.value), raised.value.line) == (
        "reproit: psycopg COPY cannot be replayed",
        line,
    )
    assert capfd.readouterr().err == line + "\n"
    assert session.usage.report()["unused"] == 0


REPLAY_WITHOUT_PSYCOPG2 = """
import json, sys
sys.modules["psycopg2"] = None  # an application with psycopg 3 alone
import psycopg
from psycopg.rows import dict_row
from reproit_otel.instrumentation.psycopg import PsycopgReplayInstrumentor
from reproit_otel.replay.session import activate
from reproit_otel.wire.replay import ReplaySession

activate(ReplaySession(json.load(open(sys.argv[1]))))
PsycopgReplayInstrumentor().instrument()
with psycopg.connect(sys.argv[2], row_factory=dict_row) as conn:
    rows = conn.execute(sys.argv[3], {"lo": 1}).fetchall()
    try:
        conn.execute("SELECT 1/0")
    except psycopg.errors.DivisionByZero as error:
        failure = [type(error).__name__, error.sqlstate]
print(json.dumps({"rows": rows, "failure": failure, "psycopg2": sys.modules["psycopg2"]}))
"""


def test_psycopg3_replay_needs_no_psycopg2(postgres_dsn: str, tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    capsule = _record(postgres_dsn, [(ITEMS, {"lo": 1}), ("SELECT 1/0", None)])
    path = tmp_path / "capsule.json"
    path.write_text(json.dumps(capsule), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", REPLAY_WITHOUT_PSYCOPG2, str(path), closed_port_dsn(), ITEMS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "rows": [{"id": 1, "name": "pen"}, {"id": 2, "name": "ink"}],
        "failure": ["DivisionByZero", "22012"],
        "psycopg2": None,
    }
