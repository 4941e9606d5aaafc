"""psycopg 3 replay under pools: psycopg_pool (sync, async) and SQLAlchemy 2 (sync, asyncio).

The request is recorded by the psycopg2 recorder (production ran psycopg2, or the statements
are the same: a capsule does not care which driver produced it), with a warm pool or a cold
one, and replayed under psycopg 3 with PostgreSQL unreachable, warm (a warm-up query before the
request, in the before-request window) or cold. In every combination the replay answers the
request exactly as recorded, consumes every recorded data statement and never diverges; one
extra query diverges.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import psycopg2
import psycopg2.extras
import pytest

from reproit_otel.errors import DivergedError
from reproit_otel.instrumentation.psycopg import PsycopgReplayInstrumentor
from reproit_otel.replay.session import activate, deactivate
from reproit_otel.wire.replay import ReplaySession
from tests.integration.pg_support import closed_port_dsn
from tests.integration.test_pg_connection_scope import (
    SqlAlchemyApp,
    pool_states,
    record,
    tables,
)

pytestmark = pytest.mark.postgres

__all__ = ["tables"]  # the fixture creating scope_items / scope_orders, shared

PRICE = "SELECT sku, price, sold FROM scope_items WHERE sku = %(sku)s"
INSERT = "INSERT INTO scope_orders (id, sku, at) VALUES (%(id)s, %(sku)s, %(at)s)"
RECENT = "SELECT count(*) AS recent FROM scope_orders WHERE at > %(since)s AND id = %(id)s"
DELETE = "DELETE FROM scope_orders WHERE id = %(id)s"
EXTRA = "SELECT sku FROM scope_items ORDER BY sku"


def _parameters(changed: bool) -> tuple[uuid.UUID, dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.timezone.utc)
    return uuid.uuid4(), now, now - dt.timedelta(days=7 if changed else 30)


class Psycopg2PoolRecording:
    """What production ran: psycopg2 with ``RealDictCursor``, one connection kept warm."""

    def __init__(self, connect: Callable[..., Any], warm: bool, changed: bool) -> None:
        self.conn = connect(cursor_factory=psycopg2.extras.RealDictCursor)
        self.warm = warm

    def before(self) -> None:
        if self.warm:
            with self.conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM scope_items")
                cur.fetchone()
            self.conn.commit()

    def request(self) -> Any:
        order, now, since = _parameters(False)
        with self.conn.cursor() as cur:
            cur.execute(PRICE, {"sku": "pen"})
            item = dict(cur.fetchone())
            cur.execute(INSERT, {"id": order, "sku": "pen", "at": now})
            cur.execute(RECENT, {"since": since, "id": order})
            recent = dict(cur.fetchone())
            cur.execute(DELETE, {"id": order})
        self.conn.commit()
        return {"item": {**item, "price": str(item["price"])}, **recent}

    def close(self) -> None:
        self.conn.close()


class PoolApp:
    """psycopg 3 through ``psycopg_pool.ConnectionPool`` with ``dict_row`` and a check."""

    def __init__(self, dsn: str, warm: bool, changed: bool) -> None:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self.warm = warm
        self.changed = changed
        self.pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=1,
            kwargs={"row_factory": dict_row},
            check=ConnectionPool.check_connection,
            open=True,
        )

    def before(self) -> None:
        self.pool.wait()
        if self.warm:
            with self.pool.connection() as conn:
                conn.execute("SELECT count(*) FROM scope_items").fetchone()

    def request(self, extra: bool = False) -> Any:
        order, now, since = _parameters(self.changed)
        with self.pool.connection() as conn:
            item = conn.execute(PRICE, {"sku": "pen"}).fetchone()
            conn.execute(INSERT, {"id": order, "sku": "pen", "at": now})
            recent = conn.execute(RECENT, {"since": since, "id": order}).fetchone()
            conn.execute(DELETE, {"id": order})
            if extra:
                conn.execute(EXTRA).fetchall()
        return {"item": {**item, "price": str(item["price"])}, **recent}

    def close(self) -> None:
        self.pool.close()


class AsyncPoolApp:
    """psycopg 3 through ``psycopg_pool.AsyncConnectionPool`` on one event loop."""

    def __init__(self, dsn: str, warm: bool, changed: bool) -> None:
        self.loop = asyncio.new_event_loop()
        self.dsn = dsn
        self.warm = warm
        self.changed = changed
        self.pool: Any = None

    def before(self) -> None:
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        async def open_pool() -> None:
            self.pool = AsyncConnectionPool(
                self.dsn,
                min_size=1,
                max_size=1,
                kwargs={"row_factory": dict_row},
                check=AsyncConnectionPool.check_connection,
                open=False,
            )
            await self.pool.open(wait=True)
            if self.warm:
                async with self.pool.connection() as conn:
                    await (await conn.execute("SELECT count(*) FROM scope_items")).fetchone()

        self.loop.run_until_complete(open_pool())

    def request(self, extra: bool = False) -> Any:
        async def handle() -> Any:
            order, now, since = _parameters(self.changed)
            async with self.pool.connection() as conn:
                item = await (await conn.execute(PRICE, {"sku": "pen"})).fetchone()
                await conn.execute(INSERT, {"id": order, "sku": "pen", "at": now})
                cur = await conn.execute(RECENT, {"since": since, "id": order})
                recent = await cur.fetchone()
                await conn.execute(DELETE, {"id": order})
                if extra:
                    await (await conn.execute(EXTRA)).fetchall()
            return {"item": {**item, "price": str(item["price"])}, **recent}

        return self.loop.run_until_complete(handle())

    def close(self) -> None:
        if self.pool is not None:
            self.loop.run_until_complete(self.pool.close())
        self.loop.close()


class SqlAlchemyPsycopgApp(SqlAlchemyApp):
    """The recorded SQLAlchemy request, on ``postgresql+psycopg`` (psycopg 3)."""

    def __init__(self, dsn: str, warm: bool, changed: bool) -> None:
        import sqlalchemy

        self.sa = sqlalchemy
        self.warm = warm
        self.changed = changed
        self.engine = sqlalchemy.create_engine(
            dsn.replace("postgresql://", "postgresql+psycopg://"), pool_pre_ping=True, pool_size=1
        )

    def request(self, extra: bool = False) -> Any:
        result = super().request()
        if extra:
            with self.engine.connect() as connection:
                connection.execute(self.sa.text(EXTRA))
        return result


class SqlAlchemyAsyncApp:
    """The recorded SQLAlchemy request, on ``create_async_engine("postgresql+psycopg://")``."""

    def __init__(self, dsn: str, warm: bool, changed: bool) -> None:
        import sqlalchemy
        from sqlalchemy.ext.asyncio import create_async_engine

        self.sa = sqlalchemy
        self.loop = asyncio.new_event_loop()
        self.warm = warm
        self.changed = changed
        self.engine = create_async_engine(
            dsn.replace("postgresql://", "postgresql+psycopg://"), pool_pre_ping=True, pool_size=1
        )

    def before(self) -> None:
        async def warm_up() -> None:
            async with self.engine.connect() as connection:
                text = self.sa.text("SELECT count(*) FROM scope_items")
                (await connection.execute(text)).scalar()

        if self.warm:
            self.loop.run_until_complete(warm_up())

    def request(self, extra: bool = False) -> Any:
        text = self.sa.text

        async def handle() -> Any:
            now = dt.datetime.now(dt.timezone.utc)
            days = 7 if self.changed else 30
            async with self.engine.begin() as connection:
                price = (
                    await connection.execute(
                        text("SELECT price FROM scope_items WHERE sku = :sku"), {"sku": "pen"}
                    )
                ).scalar_one()
                order_id = uuid.uuid4()
                await connection.execute(
                    text("INSERT INTO scope_orders (id, sku, at) VALUES (:id, :sku, :at)"),
                    {"id": order_id, "sku": "pen", "at": now},
                )
                async with connection.begin_nested():
                    await connection.execute(
                        text("UPDATE scope_items SET sold = sold + 1 WHERE sku = :sku"),
                        {"sku": "pen"},
                    )
                recent = (
                    await connection.execute(
                        text("SELECT count(*) FROM scope_orders WHERE at > :since AND id = :id"),
                        {"since": now - dt.timedelta(days=days), "id": order_id},
                    )
                ).scalar_one()
                await connection.execute(
                    text("DELETE FROM scope_orders WHERE id = :id"), {"id": order_id}
                )
                if extra:
                    await connection.execute(text(EXTRA))
            version = self.engine.dialect.server_version_info
            return {"price": str(price), "recent": recent, "server": version}

        return self.loop.run_until_complete(handle())

    def close(self) -> None:
        self.loop.run_until_complete(self.engine.dispose())
        self.loop.close()


def replay(
    capsule: dict[str, Any], factory: Any, warm: bool, *, changed: bool = False, extra: bool = False
) -> tuple[Any, ReplaySession]:
    """Run the psycopg 3 app served from ``capsule``; its warm-up before the request."""
    session = ReplaySession(capsule)
    session.usage.await_request()
    activate(session)
    PsycopgReplayInstrumentor().instrument()
    try:
        app = factory(closed_port_dsn(), warm, changed)
        try:
            app.before()
            session.begin_request()
            result = app.request(extra=True) if extra else app.request()
        finally:
            app.close()
    finally:
        PsycopgReplayInstrumentor().uninstrument()
        deactivate()
    return result, session


# Each replayed stack and the psycopg2 application production ran with the same statements.
STACKS = {
    "psycopg_pool": (Psycopg2PoolRecording, PoolApp),
    "psycopg_pool-async": (Psycopg2PoolRecording, AsyncPoolApp),
    "sqlalchemy": (SqlAlchemyApp, SqlAlchemyPsycopgApp),
    "sqlalchemy-asyncio": (SqlAlchemyApp, SqlAlchemyAsyncApp),
}


@pytest.mark.parametrize("stack", sorted(STACKS))
@pool_states
def test_a_pooled_psycopg3_request_replays_as_recorded(
    tables: str, stack: str, recorded_warm: bool, replayed_warm: bool
) -> None:
    recording, replayed_app = STACKS[stack]
    result, capsule = record(tables, recording, recorded_warm)
    replayed, session = replay(capsule, replayed_app, replayed_warm)
    assert replayed == result
    assert not session.diverged, session.divergence_lines
    usage = session.usage.report()
    assert usage["unused"] == 0, usage
    assert usage["consumed"] == usage["dataExchanges"] > 0
    assert usage["beforeRequest"] == (1 if replayed_warm else 0)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_an_extra_query_diverges(tables: str, stack: str) -> None:
    recording, replayed_app = STACKS[stack]
    _, capsule = record(tables, recording, True)
    with pytest.raises(DivergedError) as raised:
        replay(capsule, replayed_app, True, extra=True)
    assert raised.value.line is not None
    assert raised.value.line.startswith(
        'REPROIT:DIVERGENCE {"protocol":"pg","got":{"text":"SELECT sku FROM scope_items '
        'ORDER BY sku"},"expected":null,'
    )
