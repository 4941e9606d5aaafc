"""The shop on FastAPI: the same orders service as ``examples/shop/app.py``, served by uvicorn.

Same routes, same dependencies, same environment variables, same planted bug (``POST /orders``
for the SKU ``gift-card`` stores the order, then answers 500 because the pricing service's
``"discount_percent": null`` reaches :func:`discount_label`). The endpoints are plain ``def``
functions, so FastAPI runs them in its thread pool where the blocking ``requests`` and
``psycopg2`` calls belong.

Apart from the ``boundary`` decorator the service holds no reproit-otel code; run it under
``opentelemetry-instrument`` (see README.md). ``python app.py --init-db`` creates the tables.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import psycopg2
import requests
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

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

app = FastAPI(title="shop")


class Order(BaseModel):
    sku: str
    quantity: int = 1
    country: str = "DE"


class TaxError(Exception):
    """The tax service refused; ``status`` is the HTTP status the shop answers with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@contextlib.contextmanager
def database() -> Iterator[Any]:
    """One connection per request; committed when the block succeeds."""
    connection = psycopg2.connect(DATABASE_URL)
    try:
        with connection:
            yield connection
    finally:
        connection.close()


@reproit_otel.boundary("tax", "rate")
def tax_rate(country: str) -> float:
    """The tax rate of ``country``, from the tax service's line protocol."""
    host, _, port = TAX_ADDRESS.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as connection:
        connection.sendall(f"RATE {country}\n".encode())
        answer = connection.makefile("r", encoding="utf-8").readline().strip()
    word, _, rest = answer.partition(" ")
    if word != "OK":
        raise TaxError(rest or "the tax service gave no answer")
    return float(rest)


def packing_note(sku: str, quantity: int) -> str:
    """The assistant's note, read from its event stream as it arrives."""
    words = []
    with requests.post(
        f"{ASSISTANT_URL}/v1/notes",
        json={"sku": sku, "quantity": quantity},
        stream=True,
        timeout=5,
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines(decode_unicode=True):
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


@app.get("/")
def health() -> dict[str, Any]:
    return {"service": "shop", "ok": True}


@app.post("/orders")
def create_order(order: Order) -> Any:
    if order.quantity < 1:
        return _error(400, "quantity must be a positive integer")
    with database() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT stock FROM shop_inventory WHERE sku = %s", (order.sku,))
        row = cursor.fetchone()
        if row is None:
            return _error(404, f"unknown sku {order.sku}")
        if row[0] < order.quantity:
            return _error(409, f"only {row[0]} left")

        price = requests.get(f"{PRICING_URL}/prices/{order.sku}", timeout=5)
        if price.status_code != 200:
            return _error(502, "pricing unavailable")
        quote = price.json()

        try:
            rate = tax_rate(order.country)
        except Exception as error:  # the tax service refused: its status says why
            status = getattr(error, "status", None)
            if not isinstance(status, int):
                raise
            return _error(status, str(error))

        note = packing_note(order.sku, order.quantity)
        total = total_cents(quote["unit_cents"], order.quantity, quote["discount_percent"])
        tax = round(total * rate)

        cursor.execute(
            "UPDATE shop_inventory SET stock = stock - %s WHERE sku = %s",
            (order.quantity, order.sku),
        )
        cursor.execute(
            "INSERT INTO shop_orders (sku, quantity, country, total_cents, tax_cents, note) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (order.sku, order.quantity, order.country, total, tax, note),
        )
        (order_id,) = cursor.fetchone()
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
def get_order(order_id: int) -> Any:
    with database() as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, sku, quantity, country, total_cents, tax_cents, note "
            "FROM shop_orders WHERE id = %s",
            (order_id,),
        )
        row = cursor.fetchone()
    if row is None:
        return _error(404, f"no order {order_id}")
    names = ("order", "sku", "quantity", "country", "total_cents", "tax_cents", "note")
    return dict(zip(names, row, strict=True))


def init_db() -> None:
    """Create the tables and the stock (idempotent)."""
    with database() as connection, connection.cursor() as cursor:
        for statement in SCHEMA:
            cursor.execute(statement)


def main() -> int:
    if "--init-db" in sys.argv[1:]:
        init_db()
        print("shop tables ready", flush=True)
        return 0
    port = int(os.environ.get("PORT", "8100"))
    print(f"shop listening on http://127.0.0.1:{port}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
