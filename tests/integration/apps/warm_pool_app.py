"""A Flask shop on a SQLAlchemy pool with pre-ping that warms itself up at boot.

Run under ``opentelemetry-instrument`` as ``python warm_pool_app.py PORT``; ``DATABASE_URL``
is a PostgreSQL DSN, ``UPSTREAM`` the rates upstream (``tests/integration/upstream.py``).
No reproit-otel code.

At boot, before serving, it warms up: one query on the pool and one call to the upstream
(both tolerate failure, as warm-ups do). ``GET /`` answers ``ok``. ``POST /orders/<ref>``
reads the item's price, inserts an order keyed by a fresh ``uuid4`` with the clock's time,
bumps a counter inside a savepoint, counts the last 30 days of orders, asks the upstream for
the rate and then fails (the planted bug: 500). With ``SHOP_FIXED=1`` it answers 201; with
``SHOP_EARLY_FAILURE=1`` it fails before touching anything (a different failure).
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import uuid
from typing import Any

import psycopg2.extras
import requests
import sqlalchemy
from flask import Flask, jsonify
from werkzeug.serving import make_server

psycopg2.extras.register_uuid()
app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
engine = sqlalchemy.create_engine(
    os.environ.get("DATABASE_URL", "postgresql://127.0.0.1:9/none").replace(
        "postgresql://", "postgresql+psycopg2://", 1
    ),
    pool_pre_ping=True,
    pool_size=2,
)


def warm_up() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    try:
        with engine.connect() as connection:
            seen["items"] = connection.execute(
                sqlalchemy.text("SELECT count(*) FROM wp_items")
            ).scalar()
    except sqlalchemy.exc.SQLAlchemyError as error:
        seen["items"] = type(error).__name__
    try:
        seen["rates"] = requests.get(f"{UPSTREAM}/json", timeout=5).status_code
    except requests.RequestException as error:
        seen["rates"] = type(error).__name__
    return seen


@app.get("/")
def health() -> tuple[str, int]:
    return "ok", 200


@app.post("/orders/<ref>")
def order(ref: str) -> Any:
    if os.environ.get("SHOP_EARLY_FAILURE") == "1":
        return jsonify({"error": "configuration missing"}), 500
    text = sqlalchemy.text
    now = dt.datetime.now(dt.timezone.utc)
    with engine.begin() as connection:
        price = connection.execute(
            text("SELECT price FROM wp_items WHERE sku = :sku"), {"sku": "pen"}
        ).scalar_one()
        order_id = uuid.uuid4()
        connection.execute(
            text("INSERT INTO wp_orders (id, ref, at) VALUES (:id, :ref, :at)"),
            {"id": order_id, "ref": ref, "at": now},
        )
        with connection.begin_nested():
            connection.execute(text("UPDATE wp_items SET sold = sold + 1 WHERE sku = 'pen'"))
        recent = connection.execute(
            text("SELECT count(*) FROM wp_orders WHERE at > :since"),
            {"since": now - dt.timedelta(days=30)},
        ).scalar_one()
    rate = requests.get(f"{UPSTREAM}/json", timeout=5).json()
    if os.environ.get("SHOP_FIXED") == "1":
        return jsonify({"price": str(price), "recent": recent, "rate": rate}), 201
    return jsonify({"error": "pricing failed", "price": str(price)}), 500


if __name__ == "__main__":
    warm_up()
    server = make_server("127.0.0.1", int(sys.argv[1]), app, threaded=True)
    server.serve_forever()
