"""The shop, async: the orders service of ``examples/shop`` on FastAPI with ``async def``
endpoints, ``httpx.AsyncClient`` for its HTTP upstreams and SQLAlchemy 2's asyncio extension
over psycopg 3 (``postgresql+psycopg``) for PostgreSQL, served by uvicorn.

Same routes, same environment variables, same upstreams (``examples/shop/upstreams.py``), same
tables and the same planted bug as the other shops (``POST /orders`` for the SKU
``gift-card`` stores the order, then answers 500 because the pricing service's
``"discount_percent": null`` reaches :func:`discount_label`). Once the stock is checked, the
price, the tax rate and the packing note are asked for concurrently (``asyncio.gather``); the
note is read from the assistant's event stream as it arrives (``AsyncClient.stream``).

Apart from the ``boundary`` decorator on the tax call (a line protocol over TCP, which no
HTTP or SQL recorder sees) the service holds no reproit-otel code; run it under
``opentelemetry-instrument`` (see README.md). ``python app.py --init-db`` creates the tables.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

import reproit_otel

DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
PRICING_URL = os.environ.get("PRICING_URL", "http://127.0.0.1:8101")
ASSISTANT_URL = os.environ.get("ASSISTANT_URL", "http://127.0.0.1:8102")
TAX_ADDRESS = os.environ.get("TAX_ADDRESS", "127.0.0.1:8103")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS shop_inventory (
        sku TEXT PRIMARY KEY,
        stock INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS shop_orders (
        id SERIAL PRIMARY KEY,
        sku TEXT NOT NULL,
        quantity INTEGER NOT NULL,
        country TEXT NOT NULL,
        total_cents INTEGER NOT NULL,
        tax_cents INTEGER NOT NULL,
        note TEXT NOT NULL)""",
    """INSERT INTO shop_inventory (sku, stock)
        VALUES ('mug', 100000), ('tea', 100000), ('gift-card', 100000)
        ON CONFLICT (sku) DO NOTHING""",
)


def async_url(dsn: str) -> str:
    """The libpq URL ``postgresql://...`` as SQLAlchemy's psycopg 3 URL."""
    scheme, _, rest = dsn.partition("://")
    return f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else dsn


engine = create_async_engine(async_url(DATABASE_URL), pool_size=5)
upstream = httpx.AsyncClient(timeout=5)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await upstream.aclose()
    await engine.dispose()


app = FastAPI(title="shop", lifespan=lifespan)


class Order(BaseModel):
    sku: str
    quantity: int = 1
    country: str = "DE"


class TaxError(Exception):
    """The tax service refused; ``status`` is the HTTP status the shop answers with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@reproit_otel.boundary("tax", "rate")
async def tax_rate(country: str) -> float:
    """The tax rate of ``country``, from the tax service's line protocol."""
    host, _, port = TAX_ADDRESS.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"RATE {country}\n".encode())
        await writer.drain()
        answer = (await reader.readline()).decode("utf-8").strip()
    finally:
        writer.close()
        await writer.wait_closed()
    word, _, rest = answer.partition(" ")
    if word != "OK":
        raise TaxError(rest or "the tax service gave no answer")
    return float(rest)


async def price_of(sku: str) -> httpx.Response:
    return await upstream.get(f"{PRICING_URL}/prices/{sku}")


async def packing_note(sku: str, quantity: int) -> str:
    """The assistant's note, read from its event stream as it arrives."""
    words = []
    async with upstream.stream(
        "POST", f"{ASSISTANT_URL}/v1/notes", json={"sku": sku, "quantity": quantity}
    ) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data != "[DONE]":
                words.append(json.loads(data)["text"])
    return " ".join(words)


def total_cents(unit_cents: int, quantity: int, discount_percent: int | None) -> int:
    """Price of ``quantity`` units after the discount (none when ``discount_percent`` is null)."""
    return unit_cents * quantity * (100 - (discount_percent or 0)) // 100


def discount_label(discount_percent: int | None) -> str:
    """How the receipt shows the discount: ``"-10%"``, or ``""`` without one.

    The bug: the gift card's discount is ``None``, not ``0``, and ``None`` cannot be
    formatted with ``:d`` (TypeError), after the order was stored.
    """
    return f"-{discount_percent:d}%" if discount_percent != 0 else ""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def fetch_order(connection: AsyncConnection, order_id: int) -> dict[str, Any] | None:
    result = await connection.execute(
        text(
            "SELECT id, sku, quantity, country, total_cents, tax_cents, note "
            "FROM shop_orders WHERE id = :id"
        ),
        {"id": order_id},
    )
    row = result.first()
    if row is None:
        return None
    names = ("order", "sku", "quantity", "country", "total_cents", "tax_cents", "note")
    return dict(zip(names, row, strict=True))


@app.get("/")
async def health() -> dict[str, Any]:
    return {"service": "shop", "ok": True}


@app.post("/orders")
async def create_order(order: Order) -> Any:
    if order.quantity < 1:
        return _error(400, "quantity must be a positive integer")
    async with engine.begin() as connection:
        stock = await connection.scalar(
            text("SELECT stock FROM shop_inventory WHERE sku = :sku"), {"sku": order.sku}
        )
        if stock is None:
            return _error(404, f"unknown sku {order.sku}")
        if stock < order.quantity:
            return _error(409, f"only {stock} left")

        # Three upstreams at once; every answer is awaited before any is judged.
        price, rate, note = await asyncio.gather(
            price_of(order.sku),
            tax_rate(order.country),
            packing_note(order.sku, order.quantity),
            return_exceptions=True,
        )
        if isinstance(rate, TaxError):  # the tax service refused: its status says why
            return _error(rate.status, str(rate))
        for outcome in (price, rate, note):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(price, httpx.Response) and isinstance(rate, float)
        assert isinstance(note, str)
        if price.status_code != 200:
            return _error(502, "pricing unavailable")
        quote = price.json()
        total = total_cents(quote["unit_cents"], order.quantity, quote["discount_percent"])
        tax = round(total * rate)

        await connection.execute(
            text("UPDATE shop_inventory SET stock = stock - :quantity WHERE sku = :sku"),
            {"quantity": order.quantity, "sku": order.sku},
        )
        order_id = await connection.scalar(
            text(
                "INSERT INTO shop_orders (sku, quantity, country, total_cents, tax_cents, note) "
                "VALUES (:sku, :quantity, :country, :total, :tax, :note) RETURNING id"
            ),
            {
                "sku": order.sku,
                "quantity": order.quantity,
                "country": order.country,
                "total": total,
                "tax": tax,
                "note": note,
            },
        )
    return {
        "order": order_id,
        "sku": order.sku,
        "quantity": order.quantity,
        "country": order.country,
        "total_cents": total,
        "discount": discount_label(quote["discount_percent"]),
        "tax_cents": tax,
        "note": note,
    }


@app.get("/orders/{order_id}")
async def get_order(order_id: int) -> Any:
    async with engine.connect() as connection:
        found = await fetch_order(connection, order_id)
    if found is None:
        return _error(404, f"no order {order_id}")
    return found


async def init_db() -> None:
    """Create the tables and the stock (idempotent)."""
    async with engine.begin() as connection:
        for statement in SCHEMA:
            await connection.execute(text(statement))
    await engine.dispose()


def main() -> int:
    if "--init-db" in sys.argv[1:]:
        asyncio.run(init_db())
        print("shop tables ready", flush=True)
        return 0
    port = int(os.environ.get("PORT", "8100"))
    print(f"shop listening on http://127.0.0.1:{port}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
