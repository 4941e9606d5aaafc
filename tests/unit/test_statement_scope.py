"""The connection-scope table of docs/replay.md, statement by statement, and its defaults."""

from __future__ import annotations

from typing import Any

import pytest

from reproit_otel.wire.statements import (
    DEFAULT_PARAMETERS,
    SERVER_VERSION_TEXT,
    ambient_key,
    default_response,
    setting_change,
    statement_scope,
)

# (statement, parameters, scope): what real stacks send, then near misses that are data.
TABLE: list[tuple[str, Any, str | None]] = [
    # transaction brackets
    ("BEGIN", None, "transaction"),
    ("begin isolation level serializable;", None, "transaction"),
    ("START TRANSACTION READ ONLY", None, "transaction"),
    ("COMMIT", None, "transaction"),
    ("commit work", None, "transaction"),
    ("END", None, "transaction"),
    ("ROLLBACK", None, "transaction"),
    ("ABORT", None, "transaction"),
    # savepoints: Django's thread-named ones, SQLAlchemy's numbered ones
    ('SAVEPOINT "s140326874098560_x1"', None, "savepoint"),
    ('RELEASE SAVEPOINT "s140326874098560_x1"', None, "savepoint"),
    ('ROLLBACK TO SAVEPOINT "s140326874098560_x1"', None, "savepoint"),
    ("SAVEPOINT sa_savepoint_1", {}, "savepoint"),
    ("RELEASE SAVEPOINT sa_savepoint_1", {}, "savepoint"),
    ("rollback to sa_savepoint_2", None, "savepoint"),
    ("RELEASE sp", None, "savepoint"),
    # settings: SET/RESET/SHOW/DISCARD, Django's time zone, current_setting
    ("SET TIME ZONE 'UTC'", None, "setting"),
    ("SET search_path TO app, public", None, "setting"),
    ("SET LOCAL statement_timeout = 5000", None, "setting"),
    ("RESET ALL", None, "setting"),
    ("DISCARD ALL", None, "setting"),
    ("show transaction isolation level", None, "setting"),
    ("show standard_conforming_strings", {}, "setting"),
    ("SHOW TimeZone", None, "setting"),
    ("SELECT set_config('TimeZone', %s, false)", ["UTC"], "setting"),
    ("SELECT pg_catalog.set_config('search_path', '', false)", None, "setting"),
    ("SELECT current_setting('server_version_num')", None, "setting"),
    # pool pre-ping
    ("SELECT 1", None, "ping"),
    ("select 1;", None, "ping"),
    (" SELECT  1 ", {}, "ping"),
    ("", None, "ping"),  # psycopg_pool's check_connection
    (" ; ", None, "ping"),
    # server version and type introspection (SQLAlchemy dialect set-up, psycopg2 extras)
    ("select pg_catalog.version()", {}, "introspection"),
    ("SELECT version()", None, "introspection"),
    ("select current_schema()", {}, "introspection"),
    (
        "SELECT t.oid, typarray FROM pg_type t JOIN pg_namespace ns ON typnamespace = ns.oid "
        "WHERE typname = 'hstore'",
        None,
        "introspection",
    ),
    ("SELECT t.oid, typarray FROM pg_type t WHERE t.typname = %s;", ["hstore"], "introspection"),
    ("SELECT typarray FROM pg_catalog.pg_type WHERE typname = 'citext'", None, "introspection"),
    # data statements, including near misses
    ("SELECT 1", [1], None),
    ("SELECT 12", None, None),
    ("SELECT 1 FROM orders", None, None),
    ("SELECT * FROM pg_type t JOIN orders o ON o.type_id = t.oid", None, None),
    ("SELECT c.relname FROM pg_catalog.pg_class c", None, None),
    ('SELECT "django_migrations"."app" FROM "django_migrations"', None, None),
    ("UPDATE accounts SET balance = 0", None, None),
    ("INSERT INTO settings (name) VALUES ('SET x')", None, None),
    ("WITH s AS (SELECT 1) SELECT * FROM s", None, None),
    ("SELECT set_config_history FROM audit", None, None),
    ("BEGINNING", None, None),
]


@pytest.mark.parametrize(("text", "values", "scope"), TABLE, ids=[row[0][:40] for row in TABLE])
def test_each_statement_has_its_documented_scope(text: str, values: Any, scope: str | None) -> None:
    assert statement_scope(text, values) == scope


def test_a_non_string_statement_is_data() -> None:
    assert statement_scope(None) is None
    assert statement_scope(b"BEGIN") is None


def test_savepoint_names_do_not_take_part_in_the_ambient_key() -> None:
    assert ambient_key('SAVEPOINT "s140326874098560_x1"') == ambient_key('SAVEPOINT "s9_x7"')
    assert ambient_key("ROLLBACK  TO SAVEPOINT a;") == "ROLLBACK TO SAVEPOINT <name>"
    assert ambient_key("RELEASE SAVEPOINT sa_savepoint_1") == "RELEASE SAVEPOINT <name>"
    assert ambient_key("SHOW  TimeZone;") == "SHOW TimeZone"


def _one(column: str, value: Any, type_code: int = 25, command: str = "SELECT 1") -> Any:
    return {
        "command": command,
        "rowCount": 1,
        "rows": [{column: value}],
        "columns": [[column, type_code, None, None, None, None, None, None, None]],
    }


def _none(command: str, row_count: int = -1) -> Any:
    return {"command": command, "rowCount": row_count, "rows": [], "columns": None}


DEFAULTS: list[tuple[str, Any, Any]] = [
    ("BEGIN", None, _none("BEGIN")),
    ("START TRANSACTION", None, _none("BEGIN")),
    ("COMMIT", None, _none("COMMIT")),
    ("END", None, _none("COMMIT")),
    ("ROLLBACK", None, _none("ROLLBACK")),
    ('SAVEPOINT "s1_x1"', None, _none("SAVEPOINT")),
    ('RELEASE SAVEPOINT "s1_x1"', None, _none("RELEASE")),
    ('ROLLBACK TO SAVEPOINT "s1_x1"', None, _none("ROLLBACK")),
    ("SET TIME ZONE 'UTC'", None, _none("SET")),
    ("RESET ALL", None, _none("RESET")),
    ("DISCARD ALL", None, _none("DISCARD ALL")),
    ("SELECT 1", None, _one("?column?", 1, 23)),
    ("select pg_catalog.version()", {}, _one("version", SERVER_VERSION_TEXT)),
    ("select current_schema()", {}, _one("current_schema", "public")),
    (
        "show transaction isolation level",
        None,
        _one("transaction_isolation", "read committed", command="SHOW"),
    ),
    ("show standard_conforming_strings", {}, _one("standard_conforming_strings", "on", 25, "SHOW")),
    ("SHOW TimeZone", None, _one("TimeZone", "UTC", command="SHOW")),
    (
        "SELECT set_config('TimeZone', %s, false)",
        ["Europe/Berlin"],
        _one("set_config", "Europe/Berlin"),
    ),
    ("SELECT current_setting('DateStyle')", None, _one("current_setting", "ISO, MDY")),
    ("", None, {"command": None, "rowCount": 0, "rows": [], "columns": None}),
    (
        "SELECT typarray FROM pg_type WHERE typname = 'citext'",
        None,
        {
            "command": "SELECT 0",
            "rowCount": 0,
            "rows": [],
            "columns": [["oid", 26, None, None, None, None, None, None, None]],
        },
    ),
    # data statements asked before the recorded request: empty, changing nothing, with the
    # columns the statement names (SQLAlchemy's inspector reads the first one at boot)
    (
        "SELECT c.relname FROM pg_catalog.pg_class c",
        None,
        {
            "command": "SELECT 0",
            "rowCount": 0,
            "rows": [],
            "columns": [["relname", 25, None, None, None, None, None, None, None]],
        },
    ),
    (
        "SELECT * FROM t",
        None,
        {"command": "SELECT 0", "rowCount": 0, "rows": [], "columns": []},
    ),
    ("INSERT INTO t VALUES (1)", None, _none("INSERT 0 0", 0)),
    (
        "INSERT INTO t (a) VALUES (%(a)s) RETURNING t.id",
        {"a": 1},
        {
            "command": "INSERT 0 0",
            "rowCount": 0,
            "rows": [],
            "columns": [["id", 25, None, None, None, None, None, None, None]],
        },
    ),
    ("UPDATE t SET a = 1", None, _none("UPDATE 0", 0)),
    ("DELETE FROM t", None, _none("DELETE 0", 0)),
    ("CREATE TABLE t (a int)", None, _none("CREATE")),
]


@pytest.mark.parametrize(
    ("text", "values", "expected"), DEFAULTS, ids=[r[0][:40] for r in DEFAULTS]
)
def test_each_statement_has_its_documented_default_answer(
    text: str, values: Any, expected: Any
) -> None:
    assert default_response(text, values) == expected


def test_show_answers_from_the_connection_parameters() -> None:
    parameters = {**DEFAULT_PARAMETERS, "TimeZone": "Europe/Berlin"}
    assert default_response("SHOW timezone", None, parameters)["rows"] == [
        {"TimeZone": "Europe/Berlin"}
    ]
    assert default_response("SHOW no_such_parameter")["rows"] == [{"no_such_parameter": ""}]


@pytest.mark.parametrize(
    ("text", "values", "change"),
    [
        ("SELECT set_config('TimeZone', %s, false)", ["Asia/Tokyo"], ("TimeZone", "Asia/Tokyo")),
        ("SELECT set_config(%s, %s, false)", ["timezone", "UTC"], ("TimeZone", "UTC")),
        (
            "SELECT set_config(%(n)s, %(v)s, false)",
            {"n": "search_path", "v": "app"},
            ("search_path", "app"),
        ),
        ("SET TIME ZONE 'America/New_York'", None, ("TimeZone", "America/New_York")),
        ("SET timezone TO 'UTC'", None, ("TimeZone", "UTC")),
        ("SET SESSION search_path = app, public", None, ("search_path", "app, public")),
        ("SET datestyle TO DEFAULT", None, None),
        ("RESET ALL", None, None),
        ("SELECT 1", None, None),
    ],
)
def test_settings_a_statement_gives_the_connection(text: str, values: Any, change: Any) -> None:
    assert setting_change(text, values) == change
