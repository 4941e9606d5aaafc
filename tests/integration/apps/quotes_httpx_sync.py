"""A Flask quote service calling its upstream with a sync ``httpx.Client``; no reproit code.

The sync twin of ``quotes_httpx_async.py``: ``POST /quotes/<ident>`` makes the same three
upstream calls one after the other (the price list streamed) and fails with a 500 until
``QUOTES_FIXED=1``; ``QUOTES_OTHER_CURRENCY=1`` changes the query. ``UPSTREAM``.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from flask import Flask

app = Flask(__name__)
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
client = httpx.Client(base_url=UPSTREAM, timeout=10)


@app.get("/rates")
def rates() -> Any:
    return client.get("/json").json()


@app.post("/quotes/<ident>")
def quote(ident: str) -> dict[str, Any]:
    currency = "USD" if os.environ.get("QUOTES_OTHER_CURRENCY") else "EUR"
    value = client.get("/json").json()["rate"]
    with client.stream("GET", "/slow") as response:
        lines = list(response.iter_lines())
    query = client.get("/query", params={"c": currency}).json()["query"]
    spread = 1.0 if os.environ.get("QUOTES_FIXED") else value - 1.5
    return {"ident": ident, "lines": lines, "query": query, "per_line": value / spread}
