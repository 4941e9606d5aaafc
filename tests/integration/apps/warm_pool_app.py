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

``SHOP_CURRENCY`` is part of its configuration: without it (or empty) the order page answers
200 "shop not configured". Variants that answer before the work the recording holds, the
way real applications do when a replay is not what production received:

* ``SHOP_LOGIN_REQUIRED=1``: the view needs a logged-in session, Flask-Login style: an
  anonymous request is redirected (302) to ``/login?next=...``;
* ``SHOP_CSRF=1``: the order is a form protected by a session-bound CSRF token, Flask-WTF
  style: a request without the right token gets the form rendered again, 200;
* ``SHOP_FIXED_MORE=1``: the fix goes on past the old failure point and records the order's
  position among the others of its reference with one more query, then answers 201;
* ``SHOP_SKU``: the item whose price it reads (default ``pen``).
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
from flask import Flask, jsonify, redirect, render_template_string, request, session
from werkzeug.serving import make_server

psycopg2.extras.register_uuid()
app = Flask(__name__)
app.secret_key = "warm-pool-session-key"
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


ORDER_FORM = """<!doctype html>
<title>Order</title>
<h1>Order {{ ref }}</h1>
{% if error %}<p class="flash">{{ error }}</p>{% endif %}
<form method="post">
  <input type="hidden" name="csrf_token" value="{{ token }}">
  <input name="quantity" value="1">
  <button>Order</button>
</form>
"""


@app.get("/login")
def login_page() -> tuple[str, int]:
    return '<form method="post"><input name="user"><button>Log in</button></form>', 200


@app.post("/orders/<ref>")
def order(ref: str) -> Any:
    if os.environ.get("SHOP_EARLY_FAILURE") == "1":
        return jsonify({"error": "configuration missing"}), 500
    if os.environ.get("SHOP_LOGIN_REQUIRED") == "1" and "user_id" not in session:
        return redirect(f"/login?next={request.path}")
    if os.environ.get("SHOP_CSRF") == "1":
        token = session.setdefault("csrf", uuid.uuid4().hex)
        if request.form.get("csrf_token") != token:
            page = render_template_string(
                ORDER_FORM, ref=ref, token=token, error="The form expired, please try again."
            )
            return page, 200
    if not os.environ.get("SHOP_CURRENCY"):
        return "<h1>Shop not configured</h1><p>SHOP_CURRENCY is not set.</p>", 200
    text = sqlalchemy.text
    now = dt.datetime.now(dt.timezone.utc)
    with engine.begin() as connection:
        price = connection.execute(
            text("SELECT price FROM wp_items WHERE sku = :sku"),
            {"sku": os.environ.get("SHOP_SKU", "pen")},
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
    if os.environ.get("SHOP_FIXED_MORE") == "1":
        with engine.connect() as connection:
            position = connection.execute(
                text("SELECT count(*) FROM wp_orders WHERE ref = :ref"), {"ref": ref}
            ).scalar_one()
        return jsonify({"price": str(price), "position": position, "rate": rate}), 201
    if os.environ.get("SHOP_FIXED") == "1":
        return jsonify({"price": str(price), "recent": recent, "rate": rate}), 201
    return jsonify({"error": "pricing failed", "price": str(price)}), 500


if __name__ == "__main__":
    warm_up()
    server = make_server("127.0.0.1", int(sys.argv[1]), app, threaded=True)
    server.serve_forever()
