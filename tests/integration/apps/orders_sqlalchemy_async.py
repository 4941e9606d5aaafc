"""A FastAPI order service on SQLAlchemy asyncio over psycopg 3 and httpx; no reproit code.

``POST /orders/{ident}`` reads the rate from the upstream (``GET /json``) and the item's
price from PostgreSQL at the same time (``asyncio.gather``), stores the order, then fails
with a 500 (``ZeroDivisionError``) until ``ORDERS_FIXED=1``; ``ORDERS_EXTRA_QUERY=1`` makes
it count the orders first (a query the recording does not hold). ``GET /items/1`` is a
healthy call through the same engine and client. ``python orders_sqlalchemy_async.py
--init-db`` creates the tables. ``PORT``, ``UPSTREAM``, ``DATABASE_URL`` (``postgresql://``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

DSN = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:9/postgres")
engine = create_async_engine(DSN.replace("postgresql://", "postgresql+psycopg://", 1))
upstream = httpx.AsyncClient(base_url=os.environ.get("UPSTREAM", "http://127.0.0.1:9"))
app = FastAPI()


async def price_of(item: int) -> Any:
    async with engine.connect() as connection:
        return await connection.scalar(
            text("SELECT price FROM async_items WHERE id = :id"), {"id": item}
        )


@app.get("/items/{item}")
async def item(item: int) -> dict[str, Any]:
    return {"item": item, "price": float(await price_of(item))}


@app.post("/orders/{ident}")
async def order(ident: str) -> dict[str, Any]:
    rate, price = await asyncio.gather(upstream.get("/json"), price_of(1))
    async with engine.begin() as connection:
        if os.environ.get("ORDERS_EXTRA_QUERY"):
            await connection.scalar(text("SELECT count(*) FROM async_orders"))
        await connection.execute(
            text("INSERT INTO async_orders (ident, total) VALUES (:ident, :total)"),
            {"ident": ident, "total": float(price) * rate.json()["rate"]},
        )
    spread = 1 if os.environ.get("ORDERS_FIXED") else 0
    return {"ident": ident, "total": float(price) * rate.json()["rate"] / spread}


async def init_db() -> None:
    async with engine.begin() as connection:
        await connection.execute(
            text("CREATE TABLE IF NOT EXISTS async_items (id int PRIMARY KEY, price numeric)")
        )
        await connection.execute(
            text("CREATE TABLE IF NOT EXISTS async_orders (ident text, total numeric)")
        )
        await connection.execute(
            text("INSERT INTO async_items VALUES (1, 2.50) ON CONFLICT (id) DO NOTHING")
        )
    await engine.dispose()


if __name__ == "__main__":
    if "--init-db" in sys.argv[1:]:
        asyncio.run(init_db())
    else:
        uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
