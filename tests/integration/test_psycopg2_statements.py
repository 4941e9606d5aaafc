"""executemany, callproc, errors, extras helpers and transactions: record, then replay."""

from __future__ import annotations

from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extras
import pytest
from psycopg2 import sql

from tests.integration.pg_support import closed_port_dsn, record, replay, seen

pytestmark = pytest.mark.postgres

SETUP = "CREATE TEMP TABLE orders (id int PRIMARY KEY, sku text NOT NULL, qty int)"


def _failure(error: BaseException) -> Any:
    return (
        type(error).__module__,
        type(error).__name__,
        getattr(error, "pgcode", None),
        getattr(error, "pgerror", None),
        str(error),
    )


def _statements(connect: Any) -> Any:
    conn = connect()
    seen_values: list[Any] = []
    cur = conn.cursor()
    cur.execute(SETUP)
    seen_values.append(("setup", cur.statusmessage, cur.rowcount, cur.description))
    cur.executemany(
        "INSERT INTO orders (id, sku, qty) VALUES (%s, %s, %s)",
        ((n, f"sku-{n}", n * 10) for n in range(1, 4)),
    )
    seen_values.append(("executemany", cur.statusmessage, cur.rowcount))
    try:
        cur.fetchall()
    except psycopg2.ProgrammingError as error:
        seen_values.append(("fetch after executemany", _failure(error)))
    try:
        cur.execute("INSERT INTO orders (id, sku) VALUES (%s, %s)", (1, "duplicate"))
    except psycopg2.errors.UniqueViolation as error:
        seen_values.append(("unique", _failure(error)))
    conn.rollback()
    cur.execute(SETUP)
    try:
        cur.execute("SELEC 1")
    except psycopg2.errors.SyntaxError as error:
        seen_values.append(("syntax", _failure(error)))
    conn.rollback()
    cur.execute(SETUP)
    try:
        cur.execute("SELECT %s, %s", (1,))
    except IndexError as error:
        seen_values.append(("client-side", _failure(error)))
    cur.execute(
        "CREATE OR REPLACE FUNCTION pg_temp.add_qty(a int, b int) RETURNS int "
        "AS 'SELECT a + b' LANGUAGE sql"
    )
    returned = cur.callproc("pg_temp.add_qty", (2, 40))
    seen_values.append(("callproc", returned, cur.fetchall(), cur.statusmessage))
    cur.callproc("pg_temp.add_qty", {"a": 1, "b": 2})
    seen_values.append(("callproc named", cur.fetchone()))
    cur.execute("UPDATE orders SET qty = 0 WHERE id > %(id)s", {"id": 100})
    seen_values.append(("update", cur.statusmessage, cur.rowcount))
    conn.close()
    return seen_values


def test_statements_and_errors_round_trip(postgres_dsn: str) -> None:
    recorded = record(postgres_dsn, _statements)
    replayed = replay(recorded.capsule(), _statements)
    assert replayed.result == recorded.result
    assert replayed.session.consumed == replayed.session.total == 11
    assert [(e["effect"], e["key"]) for e in recorded.events[1:-1]] == [
        ("write", SETUP),
        ("write", "INSERT INTO orders (id, sku, qty) VALUES (%s, %s, %s)"),
        ("write", "INSERT INTO orders (id, sku) VALUES (%s, %s)"),
        ("write", SETUP),
        ("write", "SELEC 1"),
        ("write", SETUP),
        ("read", "SELECT %s, %s"),
        (
            "write",
            "CREATE OR REPLACE FUNCTION pg_temp.add_qty(a int, b int) RETURNS int "
            "AS 'SELECT a + b' LANGUAGE sql",
        ),
        ("read", "SELECT * FROM pg_temp.add_qty(%s,%s)"),
        ("read", "SELECT * FROM pg_temp.add_qty(a:=%(a)s,b:=%(b)s)"),
        ("write", "UPDATE orders SET qty = 0 WHERE id > %(id)s"),
    ]
    exchanges = recorded.exchanges
    # PROTOCOL 4.4 as the reference records it: the command word; a count the driver does not
    # know (DDL: psycopg2's -1) is the number of rows. The whole status rides beside them only
    # where the word and the count do not tell it.
    shapes = [
        (e["response"].get("command"), e["response"].get("rowCount"), e["response"].get("status"))
        for e in exchanges
        if "error" not in e["response"]
    ]
    assert shapes[:2] == [("CREATE", 0, "CREATE TABLE"), ("INSERT", 3, "INSERT 0 1")]
    assert ("SELECT", 1, None) in shapes
    assert shapes[-1][0] == "UPDATE" and shapes[-1][2] is None
    assert exchanges[1] == {
        "protocol": "pg",
        "request": {
            "text": "INSERT INTO orders (id, sku, qty) VALUES (%s, %s, %s)",
            "values": [[1, "sku-1", 10], [2, "sku-2", 20], [3, "sku-3", 30]],
        },
        # The reference's command word and count; psycopg2's status of the last set says
        # more (one row), so it is kept for replay's statusmessage.
        "response": {
            "command": "INSERT",
            "rowCount": 3,
            "rows": [],
            "status": "INSERT 0 1",
            "columns": None,
        },
    }
    assert exchanges[2] == {
        "protocol": "pg",
        "request": {
            "text": "INSERT INTO orders (id, sku) VALUES (%s, %s)",
            "values": [1, "duplicate"],
        },
        "response": {
            "error": {
                "message": 'duplicate key value violates unique constraint "orders_pkey"\n'
                "DETAIL:  Key (id)=(1) already exists.\n",
                "code": "23505",
                "type": "psycopg2.errors.UniqueViolation",
                "pgerror": 'ERROR:  duplicate key value violates unique constraint "orders_pkey"\n'
                "DETAIL:  Key (id)=(1) already exists.\n",
            }
        },
    }
    assert exchanges[4]["response"]["error"]["code"] == "42601"
    assert exchanges[6]["response"] == {
        "error": {
            "message": "tuple index out of range",
            "code": None,
            "type": "builtins.IndexError",
        }
    }


def test_recorded_errors_raise_the_same_class_and_pgcode(postgres_dsn: str) -> None:
    def app(connect: Any) -> Any:
        cur = connect().cursor()
        cur.execute(SETUP)
        cur.execute("INSERT INTO orders VALUES (1, 'a', 1)")
        try:
            cur.execute("INSERT INTO orders VALUES (1, 'b', 2)")
        except psycopg2.Error as error:
            return error

    recorded = record(postgres_dsn, app)
    replayed = replay(recorded.capsule(), app)
    live, served = recorded.result, replayed.result
    assert type(served) is type(live) is psycopg2.errors.UniqueViolation
    assert (served.pgcode, served.pgerror, str(served)) == (live.pgcode, live.pgerror, str(live))
    assert served.pgcode == "23505"


def _extras(connect: Any) -> Any:
    conn = connect()
    psycopg2.extras.register_default_jsonb(conn)
    psycopg2.extras.register_default_json(conn, loads=lambda text: {"raw": text})
    psycopg2.extras.register_uuid(conn_or_curs=conn)
    psycopg2.extras.register_json(conn)  # looks the json oids up with a query
    result: list[Any] = []
    with conn:
        with conn.cursor() as cur:
            cur.execute(SETUP)
            psycopg2.extras.execute_values(
                cur,
                "INSERT INTO orders (id, sku, qty) VALUES %s",
                [(1, "it's", 1), (2, "naïve \\ back", None), (3, "x", 3)],
                page_size=2,
            )
            result.append(("values", cur.statusmessage, cur.rowcount))
            rows = psycopg2.extras.execute_values(
                cur,
                "UPDATE orders SET qty = data.q FROM (VALUES %s) AS data (id, q) "
                "WHERE orders.id = data.id RETURNING orders.id, orders.qty",
                [(1, 11), (3, 33)],
                fetch=True,
            )
            result.append(("values fetch", rows))
            psycopg2.extras.execute_batch(
                cur, "UPDATE orders SET sku = %s WHERE id = %s", [("b1", 1), ("b2", 2)]
            )
            result.append(("batch", cur.statusmessage))
            query = sql.SQL("SELECT {} FROM {} WHERE {} = %s ORDER BY 1").format(
                sql.SQL(", ").join([sql.Identifier("id"), sql.Identifier("sku")]),
                sql.Identifier("orders"),
                sql.Identifier("qty"),
            )
            cur.execute(query, (33,))
            result.append(("composed", cur.fetchall(), query.as_string(cur)))
            cur.execute(
                "SELECT %s::json AS j, %s::uuid AS u",
                ('{"a": 1}', "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
            )
            result.append(("typed", seen(cur.fetchone())))
            result.append(("mogrify", cur.mogrify("SELECT %s, %s", ("q'uote", b"\x00\x01"))))
        result.append(("status", conn.closed, conn.get_transaction_status()))
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SHOW standard_conforming_strings")
        result.append(("show", cur.fetchone()))
    conn.commit()
    conn.rollback()
    conn.close()
    result.append(("closed", conn.closed))
    return result


def test_extras_helpers_and_transactions_round_trip(postgres_dsn: str) -> None:
    recorded = record(postgres_dsn, _extras)
    replayed = replay(recorded.capsule(), _extras)
    assert replayed.result == recorded.result
    assert not replayed.session.diverged
    usage = replayed.session.usage.report()
    # The pg_type lookup and SHOW are connection-scope: answered, never consumed.
    assert (usage["unused"], usage["ambientExchanges"]) == (0, 2)


def test_replay_never_touches_the_database(postgres_dsn: str) -> None:
    dsn = closed_port_dsn()
    with pytest.raises(psycopg2.OperationalError):
        psycopg2.connect(dsn)  # nothing listens there

    def app(connect: Any) -> Any:
        conn = connect()
        with conn.cursor() as cur:
            cur.execute("SELECT current_database(), 42")
            return cur.fetchone(), conn.info.dbname, conn.info.user

    recorded = record(postgres_dsn, app)
    replayed = replay(recorded.capsule(), app)
    assert recorded.result == (("postgres", 42), "postgres", "postgres")
    assert replayed.result == (("postgres", 42), "stopped", "nobody")
