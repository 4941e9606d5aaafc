"""A Flask order service on psycopg 3 through a ``psycopg_pool`` pool and a sync
``httpx.Client``; no reproit code.

``GET /orders`` lists the orders (the healthy request). ``POST /orders/<ident>`` stores an
order, reads it back through the pool's ``dict_row`` connections, prices it with the
upstream's rate and fails with a 500 (a division by zero) until ``ORDERS_FIXED=1``;
``ORDERS_AUDIT=1`` makes one more query (a changed program). ``DATABASE_URL``, ``UPSTREAM``.
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

import httpx
from flask import Flask
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
client = httpx.Client(base_url=UPSTREAM, timeout=10)
pool = ConnectionPool(
    os.environ.get("DATABASE_URL", "postgresql://127.0.0.1:9/none"),
    min_size=1,
    max_size=2,
    kwargs={"row_factory": dict_row},
    check=ConnectionPool.check_connection,
    open=True,
)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS orders (ident text PRIMARY KEY, qty int NOT NULL, "
    "price numeric(10,2) NOT NULL, placed timestamptz NOT NULL DEFAULT now())"
)


@app.get("/orders")
def orders() -> Any:
    with pool.connection() as conn:
        rows = conn.execute("SELECT ident, qty FROM orders ORDER BY ident").fetchall()
    rate = client.get("/json").json()["rate"]
    return {"orders": rows, "rate": rate}


@app.post("/orders/<ident>")
def place(ident: str) -> dict[str, Any]:
    with pool.connection() as conn:
        with conn.transaction():
            conn.execute(
                "INSERT INTO orders (ident, qty, price) VALUES (%s, %s, %s)",
                (ident, 3, Decimal("9.90")),
            )
            if os.environ.get("ORDERS_AUDIT"):
                conn.execute("SELECT count(*) AS n FROM orders")
        order = conn.execute(
            "SELECT ident, qty, price, placed FROM orders WHERE ident = %s", (ident,)
        ).fetchone()
    assert order is not None
    rate = client.get("/json").json()["rate"]
    discount = Decimal("0") if os.environ.get("ORDERS_FIXED") else Decimal(str(rate)) - 1
    per_unit = order["price"] / (Decimal("1") - discount * 2)
    return {"ident": order["ident"], "qty": order["qty"], "per_unit": str(per_unit)}
