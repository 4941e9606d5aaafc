"""A FastAPI price service whose requests make concurrent upstream calls; no reproit code.

``POST /prices/{ident}?order=slow-first|fast-first`` first starts an audit call as a task of
its own (``asyncio.create_task``, awaited at the end), then gathers

* three ``POST /echo`` calls made at one call site with different bodies (skus ``a``, ``b``,
  ``c``); the upstream holds each answer back by the ``x-delay`` that ``order`` gives it, so
  the answers come back in the reverse of the order the calls were made (``slow-first``) or in
  that order (``fast-first``);
* three streams of ``GET /slow`` made at one call site: one read partly (its first line), one
  read fully, one abandoned unread.

It then fails with a 500 (``ZeroDivisionError``) until ``PRICES_FIXED=1``;
``PRICES_OTHER_SKU=1`` asks for sku ``d`` instead of ``c``. ``GET /health`` answers 200 and
leaves a FastAPI background task that calls ``GET /json`` after the response.
``PORT``, ``UPSTREAM``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx
import uvicorn
from fastapi import BackgroundTasks, FastAPI

app = FastAPI()
UPSTREAM = os.environ.get("UPSTREAM", "http://127.0.0.1:9")
DELAYS = {"slow-first": (0.4, 0.2, 0.0), "fast-first": (0.0, 0.2, 0.4)}
_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    global _client
    if _client is None:
        _client = httpx.AsyncClient(base_url=UPSTREAM, timeout=10)
    return _client


async def warm_rates() -> None:
    await client().get("/json")


@app.get("/health")
async def health(background: BackgroundTasks) -> dict[str, str]:
    background.add_task(warm_rates)
    return {"status": "ok"}


async def price(sku: str, delay: float) -> Any:
    response = await client().post("/echo", json={"sku": sku}, headers={"x-delay": str(delay)})
    return response.json()


async def first_line() -> str:
    async with client().stream("GET", "/slow") as response:
        async for line in response.aiter_lines():
            return line
    return ""


async def all_lines() -> list[str]:
    async with client().stream("GET", "/slow") as response:
        return [line async for line in response.aiter_lines()]


async def unread() -> int:
    async with client().stream("GET", "/slow") as response:
        return response.status_code


@app.post("/prices/{ident}")
async def prices(ident: str, order: str = "slow-first") -> dict[str, Any]:
    audit = asyncio.create_task(client().get("/query", params={"audit": ident}))
    skus = ("a", "b", "d" if os.environ.get("PRICES_OTHER_SKU") else "c")
    answers = await asyncio.gather(
        *(price(sku, delay) for sku, delay in zip(skus, DELAYS[order], strict=True)),
        first_line(),
        all_lines(),
        unread(),
    )
    audited = (await audit).json()["query"]
    divisor = 1 if os.environ.get("PRICES_FIXED") else 0
    return {
        "ident": ident,
        "prices": answers[:3],
        "first": answers[3],
        "lines": answers[4],
        "unread": answers[5],
        "audited": audited,
        "per_sku": len(skus) / divisor,  # ZeroDivisionError: a 500 until fixed
    }


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
