"""A Flask basket service that prices its items in parallel on a thread pool; no reproit code.

``GET /basket/<ident>?skus=a,b,c`` asks the upstream for each item's price on a module-level
``ThreadPoolExecutor`` (``requests`` calls made on the pool's threads, not the request's),
then for a discount on a ``threading.Thread`` of its own, and fails with a 500 (a division by
zero) until ``BASKET_FIXED=1``. ``GET /health`` makes one pooled call, so a warm process has
its pool threads started before the failing request. ``UPSTREAM``.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests
from flask import Flask, request

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
pool = ThreadPoolExecutor(max_workers=3)
http = requests.Session()


def price(sku: str) -> str:
    answer = http.get(f"{UPSTREAM}/query", params={"sku": sku}, timeout=10)
    return str(answer.json()["query"])


@app.get("/health")
def health() -> dict[str, Any]:
    return {"priced": pool.submit(price, "health").result()}


@app.get("/basket/<ident>")
def basket(ident: str) -> dict[str, Any]:
    skus = request.args.get("skus", "").split(",")
    prices = list(pool.map(price, skus))
    discount: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: discount.update(http.get(f"{UPSTREAM}/json", timeout=10).json())
    )
    worker.start()
    worker.join()
    spread = 1.0 if os.environ.get("BASKET_FIXED") else discount["rate"] - 1.5
    return {"ident": ident, "prices": prices, "per_item": len(prices) / spread}
