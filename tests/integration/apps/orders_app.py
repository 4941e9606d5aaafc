"""The ``app.py`` of the documentation's guides: a Flask orders service with no reproit-otel code.

The walkthrough tests copy it into a folder as ``app.py`` and start it with the commands the
documents show (``opentelemetry-instrument python app.py``). It listens on ``$PORT`` (default
5000, Flask's own) and calls a pricing upstream at ``PRICING_URL`` with ``requests``:

* ``GET /``: 200, no dependency call (``reproit-otel check`` waits for it);
* ``POST /orders`` ``{"cents", "quantity"}``: reads the rate from ``PRICING_URL/json`` and
  answers the total and the price per item; a quantity of 0 divides by zero after the call
  (the planted bug, 500); :data:`FIX` makes it answer 200;
* ``GET /failing-route``: calls the upstream, then raises (500).
"""

from __future__ import annotations

import os

import requests
from flask import Flask, Response, jsonify, request

app = Flask(__name__)
PRICING_URL = os.environ.get("PRICING_URL", "http://127.0.0.1:8101")

BUG = "    return total // quantity\n"
FIX = "    return total // quantity if quantity else 0\n"
"""The planted bug's line and its one-line fix, for tests that fix the copy they run."""


def per_item(total: int, quantity: int) -> int:
    return total // quantity


@app.get("/")
def health() -> Response:
    return jsonify({"ok": True})


@app.post("/orders")
def create_order() -> Response:
    order = request.get_json()
    rate = requests.get(f"{PRICING_URL}/json", timeout=5).json()["rate"]
    total = round(order["cents"] * order["quantity"] * rate)
    return jsonify({"total": total, "per_item": per_item(total, order["quantity"])})


@app.get("/failing-route")
def failing_route() -> Response:
    requests.get(f"{PRICING_URL}/json", timeout=5)
    raise RuntimeError("failing on purpose")


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ.get("PORT", "5000")))
