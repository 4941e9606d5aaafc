"""The shop: a small Flask orders service with four kinds of dependencies.

``POST /orders`` with ``{"sku": "mug", "quantity": 2, "country": "DE"}``:

1. reads the stock from PostgreSQL (psycopg2);
2. asks the pricing service for the unit price and discount (requests, JSON);
3. asks the tax service for the country's rate, over a raw TCP line protocol, through an
   invoke boundary (``reproit_otel.boundary``);
4. streams a packing note from the assistant (requests with ``stream=True``, server-sent
   events);
5. computes the total and stores the order (psycopg2), answering 200 with the order.

``GET /orders/<id>`` reads an order back; ``GET /`` is a health check with no dependency.

The planted bug: the pricing service answers ``"discount_percent": null`` for the SKU
``gift-card``, and :func:`discount_label` formats it as an integer, so ``POST /orders`` with
``{"sku": "gift-card", ...}`` stores the order, then fails with a ``TypeError`` and answers
500.

Apart from the ``boundary`` decorator the service holds no reproit-otel code: capture and
replay are switched on by running it under ``opentelemetry-instrument`` with ``REPROIT_*``
environment variables (see README.md).

Environment: ``PORT`` (default 8100), ``SHOP_DATABASE_URL`` (a libpq DSN),
``PRICING_URL``, ``ASSISTANT_URL``, ``TAX_ADDRESS`` (``host:port``); the defaults match
``upstreams.py``'s default ports. ``python app.py --init-db`` creates the tables and the
stock, and exits.
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
from flask import Flask, jsonify, request
from werkzeug.serving import make_server

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

app = Flask("shop")


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


@app.get("/")
def health() -> Any:
    return jsonify({"service": "shop", "ok": True})


@app.post("/orders")
def create_order() -> Any:
    order = request.get_json(silent=True)
    if not isinstance(order, dict) or not isinstance(order.get("sku"), str):
        return jsonify({"error": 'expected {"sku": ..., "quantity": ..., "country": ...}'}), 400
    sku = order["sku"]
    quantity = order.get("quantity", 1)
    country = order.get("country", "DE")
    if not isinstance(quantity, int) or quantity < 1 or not isinstance(country, str):
        return jsonify({"error": "quantity must be a positive integer"}), 400

    with database() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT stock FROM shop_inventory WHERE sku = %s", (sku,))
        row = cursor.fetchone()
        if row is None:
            return jsonify({"error": f"unknown sku {sku}"}), 404
        if row[0] < quantity:
            return jsonify({"error": f"only {row[0]} left"}), 409

        price = requests.get(f"{PRICING_URL}/prices/{sku}", timeout=5)
        if price.status_code != 200:
            return jsonify({"error": "pricing unavailable"}), 502
        quote = price.json()

        try:
            rate = tax_rate(country)
        except Exception as error:  # the tax service refused: its status says why
            status = getattr(error, "status", None)
            if not isinstance(status, int):
                raise
            return jsonify({"error": str(error)}), status

        note = packing_note(sku, quantity)
        total = total_cents(quote["unit_cents"], quantity, quote["discount_percent"])
        tax = round(total * rate)

        cursor.execute(
            "UPDATE shop_inventory SET stock = stock - %s WHERE sku = %s", (quantity, sku)
        )
        cursor.execute(
            "INSERT INTO shop_orders (sku, quantity, country, total_cents, tax_cents, note) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING id",
            (sku, quantity, country, total, tax, note),
        )
        (order_id,) = cursor.fetchone()
    body = {
        "order": order_id,
        "sku": sku,
        "quantity": quantity,
        "country": country,
        "total_cents": total,
        "discount": discount_label(quote["discount_percent"]),
        "tax_cents": tax,
        "note": note,
    }
    return jsonify(body), 200


@app.get("/orders/<int:order_id>")
def get_order(order_id: int) -> Any:
    with database() as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, sku, quantity, country, total_cents, tax_cents, note "
            "FROM shop_orders WHERE id = %s",
            (order_id,),
        )
        row = cursor.fetchone()
    if row is None:
        return jsonify({"error": f"no order {order_id}"}), 404
    names = ("order", "sku", "quantity", "country", "total_cents", "tax_cents", "note")
    return jsonify(dict(zip(names, row, strict=True)))


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
    server = make_server("127.0.0.1", port, app, threaded=True)
    print(f"shop listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
