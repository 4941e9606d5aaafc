"""Every value type survives record-then-replay with its Python type (psycopg2, PROTOCOL 4.4)."""

from __future__ import annotations

from typing import Any

import psycopg2.extras
import pytest

from reproit_otel.wire.batch import CaptureEnvironment, CaptureSettings, build_capture_result
from tests.integration.pg_support import record, replay, seen

pytestmark = pytest.mark.postgres

EVERY_TYPE = r"""
SELECT 1::int AS i, 9007199254740993::bigint AS big, -7::smallint AS small,
       1.50::numeric AS dec, 'NaN'::numeric AS dec_nan, 1e30::numeric AS dec_big,
       1.5::float8 AS f, 2.0::float8 AS f_int, '-0'::float8 AS f_negzero,
       'NaN'::float8 AS f_nan, 'Infinity'::float8 AS f_inf, '-Infinity'::float8 AS f_ninf,
       0.1::real AS r,
       'héllo ''quoted'' \ 😀' AS s, '' AS empty, true AS b, false AS nb,
       '\x00ff10'::bytea AS raw,
       '2024-01-31'::date AS d, 'infinity'::date AS d_inf,
       '10:11:12.5'::time AS t, '10:11:12+02:00'::timetz AS ttz,
       '2024-01-31 10:11:12.123456'::timestamp AS ts,
       '2024-01-31 10:11:12+05:30'::timestamptz AS tstz,
       '1 day 02:03:04.5'::interval AS iv, '-3 days'::interval AS iv_neg,
       'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u,
       '{"a": [1, 2.5, null], "$pg": "x", "f": 1.0}'::json AS j,
       '{"k": {"nested": true}}'::jsonb AS jb, '[1, "two"]'::jsonb AS jb_list,
       '{"b": 1, "a": {"d": 1, "c": 2}}'::json AS j_order,
       ARRAY[1, 2, NULL]::int[] AS arr, ARRAY[['a', 'b'], ['c', 'd']] AS arr2,
       ARRAY[]::text[] AS arr_empty, ARRAY[1.5, 2]::numeric[] AS arr_dec,
       ARRAY['2024-01-01'::date] AS arr_date,
       int4range(1, 10) AS rng, 'empty'::int4range AS rng_empty,
       daterange('2024-01-01', '2024-02-01', '[]') AS drng,
       tstzrange('2024-01-01 00:00+00', NULL) AS trng,
       NULL AS nothing, NULL::numeric AS null_dec
"""


def _every_type(connect: Any) -> Any:
    conn = connect()
    psycopg2.extras.register_uuid(conn_or_curs=conn)
    with conn, conn.cursor() as cur:
        cur.execute(EVERY_TYPE)
        row = cur.fetchone()
        names = [column.name for column in cur.description]
        codes = [column.type_code for column in cur.description]
        status = (cur.statusmessage, cur.rowcount)
    conn.close()
    return seen(row), names, codes, status


def test_every_value_type_comes_back_with_its_python_type(postgres_dsn: str) -> None:
    recorded = record(postgres_dsn, _every_type)
    replayed = replay(recorded.capsule(), _every_type)
    assert replayed.result == recorded.result
    assert replayed.session.consumed == replayed.session.total == 1
    assert not replayed.session.diverged


def test_the_encoding_is_tagged_json(postgres_dsn: str) -> None:
    def app(connect: Any) -> Any:
        conn = connect()
        with conn.cursor() as cur:
            cur.execute(
                "SELECT 1.50::numeric AS price, '\\x00ff'::bytea AS raw, 2.0::float8 AS f,"
                " '2024-01-31'::date AS d, '{\"$pg\": 1}'::jsonb AS j, %s AS big",
                (2**60,),
            )
            return cur.fetchall()

    recorded = record(postgres_dsn, app)
    exchange = recorded.exchanges[0]
    assert exchange["request"] == {
        "text": "SELECT 1.50::numeric AS price, '\\x00ff'::bytea AS raw, 2.0::float8 AS f,"
        " '2024-01-31'::date AS d, '{\"$pg\": 1}'::jsonb AS j, %s AS big",
        "values": [{"$pg": "int", "v": str(2**60)}],
    }
    assert exchange["response"]["rows"] == [
        {
            "price": {"$pg": "decimal", "v": "1.50"},
            "raw": {"$pg": "memoryview", "v": "AP8="},
            "f": {"$pg": "float", "v": "2.0"},
            "d": {"$pg": "date", "v": "2024-01-31"},
            "j": {"$pg": "map", "v": [["$pg", 1]]},
            "big": {"$pg": "int", "v": str(2**60)},
        }
    ]
    assert [column[:2] for column in exchange["response"]["columns"]] == [
        ["price", 1700],
        ["raw", 17],
        ["f", 701],
        ["d", 1082],
        ["j", 3802],
        ["big", 20],
    ]
    replayed = replay(recorded.capsule(), app)
    assert seen(replayed.result) == seen(recorded.result)


def test_duplicate_column_names_keep_every_value(postgres_dsn: str) -> None:
    def app(connect: Any) -> Any:
        with connect().cursor() as cur:
            cur.execute("SELECT 1 AS a, 2 AS a, 3 AS b")
            return cur.fetchall()

    recorded = record(postgres_dsn, app)
    assert recorded.exchanges[0]["response"]["rows"] == [{"a": 1, "a#1": 2, "b": 3}]
    assert replay(recorded.capsule(), app).result == recorded.result == [(1, 2, 3)]


def test_parameters_are_recorded_as_they_were_when_the_statement_ran(postgres_dsn: str) -> None:
    """Scalars are encoded when the exchange is built, anything mutable when it runs."""
    import datetime as dt
    import uuid

    naive = dt.datetime(2024, 1, 31, 10, 11, 12, 5)
    aware = dt.datetime(2024, 1, 31, 10, 11, 12, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    ident = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")

    def app(connect: Any) -> Any:
        conn = connect()
        with conn.cursor() as cur:
            scalars = (1, 2**60, 1.5, 2.0, "s", b"\x00", True, None, ident, naive.date(), naive)
            cur.execute("SELECT " + ", ".join(["%s"] * len(scalars)), scalars)
            cur.execute("SELECT %s::timestamptz", (aware,))
            listed = [1, 2]
            cur.execute("SELECT %s::int[]", (listed,))
            listed.append(3)
            positional = [7, 8]
            cur.execute("SELECT %s, %s", positional)
            positional[0] = 9
            named = {"a": 1}
            cur.execute("SELECT %(a)s", named)
            named["a"] = 2
        conn.close()
        return None

    recorded = record(postgres_dsn, app)
    assert [exchange["request"]["values"] for exchange in recorded.exchanges] == [
        [
            1,
            {"$pg": "int", "v": str(2**60)},
            1.5,
            {"$pg": "float", "v": "2.0"},
            "s",
            {"$pg": "bytes", "v": "AA=="},
            True,
            None,
            {"$pg": "uuid", "v": str(ident)},
            {"$pg": "date", "v": "2024-01-31"},
            {"$pg": "datetime", "v": "2024-01-31T10:11:12.000005"},
        ],
        [{"$pg": "datetime", "v": "2024-01-31T10:11:12+02:00"}],
        [[1, 2]],
        [7, 8],
        {"a": 1},
    ]


def test_a_pg_value_over_64_kib_marks_the_database_capability_partial(postgres_dsn: str) -> None:
    """A row value replaced by its identity (decision D3) makes the batch name the capability
    of the exchange it was in, ``database``, as the incomplete one; the rest stays complete."""

    def app(connect: Any) -> Any:
        conn = connect()
        with conn.cursor() as cur:
            cur.execute("SELECT repeat('x', 70000) AS blob, 1 AS n")
            blob, n = cur.fetchone()
        conn.close()
        return len(blob), n

    recorded = record(postgres_dsn, app)
    assert recorded.result == (70000, 1)
    events = recorded.events
    build = build_capture_result(
        {"operation": events[0]["operation"], "status": 500, "events": events},
        config=CaptureSettings("app-demo"),
        environment=CaptureEnvironment(
            now_ms=1_760_000_000_000, batch_number=1, runtime="python 3.12.0", tz="UTC"
        ),
    )
    detail = "1 captured value(s) over 65536 bytes sent as identity only"
    assert (build.replaced_values, build.partial) == (1, {"database": detail})
    assert build.batch["capabilities"] == [
        {"capability": "http", "completeness": "complete"},
        {"capability": "database", "completeness": "partial", "detail": detail},
    ]
