"""Every cursor kind and fetch style: what the application saw live, it sees again in replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg2
import psycopg2.extras
import pytest

from tests.integration.pg_support import record, replay, seen

pytestmark = pytest.mark.postgres

ROWS = "SELECT g AS id, 'item ' || g AS name, g * 1.5 AS price FROM generate_series(1, 7) g"


class UpperCursor(psycopg2.extras.RealDictCursor):
    """An application's own cursor: keys uppercased, and a counter of executed statements."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.executed = 0

    def execute(self, query: Any, vars: Any = None) -> Any:
        self.executed += 1
        return super().execute(query, vars)

    def fetchall(self) -> Any:
        return [{key.upper(): value for key, value in row.items()} for row in super().fetchall()]


class PlainSubclass(psycopg2.extensions.cursor):
    def fetchone(self) -> Any:
        row = super().fetchone()
        return None if row is None else ("wrapped", *row)


def _styles(cur: Any) -> Any:
    """Every way of reading a result, on one cursor."""
    seen_rows: list[Any] = []
    cur.execute(ROWS)
    seen_rows.append(("description", [tuple(c)[:2] for c in cur.description or []]))
    seen_rows.append(("one", seen(cur.fetchone())))
    seen_rows.append(("many", seen(cur.fetchmany(2))))
    cur.arraysize = 3
    seen_rows.append(("many-default", seen(cur.fetchmany())))
    seen_rows.append(("all", seen(cur.fetchall())))
    seen_rows.append(("after-end", seen(cur.fetchone())))
    cur.execute(ROWS + " WHERE g < %(limit)s", {"limit": 4})
    seen_rows.append(("iterated", seen(list(cur))))
    seen_rows.append(("status", cur.statusmessage, cur.rowcount, cur.rownumber))
    return seen_rows


FACTORIES: dict[str, Any] = {
    "tuple": None,
    "dict": psycopg2.extras.DictCursor,
    "realdict": psycopg2.extras.RealDictCursor,
    "namedtuple": psycopg2.extras.NamedTupleCursor,
    "user-realdict-subclass": UpperCursor,
    "user-plain-subclass": PlainSubclass,
}


def _on_cursor(factory: Any, where: str) -> Callable[[Any], Any]:
    def app(connect: Any) -> Any:
        if where == "connect":
            conn = connect(cursor_factory=factory) if factory else connect()
            cur = conn.cursor()
        elif where == "connection":
            conn = connect()
            conn.cursor_factory = factory
            cur = conn.cursor()
        else:
            conn = connect()
            cur = conn.cursor(cursor_factory=factory)
        with cur:
            result = _styles(cur)
            if isinstance(cur, UpperCursor) or type(cur).__name__ == "UpperCursor":
                result.append(("executed", cur.executed))
            result.append(("class", type(cur).__name__))
        result.append(("closed", cur.closed))
        conn.close()
        return result

    return app


def _without_class(result: list[Any]) -> list[Any]:
    return [item for item in result if item[0] != "class"]


@pytest.mark.parametrize("where", ["connect", "connection", "cursor"])
@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_cursor_kinds_round_trip(postgres_dsn: str, kind: str, where: str) -> None:
    app = _on_cursor(FACTORIES[kind], where)
    unrecorded = app(lambda **kw: psycopg2.connect(postgres_dsn, **kw))
    recorded = record(postgres_dsn, app)
    # Recording changes nothing the application sees (the class name differs only because
    # OpenTelemetry's instrumentation wraps a cursor_factory given to connect()).
    assert _without_class(recorded.result) == _without_class(unrecorded)
    replayed = replay(recorded.capsule(), app)
    assert replayed.result == recorded.result
    assert replayed.session.consumed == replayed.session.total == 2


@pytest.mark.parametrize(
    "connection_factory",
    [
        psycopg2.extras.DictConnection,
        psycopg2.extras.RealDictConnection,
        psycopg2.extras.NamedTupleConnection,
    ],
)
def test_connection_factories_round_trip(postgres_dsn: str, connection_factory: Any) -> None:
    def app(connect: Any) -> Any:
        conn = connect(connection_factory=connection_factory)
        cur = conn.cursor()
        return [*_styles(cur), ("connection", type(conn).__name__)]

    recorded = record(postgres_dsn, app)
    assert replay(recorded.capsule(), app).result == recorded.result


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_named_cursors_round_trip(postgres_dsn: str, kind: str) -> None:
    factory = FACTORIES[kind]

    def app(connect: Any) -> Any:
        conn = connect()
        result: list[Any] = []
        with conn:
            cur = conn.cursor("server_side", cursor_factory=factory)
            cur.itersize = 2
            cur.execute(ROWS)
            result.append(("before-fetch", cur.description, cur.statusmessage))
            result.append(("one", seen(cur.fetchone())))
            result.append(("many", seen(cur.fetchmany(2))))
            result.append(("iterated", seen(list(cur))))
            result.append(("description", [tuple(c)[:2] for c in cur.description]))
            cur.close()
            with conn.cursor("second", cursor_factory=factory) as other:
                other.execute(ROWS + " WHERE g > %s", (5,))
                result.append(("all", seen(other.fetchall())))
        conn.close()
        return result

    recorded = record(postgres_dsn, app)
    assert [e["response"]["rowCount"] for e in recorded.exchanges] == [7, 2]
    assert recorded.returned["effectsComplete"] is True
    replayed = replay(recorded.capsule(), app)
    assert replayed.result == recorded.result
    assert replayed.session.consumed == 2
