"""A FastAPI quote service calling its upstream with ``httpx.AsyncClient``; no reproit code.

``POST /quotes/{ident}`` gathers three upstream calls (a JSON rate, a streamed price list, a
query in the quote currency) and fails with a 500 while the rate is the upstream's 1.5
(``QUOTES_FIXED=1`` is the fix; ``QUOTES_OTHER_CURRENCY=1`` changes the query).
``GET /rates`` is a healthy call through the same pooled client. ``PORT``, ``UPSTREAM``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

app = FastAPI()
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(base_url=UPSTREAM, timeout=10)
    return _client


@app.get("/rates")
async def rates() -> Any:
    return (await client().get("/json")).json()


async def price_lines() -> list[str]:
    async with client().stream("GET", "/slow") as response:
        return [line async for line in response.aiter_lines()]


@app.post("/quotes/{ident}")
async def quote(ident: str) -> dict[str, Any]:
    currency = "USD" if os.environ.get("QUOTES_OTHER_CURRENCY") else "EUR"
    rate, lines, query = await asyncio.gather(
        client().get("/json"), price_lines(), client().get("/query", params={"c": currency})
    )
    value = rate.json()["rate"]
    spread = 1.0 if os.environ.get("QUOTES_FIXED") else value - 1.5
    return {
        "ident": ident,
        "lines": lines,
        "query": query.json()["query"],
        "per_line": value / spread,  # ZeroDivisionError: a 500 until fixed
    }


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
