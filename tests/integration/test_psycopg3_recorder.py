"""The psycopg 3 recorder against a real PostgreSQL: sync and async cursors, server-side
cursors, row factories, the types psycopg 3 loads, errors, COPY, transactions and pools, each
recorded as the ``pg`` exchange psycopg2 writes (and the same statements through psycopg2 give
the same exchanges)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import psycopg.errors
import pytest
from psycopg.rows import class_row, dict_row, namedtuple_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg.types.numeric import IntLoader
from psycopg.types.range import Range
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from reproit_otel.instrumentation import _pg3_record
from tests.integration import pg_support
from tests.integration.pg3_support import record, recording
from tests.integration.pipeline_support import ListSink
from tests.pgserver import fresh_database

pytestmark = pytest.mark.postgres

SETUP = "CREATE TABLE orders (id int PRIMARY KEY, sku text NOT NULL, qty int)"
INSERT = "INSERT INTO orders (id, sku, qty) VALUES (%s, %s, %s)"


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    """A fresh database holding three orders."""
    fresh = fresh_database(postgres_dsn)
    with psycopg.connect(fresh, autocommit=True) as conn:
        conn.execute(SETUP)
        for n in range(1, 4):
            conn.execute(INSERT, (n, f"sku-{n}", n * 10))
    return fresh


def _columns(*entries: tuple[str, int, int]) -> list[list[Any]]:
    """``columns`` of plain expression columns: name, type OID, internal size."""
    return [[name, oid, None, size, None, None, None, None, None] for name, oid, size in entries]


def _result(rows: list[dict[str, Any]], columns: Any, command: str = "SELECT") -> dict[str, Any]:
    return {"command": command, "rowCount": len(rows), "rows": rows, "columns": columns}


def _no_result(command: str, count: int, status: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"command": command, "rowCount": count, "rows": [], "columns": None}
    if status is not None:
        response["status"] = status
    return response


def _exchange(text: str, response: dict[str, Any], values: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {"text": text}
    if values is not None:
        request["values"] = values
    return {"protocol": "pg", "request": request, "response": response}


# The orders table's columns as psycopg2 describes them (table OID aside: it varies).
def _order_columns(exchange: dict[str, Any]) -> list[list[Any]]:
    columns = exchange["response"]["columns"]
    return [[*column[:7], column[8]] for column in columns]


ORDER_COLUMNS = [
    ["id", 23, None, 4, None, None, None, 1],
    ["sku", 25, None, -1, None, None, None, 2],
    ["qty", 23, None, 4, None, None, None, 3],
]
ORDER_ROWS = [{"id": n, "sku": f"sku-{n}", "qty": n * 10} for n in range(1, 4)]


def test_sync_statements_are_recorded_as_pg_exchanges(dsn: str) -> None:
    def app(dsn: str) -> Any:
        seen: list[Any] = []
        with psycopg.connect(dsn) as conn:
            cur = conn.cursor()
            cur.execute("SELECT id, sku, qty FROM orders ORDER BY id")
            seen.append((cur.fetchone(), cur.fetchmany(1), cur.fetchall()))
            cur.execute("SELECT id FROM orders WHERE qty > %s ORDER BY id", (15,))
            seen.append(list(cur))
            seen.append(conn.execute("SELECT count(*) AS n FROM orders").fetchone())
            cur.executemany(INSERT, [(4, "sku-4", 40), (5, "sku-5", 50)])
            seen.append((cur.statusmessage, cur.rowcount))
            cur.execute("UPDATE orders SET qty = qty + 1 WHERE id = %(id)s", {"id": 4})
            seen.append((cur.statusmessage, cur.rowcount))
        return seen

    recorded = record(dsn, app)
    assert recorded.result == [
        ((1, "sku-1", 10), [(2, "sku-2", 20)], [(3, "sku-3", 30)]),
        [(2,), (3,)],
        (3,),
        ("INSERT 0 1", 2),
        ("UPDATE 1", 1),
    ]
    exchanges = recorded.exchanges
    assert _order_columns(exchanges[0]) == ORDER_COLUMNS
    assert exchanges[0]["response"]["rows"] == ORDER_ROWS
    assert exchanges[1:] == [
        _exchange(
            "SELECT id FROM orders WHERE qty > %s ORDER BY id",
            {
                **_result([{"id": 2}, {"id": 3}], None),
                "columns": exchanges[1]["response"]["columns"],
            },
            [15],
        ),
        _exchange(
            "SELECT count(*) AS n FROM orders",
            _result([{"n": 3}], _columns(("n", 20, 8))),
        ),
        # psycopg's status is the last statement's; rowcount is the total.
        _exchange(
            INSERT,
            _no_result("INSERT", 2, status="INSERT 0 1"),
            [[4, "sku-4", 40], [5, "sku-5", 50]],
        ),
        _exchange(
            "UPDATE orders SET qty = qty + 1 WHERE id = %(id)s",
            _no_result("UPDATE", 1),
            {"id": 4},
        ),
    ]
    assert [(e["effect"], e["resource"]) for e in recorded.events[1:-1]] == [
        ("read", "pg"),
        ("read", "pg"),
        ("read", "pg"),
        ("write", "pg"),
        ("write", "pg"),
    ]
    assert recorded.returned["effectsComplete"] is True
    # The OpenTelemetry statement spans are each covered by their exchange.
    assert recorded.spans == ["SELECT", "SELECT", "SELECT", "INSERT", "UPDATE", "GET /orders"]


@dataclass
class Order:
    id: int
    sku: str
    qty: int


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        (tuple_row, [(1, "sku-1", 10), (2, "sku-2", 20), (3, "sku-3", 30)]),
        (dict_row, ORDER_ROWS),
        (namedtuple_row, [(1, "sku-1", 10), (2, "sku-2", 20), (3, "sku-3", 30)]),
        (class_row(Order), [Order(n, f"sku-{n}", n * 10) for n in range(1, 4)]),
    ],
    ids=["tuple_row", "dict_row", "namedtuple_row", "class_row"],
)
def test_every_row_factory_records_the_plain_values(dsn: str, factory: Any, expected: Any) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn, row_factory=factory) as conn:
            return conn.execute("SELECT id, sku, qty FROM orders ORDER BY id").fetchall()

    recorded = record(dsn, app)
    assert recorded.result == expected
    [exchange] = recorded.exchanges
    assert exchange["response"]["rows"] == ORDER_ROWS
    assert _order_columns(exchange) == ORDER_COLUMNS


def test_the_types_psycopg3_loads_are_encoded(dsn: str) -> None:
    statement = (
        "SELECT 12.50::numeric(6,2) AS price, %s::timestamptz AS at, %s::uuid AS ref, "
        "ARRAY[1, 2, NULL]::int[] AS nums, %s::jsonb AS doc, int4range(1, 5) AS span, "
        "'[2024-01-01,)'::daterange AS open, 'empty'::int4range AS none, "
        "'\\x00ff'::bytea AS raw, '1 day 2 hours'::interval AS wait, %s::int4range AS given"
    )
    ref = uuid.UUID("5f0e2b0c-7a44-4c51-9a3b-2f8d3c1e0a11")
    at = dt.datetime(2024, 3, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))

    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn:
            conn.execute("SET TIME ZONE 'UTC'")
            params = (at, ref, Jsonb({"b": [1, 2], "a": None}), Range(1, 3))
            return conn.execute(statement, params).fetchone()

    recorded = record(dsn, app)
    assert recorded.result == (
        Decimal("12.50"),
        dt.datetime(2024, 3, 1, 10, 30, tzinfo=dt.timezone.utc),
        ref,
        [1, 2, None],
        {"a": None, "b": [1, 2]},
        Range(1, 5, "[)"),
        Range(dt.date(2024, 1, 1), None, "[)"),
        Range(empty=True),
        b"\x00\xff",
        dt.timedelta(days=1, hours=2),
        Range(1, 3, "[)"),
    )
    setting, select = recorded.exchanges
    assert setting == {
        **_exchange("SET TIME ZONE 'UTC'", _no_result("SET", 0)),
        "scope": "connection",
    }
    assert select["request"] == {
        "text": statement,
        "values": [
            {"$pg": "datetime", "v": "2024-03-01T12:30:00+02:00"},
            {"$pg": "uuid", "v": str(ref)},
            {"$pg": "sql", "v": '\'{"b": [1, 2], "a": null}\''},  # as psycopg2's Json
            {"$pg": "range", "type": "Range", "v": [1, 3, "[)"]},
        ],
    }
    assert select["response"]["rows"] == [
        {
            "price": {"$pg": "decimal", "v": "12.50"},
            "at": {"$pg": "datetime", "v": "2024-03-01T10:30:00+00:00"},
            "ref": {"$pg": "uuid", "v": str(ref)},
            "nums": [1, 2, None],
            "doc": {"a": None, "b": [1, 2]},
            "span": {"$pg": "range", "type": "Range", "v": [1, 5, "[)"]},
            "open": {
                "$pg": "range",
                "type": "Range",
                "v": [{"$pg": "date", "v": "2024-01-01"}, None, "[)"],
            },
            "none": {"$pg": "range", "type": "Range", "v": None},
            "raw": {"$pg": "bytes", "v": "AP8="},
            "wait": {"$pg": "timedelta", "v": [1, 7200, 0]},
            "given": {"$pg": "range", "type": "Range", "v": [1, 3, "[)"]},
        }
    ]
    assert [column[:6] for column in select["response"]["columns"]] == [
        ["price", 1700, None, 6, 6, 2],
        ["at", 1184, None, 8, None, None],
        ["ref", 2950, None, 16, None, None],
        ["nums", 1007, None, -1, None, None],
        ["doc", 3802, None, -1, None, None],
        ["span", 3904, None, -1, None, None],
        ["open", 3912, None, -1, None, None],
        ["none", 3904, None, -1, None, None],
        ["raw", 17, None, -1, None, None],
        ["wait", 1186, None, 16, None, None],
        ["given", 3904, None, -1, None, None],
    ]


def test_a_failing_statement_records_its_sqlstate_and_libpq_text(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn:
            try:
                conn.execute(INSERT, (1, "again", 1))
            except psycopg.errors.UniqueViolation as error:
                conn.rollback()
                return (error.sqlstate, str(error))
        return None

    recorded = record(dsn, app)
    assert recorded.result == (
        "23505",
        'duplicate key value violates unique constraint "orders_pkey"\n'
        "DETAIL:  Key (id)=(1) already exists.",
    )
    assert recorded.exchanges == [
        _exchange(
            INSERT,
            {
                "error": {
                    "message": recorded.result[1],
                    "code": "23505",
                    "type": "psycopg.errors.UniqueViolation",
                    "pgerror": "ERROR:  " + recorded.result[1] + "\n",
                }
            },
            [1, "again", 1],
        )
    ]
    assert recorded.returned["effectsComplete"] is True


def test_the_same_statements_give_the_same_exchanges_through_psycopg2_and_psycopg3(
    dsn: str,
) -> None:
    """One capsule whatever the driver: success, DDL, named cursors, errors (but for the
    driver's own exception class and message) and connection-scope statements."""

    def run(conn: Any, named_cursor: Any) -> None:
        cur = conn.cursor()
        cur.execute("SET TIME ZONE 'UTC'")
        cur.execute("SELECT 1")
        cur.execute("CREATE TEMP TABLE notes (id serial PRIMARY KEY, body varchar(20), n numeric)")
        cur.execute("INSERT INTO notes (body, n) VALUES (%s, %s)", ("hello", Decimal("1.5")))
        cur.execute(
            "SELECT id, body, n, 2.50::numeric(7,3) AS m, now() - now() AS zero, "
            "'2024-01-31'::date AS day, ARRAY['a', 'b'] AS tags, '{\"k\": 1}'::jsonb AS doc "
            "FROM notes"
        )
        cur.execute("SELECT id, sku, qty FROM orders ORDER BY id")
        named = named_cursor(conn)
        named.execute("SELECT id FROM orders WHERE id > %s ORDER BY id", (1,))
        named.fetchmany(1)
        named.fetchall()
        named.close()
        cur.execute("UPDATE orders SET qty = 0 WHERE id > %(id)s", {"id": 100})
        try:
            cur.execute("SELECT * FROM no_such_table")
        except Exception:
            conn.rollback()
        conn.close()

    def app2(connect: Any) -> None:
        run(connect(), lambda conn: conn.cursor("named"))

    def app3(dsn: str) -> None:
        run(psycopg.connect(dsn), lambda conn: conn.cursor(name="named"))

    through2 = pg_support.record(dsn, app2).exchanges
    through3 = record(dsn, app3).exchanges

    def driverless(exchanges: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each exchange with its error's class and message trailer of either driver, and
        whether a column has a table (the OID of the temporary table differs per run)."""
        out = []
        for exchange in exchanges:
            response = exchange["response"]
            error = response.get("error")
            if error is not None:
                error = {**error, "type": error["type"].split(".")[-1]}
                error["message"] = error["message"].rstrip("\n")
                response = {"error": error}
            elif response["columns"] is not None:
                columns = [[*c[:7], c[7] is not None, c[8]] for c in response["columns"]]
                response = {**response, "columns": columns}
            out.append({**exchange, "response": response})
        return out

    assert driverless(through3) == driverless(through2)
    assert len(through3) == 9
    assert through2[-1]["response"]["error"]["type"] == "psycopg2.errors.UndefinedTable"
    assert through3[-1]["response"]["error"]["type"] == "psycopg.errors.UndefinedTable"


def test_server_side_cursors_record_the_rows_fetched(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            with conn.cursor(name="all") as cur:
                cur.execute("SELECT id, sku FROM orders ORDER BY id")
                first = (cur.fetchone(), cur.fetchmany(1), cur.fetchall())
            with conn.cursor(name="iterated") as cur:
                cur.itersize = 2
                cur.execute("SELECT id FROM orders WHERE id >= %s ORDER BY id", (2,))
                iterated = list(cur)
            with conn.cursor(name="partly") as cur:
                cur.execute("SELECT id FROM orders ORDER BY id")
                partly = cur.fetchone()
            return first, iterated, partly

    recorded = record(dsn, app)
    assert recorded.result == (
        ({"id": 1, "sku": "sku-1"}, [{"id": 2, "sku": "sku-2"}], [{"id": 3, "sku": "sku-3"}]),
        [{"id": 2}, {"id": 3}],
        {"id": 1},
    )
    declared = {"command": "DECLARE", "status": "DECLARE CURSOR"}
    first, iterated, partly = recorded.exchanges
    assert first["request"] == {"text": "SELECT id, sku FROM orders ORDER BY id"}
    assert {k: first["response"][k] for k in ("command", "status", "rowCount", "rows")} == {
        **declared,
        "rowCount": 3,
        "rows": [{"id": n, "sku": f"sku-{n}"} for n in range(1, 4)],
    }
    assert {k: iterated["response"][k] for k in ("command", "rowCount", "rows")} == {
        "command": "DECLARE",
        "rowCount": 2,
        "rows": [{"id": 2}, {"id": 3}],
    }
    assert iterated["request"]["values"] == [2]
    # Closed after one row: the exchange holds what the application fetched.
    assert {k: partly["response"][k] for k in ("rowCount", "rows")} == {
        "rowCount": 1,
        "rows": [{"id": 1}],
    }
    assert recorded.returned["effectsComplete"] is True


def test_a_scrolled_server_side_cursor_makes_the_capture_incomplete(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn, conn.cursor(name="s", scrollable=True) as cur:
            cur.execute("SELECT id FROM orders ORDER BY id")
            cur.fetchone()
            cur.scroll(1)
            return cur.fetchall()

    recorded = record(dsn, app)
    assert recorded.result == [(3,)]
    assert recorded.exchanges == []
    assert recorded.returned["effectsComplete"] is False


def test_copy_and_stream_are_honestly_incomplete(dsn: str) -> None:
    def copying(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            with cur.copy("COPY orders (id, sku, qty) FROM STDIN") as copy:
                copy.write_row((7, "sku-7", 70))
            return cur.execute("SELECT count(*) FROM orders").fetchone()

    def streaming(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn, conn.cursor() as cur:
            return list(cur.stream("SELECT id FROM orders ORDER BY id"))

    copied = record(dsn, copying)
    assert copied.result == (4,)
    assert copied.returned["effectsComplete"] is False
    streamed = record(dsn, streaming)
    assert streamed.result == [(1,), (2,), (3,), (7,)]  # the copied row was committed
    assert streamed.returned["effectsComplete"] is False


def test_transactions_record_their_statements_and_no_brackets(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn:
            with conn.transaction():
                conn.execute("UPDATE orders SET qty = 1 WHERE id = 1")
                try:
                    with conn.transaction():
                        conn.execute("UPDATE orders SET qty = 2 WHERE id = 2")
                        raise RuntimeError("inner block fails")
                except RuntimeError:
                    pass
            return conn.execute("SELECT id, qty FROM orders ORDER BY id").fetchall()

    recorded = record(dsn, app)
    assert recorded.result == [(1, 1), (2, 20), (3, 30)]
    assert [e["request"]["text"] for e in recorded.exchanges] == [
        "UPDATE orders SET qty = 1 WHERE id = 1",
        "UPDATE orders SET qty = 2 WHERE id = 2",
        "SELECT id, qty FROM orders ORDER BY id",
    ]
    assert recorded.returned["effectsComplete"] is True


def test_async_connections_and_cursors_are_recorded(dsn: str) -> None:
    async def app(dsn: str) -> Any:
        async with await psycopg.AsyncConnection.connect(dsn, row_factory=dict_row) as conn:
            cur = conn.cursor()
            await cur.execute("SELECT id FROM orders WHERE id = %s", (1,))
            one = await cur.fetchone()
            await cur.executemany(INSERT, [(6, "sku-6", 60)])
            async with conn.cursor(name="server") as named:
                await named.execute("SELECT sku FROM orders WHERE id > %s ORDER BY id", (4,))
                rows = [row async for row in named]
            many = await (await conn.execute("SELECT count(*) AS n FROM orders")).fetchall()
            return one, rows, many

    recorded = record(dsn, app)
    assert recorded.result == ({"id": 1}, [{"sku": "sku-6"}], [{"n": 4}])
    assert [
        (e["request"]["text"], e["request"].get("values"), e["response"]["rows"])
        for e in recorded.exchanges
    ] == [
        ("SELECT id FROM orders WHERE id = %s", [1], [{"id": 1}]),
        (INSERT, [[6, "sku-6", 60]], []),
        ("SELECT sku FROM orders WHERE id > %s ORDER BY id", [4], [{"sku": "sku-6"}]),
        ("SELECT count(*) AS n FROM orders", None, [{"n": 4}]),
    ]
    assert recorded.returned["effectsComplete"] is True


def test_concurrent_tasks_keep_their_operations_on_one_event_loop(dsn: str) -> None:
    """Statements of the tasks a request gathers belong to that request; two requests
    served concurrently on one loop never mix."""

    async def main(session: Any) -> None:
        pool = AsyncConnectionPool(dsn, min_size=4, open=False)
        await pool.open(wait=True)

        async def one(order: int) -> Any:
            async with pool.connection() as conn:
                await asyncio.sleep(0.01 * (3 - order))  # finish in reverse order
                cur = await conn.execute("SELECT sku FROM orders WHERE id = %s", (order,))
                return await cur.fetchone()

        async def request(name: str, orders: list[int]) -> Any:
            with session.operation(name):
                return await asyncio.gather(*(one(order) for order in orders))

        try:
            return await asyncio.gather(request("GET /a", [1, 2]), request("GET /b", [3]))
        finally:
            await pool.close()

    with recording() as session:
        results = asyncio.run(main(session))
        operations = session.recorded(2)
    assert results == [[("sku-1",), ("sku-2",)], [("sku-3",)]]
    seen = {
        op.events[0]["operation"]: sorted(e["request"]["values"][0] for e in op.exchanges)
        for op in operations
    }
    assert seen == {"GET /a": [1, 2], "GET /b": [3]}
    assert all(op.returned["effectsComplete"] is True for op in operations)


def test_a_warm_pool_records_its_check_as_connection_scope_and_carries_settings(
    dsn: str,
) -> None:
    def configure(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SET TIME ZONE 'Europe/Berlin'")
        conn.commit()

    def boot(dsn: str) -> ConnectionPool[Any]:
        pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=1,
            configure=configure,
            check=ConnectionPool.check_connection,
            kwargs={"row_factory": dict_row},
            open=True,
        )
        pool.wait()
        for _ in range(3):  # warm: earlier requests used the connection
            with pool.connection() as conn:
                conn.execute("SELECT 1")
        return pool

    def app(dsn: str, pool: ConnectionPool[Any]) -> Any:
        try:
            with pool.connection() as conn:
                return conn.execute("SELECT sku FROM orders WHERE id = %s", (2,)).fetchone()
        finally:
            pool.close()

    recorded = record(dsn, app, before=boot)
    assert recorded.result == {"sku": "sku-2"}
    check, select = recorded.exchanges
    assert check == {
        **_exchange("", {"command": None, "rowCount": 0, "rows": [], "columns": None}),
        "scope": "connection",
        "setup": [
            _exchange("SET TIME ZONE 'Europe/Berlin'", _no_result("SET", 0)),
        ],
    }
    assert select["request"] == {"text": "SELECT sku FROM orders WHERE id = %s", "values": [2]}
    assert select["response"]["rows"] == [{"sku": "sku-2"}]
    assert recorded.returned["effectsComplete"] is True


def test_the_recorder_works_installed_before_or_after_opentelemetry(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn:
            return conn.execute("SELECT qty FROM orders WHERE id = 3").fetchone()

    after = record(dsn, app)
    before = record(dsn, app, otel_first=True)
    assert after.result == before.result == (30,)
    assert after.exchanges == before.exchanges
    assert before.returned["effectsComplete"] is after.returned["effectsComplete"] is True
    assert before.spans == after.spans == ["SELECT", "GET /orders"]


def test_without_the_recorder_psycopg3_spans_leave_the_capture_incomplete(dsn: str) -> None:
    """The control: OpenTelemetry's statement span alone has no exchange."""
    with recording(recorder=False) as session:
        with session.operation(), psycopg.connect(dsn) as conn:
            conn.execute("SELECT 1")
        [recorded] = session.recorded()
    assert recorded.exchanges == []
    assert recorded.spans == ["SELECT", "GET /orders"]
    assert recorded.returned["effectsComplete"] is False


def test_a_large_result_keeps_64_rows_and_says_it_was_truncated(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn:
            cur = conn.execute("SELECT n FROM generate_series(1, 100) AS n")
            whole = cur.fetchall()
            with conn.cursor(name="big") as named:
                named.execute("SELECT n FROM generate_series(1, 100) AS n")
                fetched = named.fetchall()
            return len(whole), len(fetched)

    recorded = record(dsn, app)
    assert recorded.result == (100, 100)
    for exchange in recorded.exchanges:
        response = exchange["response"]
        assert (response["rowCount"], response.get("truncated"), len(response["rows"])) == (
            100,
            True,
            64,
        )
        assert response["rows"][-1] == {"n": 64}


def test_pipeline_mode_is_honestly_incomplete(dsn: str) -> None:
    def app(dsn: str) -> Any:
        with psycopg.connect(dsn) as conn:
            with conn.pipeline():
                cur = conn.execute("SELECT qty FROM orders WHERE id = %s", (2,))
            return cur.fetchone()

    recorded = record(dsn, app)
    assert recorded.result == (20,)
    assert recorded.exchanges == []
    assert recorded.returned["effectsComplete"] is False


class CountingLoader(IntLoader):
    """psycopg's own text loader of integers, counting the values it loads."""

    loaded = 0

    def load(self, data: Any) -> Any:
        CountingLoader.loaded += 1
        return super().load(data)


class HealthyNoting(ListSink):
    """A sink that, like the uploader, only hears of a healthy operation."""

    def __init__(self) -> None:
        super().__init__()
        self.healthy = 0

    def note_healthy(self) -> None:
        self.healthy += 1


def test_rows_are_read_for_the_recording_only_when_the_operation_may_be_uploaded(
    dsn: str,
) -> None:
    """A healthy request's rows are read once, by the application; a failing request's are
    read once more, when its exchange is built for the upload."""
    statement = "SELECT n::int4 FROM generate_series(1, 10) AS n"
    sink = HealthyNoting()
    CountingLoader.loaded = 0
    with recording(sink=sink) as session, psycopg.connect(dsn) as conn:
        conn.adapters.register_loader("int4", CountingLoader)
        with session.operation("GET /healthy") as span:
            assert len(conn.execute(statement).fetchall()) == 10
            span.set_attribute("http.response.status_code", 200)
        assert (sink.healthy, CountingLoader.loaded) == (1, 10)
        with session.operation("GET /failing") as span:
            assert len(conn.execute(statement).fetchall()) == 10
            span.set_attribute("http.response.status_code", 500)
        [trace] = sink.wait_for(1)
        [exchange] = [e["exchange"] for e in trace.events if e["kind"] == "effect"]
        assert (sink.healthy, CountingLoader.loaded) == (1, 30)
    assert exchange["response"]["rows"] == [{"n": n} for n in range(1, 11)]


def test_closing_the_connection_finishes_a_server_side_cursors_exchange(dsn: str) -> None:
    async def app(dsn: str) -> Any:
        conn = await psycopg.AsyncConnection.connect(dsn)
        cur = conn.cursor(name="left-open")
        await cur.execute("SELECT id FROM orders ORDER BY id")
        first = await cur.fetchone()
        await conn.close()
        return first

    recorded = record(dsn, app)
    assert recorded.result == (1,)
    [exchange] = recorded.exchanges
    assert (exchange["response"]["rowCount"], exchange["response"]["rows"]) == (1, [{"id": 1}])
    assert recorded.returned["effectsComplete"] is True


RECORD_WITHOUT_PSYCOPG2 = """
import json, sys
sys.modules["psycopg2"] = None  # an application with psycopg 3 alone
import psycopg
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind
from reproit_otel.capture.processor import ReproitSpanProcessor
from reproit_otel.config import read_config
from reproit_otel.instrumentation.psycopg import install_recorder

class Sink:
    traces = []
    def submit(self, trace):
        self.traces.append(trace)

provider = TracerProvider()
provider.add_span_processor(ReproitSpanProcessor(read_config({}), [Sink()]))
install_recorder()
with provider.get_tracer("app").start_as_current_span("GET /x", kind=SpanKind.SERVER):
    with psycopg.connect(sys.argv[1]) as conn:
        conn.execute("SELECT qty FROM orders WHERE id = %s", (2,)).fetchone()
        try:
            conn.execute("SELECT 1/0")
        except psycopg.errors.DivisionByZero:
            pass
events = Sink.traces[0].events
exchanges = [e["exchange"] for e in events if e["kind"] == "effect"]
print(json.dumps({"exchanges": exchanges, "psycopg2": sys.modules["psycopg2"]}))
"""


def test_the_recorder_needs_no_psycopg2(dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", RECORD_WITHOUT_PSYCOPG2, dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    answer = json.loads(done.stdout)
    assert answer["psycopg2"] is None
    select, failure = answer["exchanges"]
    assert (select["request"], select["response"]["rows"]) == (
        {"text": "SELECT qty FROM orders WHERE id = %s", "values": [2]},
        [{"qty": 20}],
    )
    assert failure["response"]["error"]["code"] == "22012"


@pytest.mark.parametrize(
    ("release", "after_close"),
    [("3.2.13", False), ("3.3.6", False), ("3.3.7", True), ("3.4.0", True), ("4.0.0", True)],
)
def test_rows_are_loaded_after_the_request_only_where_psycopg_allows_it(
    monkeypatch: pytest.MonkeyPatch, release: str, after_close: bool
) -> None:
    # Before 3.3.7 psycopg's C array loader reads the connection as it loads, and a closed
    # connection crashes the process (docs/versions.md).
    monkeypatch.setattr(psycopg, "__version__", release)
    assert _pg3_record._loads_after_close() is after_close


def test_rows_loaded_as_they_arrive_record_the_same_exchanges(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The path taken under psycopg before 3.3.7 (rows loaded while the connection is open)
    records exactly what the deferred one does, arrays and server-side cursors included."""

    def app(dsn: str) -> Any:
        with psycopg.connect(dsn, row_factory=dict_row) as conn:
            plain = conn.execute("SELECT ARRAY['a', 'b'] AS tags, id FROM orders ORDER BY id")
            tags = plain.fetchall()
            with conn.cursor(name="fetched") as cur:
                cur.itersize = 2
                cur.execute("SELECT id, ARRAY[id, qty] AS pair FROM orders ORDER BY id")
                pairs = list(cur)
        return tags, pairs  # the connection is closed before the capture is built

    deferred = record(dsn, app)
    monkeypatch.setattr(_pg3_record, "_EAGER", True)
    eager = record(dsn, app)
    assert eager.result == deferred.result
    assert [e["response"] for e in eager.exchanges] == [e["response"] for e in deferred.exchanges]
    assert [e["response"]["rows"][0] for e in eager.exchanges] == [
        {"tags": ["a", "b"], "id": 1},
        {"id": 1, "pair": [1, 10]},
    ]
