"""The column names replay gives a read it answers with no rows, as PostgreSQL names them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reproit_otel.wire.select_list import result_columns

CASES: list[tuple[str, list[str] | None]] = [
    # SQLAlchemy's PostgreSQL inspector (get_table_names), as Flask-AppBuilder runs it at boot
    (
        "SELECT pg_catalog.pg_class.relname \nFROM pg_catalog.pg_class JOIN "
        "pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = "
        "pg_catalog.pg_class.relnamespace \nWHERE pg_catalog.pg_class.relkind = ANY "
        "(ARRAY[%(param_1)s, %(param_2)s]) ORDER BY pg_catalog.pg_class.relname",
        ["relname"],
    ),
    # an ORM's select(Model) and its labels
    (
        "SELECT ab_user.id, ab_user.first_name AS fn, ab_user.email \nFROM ab_user",
        ["id", "fn", "email"],
    ),
    ("SELECT count(*) AS count_1 FROM (SELECT a, b FROM t) AS anon_1", ["count_1"]),
    ("SELECT EXISTS (SELECT 1 FROM t WHERE a = %s) AS anon_1", ["anon_1"]),
    ("select count(*), max(t.a) m, pg_catalog.now() from t", ["count", "m", "now"]),
    ('SELECT "Mixed"."Case", "Quoted Name" FROM "Mixed"', ["Case", "Quoted Name"]),
    ("SELECT a::text, 'x'::varchar, 1, a + b FROM t", ["a", "varchar", "?column?", "?column?"]),
    ("SELECT CASE WHEN a THEN 1 ELSE 2 END FROM t", ["case"]),
    ("SELECT DISTINCT ON (a) a, b FROM t", ["a", "b"]),
    ("SELECT DISTINCT a FROM t", ["a"]),
    ("SELECT 'a, (b' AS x, f(1, 2) y FROM t", ["x", "y"]),
    ("SELECT a -- the key, b\n, c FROM t", ["a", "c"]),
    ("WITH q AS (SELECT a FROM t) SELECT q.a, 2 AS two FROM q", ["a", "two"]),
    ("SELECT 1", ["?column?"]),
    ("INSERT INTO t (a) VALUES (%(a)s) RETURNING t.id, t.a AS alpha", ["id", "alpha"]),
    ("UPDATE t SET a = 1 WHERE b = 2 RETURNING a", ["a"]),
    ("WITH d AS (SELECT 1) DELETE FROM t RETURNING id", ["id"]),
    # what only the catalogue knows, or nothing to read
    ("SELECT * FROM t", None),
    ("SELECT t.*, 1 FROM t", None),
    ("SELECT DISTINCT ON a FROM t", None),
    ("SELECT DISTINCT ON (a FROM t", None),
    ("INSERT INTO t VALUES (1)", None),
    ("CREATE TABLE t (a int)", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "names"), CASES, ids=[case[0][:40] for case in CASES])
def test_result_columns_are_named_as_the_server_names_them(
    text: str, names: list[str] | None
) -> None:
    assert result_columns(text) == names


PIECES = ["SELECT", "DISTINCT", "ON", "ALL", "WITH", "INSERT", "UPDATE", "DELETE", "RETURNING"]
PIECES += ["FROM", "AS", "CASE", "END", "(", ")", '"', "'", "''", ",", ".", "*", "::", "--"]
PIECES += ["/*", "*/", "\n", "a", "b_1", "count", "x$"]


@settings(max_examples=500)
@given(st.lists(st.sampled_from(PIECES), max_size=16), st.sampled_from([" ", ""]))
def test_any_text_gives_names_or_none_and_never_raises(pieces: list[str], glue: str) -> None:
    names = result_columns(glue.join(pieces))
    assert names is None or (names and all(isinstance(name, str) for name in names))
